redis.call('hset', KEYS[1], 'value', ARGV[3], 'fence', ARGV[1], 'writer', writer)
return {1, ARGV[1]}