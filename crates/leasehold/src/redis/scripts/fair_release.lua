if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
