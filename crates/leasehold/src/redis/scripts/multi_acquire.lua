for i, k in ipairs(KEYS) do
  local p = redis.call('pttl', k)
  if p ~= -2 then return {0, i, p} end
end
for _, k in ipairs(KEYS) do redis.call('set', k, ARGV[1], 'PX', ARGV[2]) end
return {1, 0, 0}