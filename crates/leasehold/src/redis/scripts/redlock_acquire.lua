if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if KEYS[2] then return {1, tonumber(redis.call('get', KEYS[2]) or '0')} end
  return {1, 0}
end
return {0, redis.call('pttl', KEYS[1])}