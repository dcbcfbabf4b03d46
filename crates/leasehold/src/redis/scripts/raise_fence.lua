if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[2])
if tonumber(redis.call('get', KEYS[2]) or '0') < n then redis.call('set', KEYS[2], ARGV[2]) end
return 1