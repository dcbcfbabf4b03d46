local current = redis.call('get', KEYS[1])
if current == false or tonumber(current) < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
  return ARGV[1]
end
return current