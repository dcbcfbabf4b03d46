local expiry = redis.call('zscore', KEYS[1], ARGV[1])
if not expiry then return 0 end
if tonumber(expiry) <= now then
  redis.call('zrem', KEYS[1], ARGV[1])
  keep(now)
  return 0
end
redis.call('zadd', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
keep(now)
return 1