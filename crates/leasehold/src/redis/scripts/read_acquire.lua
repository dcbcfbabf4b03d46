local w = redis.call('pttl', KEYS[2])
if w ~= -2 then return {0, w} end
local i = redis.call('pttl', KEYS[3])
if i ~= -2 then return {0, i} end
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('zrange', KEYS[1], -1, -1, 'WITHSCORES')[2]
redis.call('pexpire', KEYS[1], math.max(1, tonumber(last) - now + 1))
return {1, 0}