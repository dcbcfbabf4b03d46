for _, k in ipairs(KEYS) do
  if redis.call('get', k) ~= ARGV[1] then return 0 end
end
for _, k in ipairs(KEYS) do redis.call('pexpire', k, ARGV[2]) end
return 1