-- The check of a fenced read or write (joined before each): a number below the highest seen,
-- or equal to it from another writer (its token's hash), is refused with the highest seen.
local n = tonumber(ARGV[1])
local writer = redis.sha1hex(ARGV[2])
local seen = redis.call('hget', KEYS[1], 'fence')
if seen then
  local s = tonumber(seen)
  if n < s then return {0, seen} end
  if n == s and redis.call('hget', KEYS[1], 'writer') ~= writer then return {0, seen} end
end
