for _ = 1, 100 do
  local popped = redis.call('zpopmin', KEYS[2])
  local ticket = popped[1]
  if not ticket then break end
  local entry = redis.call('get', KEYS[3] .. ticket)
  local token, window, fencing, owner, attempt
  if entry then
    token, window, fencing, owner, attempt = string.match(entry, '^(%S+) (%d+) (%d) (%S+) (%d+)$')
  end
  if token and fencing == '1'
    and tonumber(redis.call('get', KEYS[4]) or '0') >= 9007199254740992 then
    -- No exact number is left for it (past 2^53): it keeps its place, the lock is freed, and
    -- it is woken, so that its next attempt reports the error.
    redis.call('zadd', KEYS[2], popped[2], ticket)
    redis.call('del', KEYS[1])
    if ARGV[2] ~= '' then redis.pcall(ARGV[3], ARGV[2], KEYS[1]) end
    return 1
  end
  if token then
    redis.call('set', KEYS[1], token, 'PX', window)
    local n = 0
    if fencing == '1' then
      -- Kept for a claim (the waiter's next attempt, if the message is lost).
      n = redis.call('incr', KEYS[4])
      redis.call('set', KEYS[3] .. ticket, 'granted ' .. n, 'PX', 2 * tonumber(window))
    else
      redis.call('del', KEYS[3] .. ticket)
    end
    if ARGV[2] ~= '' and owner ~= ARGV[4] then
      redis.pcall(ARGV[3], ARGV[2], 'handoff:' .. ticket .. ':' .. attempt .. ':' .. n)
    end
    return {2, ticket, tonumber(attempt), n, redis.call('zrange', KEYS[2], 0, 0)[1]}
  end
end
redis.call('del', KEYS[1])
-- Waiters may be left behind more than 100 dead entries: wake them to take the lock.
if ARGV[2] ~= '' and redis.call('zcard', KEYS[2]) > 0 then redis.pcall(ARGV[3], ARGV[2], KEYS[1]) end
return 1