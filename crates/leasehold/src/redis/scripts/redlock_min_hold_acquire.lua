if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[1], 'PX', ARGV[3])
  if KEYS[3] then return {1, tonumber(redis.call('get', KEYS[3]) or '0')} end
  return {1, 0}
end
return {0, redis.call('pttl', KEYS[1])}