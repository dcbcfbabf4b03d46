if tonumber(redis.call('get', KEYS[2]) or '0') >= 9007199254740992 then
  return redis.error_reply('LEASEHOLD_FENCING_EXHAUSTED the fencing counter is at 2^53 or beyond')
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local term = redis.call('incr', KEYS[2])
  -- The winner's token after a newline (no id or token has one): leader() believes the record
  -- only while the lock key still holds that token (M5).
  redis.call('set', KEYS[3], term .. ' ' .. ARGV[3] .. '\n' .. ARGV[1])
  if ARGV[4] ~= '' then redis.pcall(ARGV[5], ARGV[4], 'elected') end
  return {1, term}
end
return {0, redis.call('pttl', KEYS[1])}