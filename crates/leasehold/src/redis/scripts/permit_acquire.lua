redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local held = redis.call('zcard', KEYS[1])
local limit = redis.call('get', KEYS[2])
if limit and limit ~= ARGV[3] and held > 0 then
  return redis.error_reply('LEASEHOLD_PERMITS ' .. limit)
end
if held < tonumber(ARGV[3]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('set', KEYS[2], ARGV[3])
  keep(now)
  return {1, 0}
end
local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')[2]
return {0, tonumber(first) - now}