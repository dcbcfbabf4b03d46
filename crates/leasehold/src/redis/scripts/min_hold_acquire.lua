if KEYS[3] and tonumber(redis.call('get', KEYS[3]) or '0') >= 9007199254740992 then
  return redis.error_reply('LEASEHOLD_FENCING_EXHAUSTED the fencing counter is at 2^53 or beyond')
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[1], 'PX', ARGV[3])
  if KEYS[3] then return {1, redis.call('incr', KEYS[3])} end
  return {1, 0}
end
return {0, redis.call('pttl', KEYS[1])}