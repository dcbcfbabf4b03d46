if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- The counter as stored (a string, exact): a Lua number would round it past 2^53 (M8).
  if KEYS[2] then return {1, redis.call('get', KEYS[2]) or '0'} end
  return {1, 0}
end
return {0, redis.call('pttl', KEYS[1])}