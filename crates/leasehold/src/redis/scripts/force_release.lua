if redis.call('get', KEYS[1]) ~= ARGV[1] then
  if redis.call('hget', KEYS[3], 'force_id') == ARGV[3] then
    return {1, tonumber(redis.call('hget', KEYS[3], 'fencing_counter'))}
  end
  return {0}
end
local c = redis.call('get', KEYS[2])
if c and not tonumber(c) then return {-1} end
redis.call('del', KEYS[1])
local n = redis.call('incr', KEYS[2])
local t = redis.call('time')
redis.call('del', KEYS[3])
redis.call('hset', KEYS[3], 'at_ms', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
  'fencing_counter', n, 'force_id', ARGV[3], unpack(ARGV, 4))
redis.call('pexpire', KEYS[3], ARGV[2])
return {1, n}