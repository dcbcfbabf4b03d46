local n = tonumber(ARGV[1])
local writer = redis.sha1hex(ARGV[2])
local seen = redis.call('hget', KEYS[1], 'fence')
if seen then
  local s = tonumber(seen)
  if n < s then return {0, seen} end
  if n == s and redis.call('hget', KEYS[1], 'writer') ~= writer then return {0, seen} end
end
redis.call('hset', KEYS[1], 'value', ARGV[3], 'fence', ARGV[1], 'writer', writer)
return {1, ARGV[1]}