local n = 0
for i, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[1] then
    redis.call('del', k)
    n = n + 1
    if ARGV[2] ~= '' then redis.pcall(ARGV[2], ARGV[2 + i], k) end
  end
end
return n