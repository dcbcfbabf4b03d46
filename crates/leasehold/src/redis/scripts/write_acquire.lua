local function mark()
  if ARGV[4] == '1' then
    local i = redis.call('get', KEYS[3])
    if not i or i == ARGV[1] then redis.call('set', KEYS[3], ARGV[1], 'PX', ARGV[3]) end
  end
end
local w = redis.call('pttl', KEYS[2])
if w ~= -2 then
  mark()
  return {0, w}
end
local i = redis.call('get', KEYS[3])
if i and i ~= ARGV[1] then return {0, redis.call('pttl', KEYS[3])} end
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')[2]
if first then
  mark()
  return {0, tonumber(first) - now}
end
if ARGV[5] == '1' and tonumber(redis.call('get', KEYS[4]) or '0') >= 9007199254740992 then
  return redis.error_reply('LEASEHOLD_FENCING_EXHAUSTED the fencing counter is at 2^53 or beyond')
end
redis.call('set', KEYS[2], ARGV[1], 'PX', ARGV[2])
if i then redis.call('del', KEYS[3]) end
local n = 0
if ARGV[5] == '1' then n = redis.call('incr', KEYS[4]) end
return {1, n}