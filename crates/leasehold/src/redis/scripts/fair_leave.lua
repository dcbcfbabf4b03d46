redis.call('zrem', KEYS[2], ARGV[5])
redis.call('del', KEYS[3] .. ARGV[5])
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
