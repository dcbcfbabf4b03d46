local expiry = redis.call('zscore', KEYS[1], ARGV[1])
if not expiry then return 0 end
redis.call('zrem', KEYS[1], ARGV[1])
keep(now)
if tonumber(expiry) <= now then return 0 end
if ARGV[2] ~= '' then redis.pcall(ARGV[3], ARGV[2], KEYS[1]) end
return 1