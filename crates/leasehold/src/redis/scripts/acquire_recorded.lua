if KEYS[3] and tonumber(redis.call('get', KEYS[3]) or '0') >= 9007199254740992 then
  return redis.error_reply('LEASEHOLD_FENCING_EXHAUSTED the fencing counter is at 2^53 or beyond')
end
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('pttl', KEYS[1])}
end
local n = 0
local extra = {}
if KEYS[3] then
  n = redis.call('incr', KEYS[3])
  -- '%d': exact below 2^53, where a number's own conversion may round.
  extra = {'fencing', string.format('%d', n)}
end
local failed = record(3, extra)
if failed then return {1, n, failed} end
return {1, n}