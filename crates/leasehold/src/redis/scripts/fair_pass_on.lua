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
    if ARGV[2] ~= '' and owner ~= '-' then
      redis.pcall(ARGV[3], ARGV[2] .. ':' .. owner, KEYS[1])
    end
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
    -- On its client's channel for this key: only that client reads it. A waiter without an
    -- owner is not subscribed (its next attempt claims the lock). The message carries the
    -- handoff's fields to the one client that uses them, so the reply is a bare 2: a Lua
    -- table goes out through the server's reply list, a slower write on the handoff's path.
    if ARGV[2] ~= '' and owner ~= ARGV[4] and owner ~= '-' then
      redis.pcall(ARGV[3], ARGV[2] .. ':' .. owner, 'handoff:' .. ticket .. ':' .. attempt .. ':' .. n)
      return 2
    end
    return {2, ticket, tonumber(attempt), n, redis.call('zrange', KEYS[2], 0, 0)[1]}
  end
end
redis.call('del', KEYS[1])
-- Waiters may be left behind more than 100 dead entries: only the queue's head can take the
-- lock, so its client is woken (if its entry is alive and names one).
if ARGV[2] ~= '' then
  local head = redis.call('zrange', KEYS[2], 0, 0)[1]
  local entry = head and redis.call('get', KEYS[3] .. head)
  local owner = entry and string.match(entry, '^%S+ %d+ %d (%S+) %d+$')
  if owner and owner ~= '-' then redis.pcall(ARGV[3], ARGV[2] .. ':' .. owner, KEYS[1]) end
end
return 1
