if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('get', KEYS[2]) == ARGV[1] then
  local left = redis.call('pttl', KEYS[2])
  if left > 0 then
    redis.call('pexpire', KEYS[1], left)
    return 1
  end
end
redis.call('del', KEYS[1])
if ARGV[2] ~= '' then redis.pcall(ARGV[3], ARGV[2], KEYS[1]) end
return 1