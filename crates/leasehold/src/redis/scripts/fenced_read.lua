redis.call('hset', KEYS[1], 'fence', ARGV[1], 'writer', writer)
return {1, redis.call('hget', KEYS[1], 'value')}