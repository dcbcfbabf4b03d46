if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('get', KEYS[2]) == ARGV[1] then
  local left = redis.call('pttl', KEYS[2])
  if left > 0 then
    -- Kept until the hold ends under a value no token-checked extend or release matches
    -- (KEPT_PREFIX): a renewal sent before this release cannot re-extend it (L2).
    redis.call('set', KEYS[1], 'kept:' .. ARGV[1], 'PX', left)
    return 1
  end
end
redis.call('del', KEYS[1])
if ARGV[2] ~= '' then redis.pcall(ARGV[3], ARGV[2], KEYS[1]) end
return 1