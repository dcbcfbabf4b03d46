local holder = redis.call('get', KEYS[1])
local entry = KEYS[3] .. ARGV[3]
if holder == ARGV[1] then
  -- Handed to us (or taken by an earlier attempt of ours whose reply was lost): a full TTL.
  local grant = ARGV[7] == '1' and redis.call('get', entry)
  local number = grant and string.match(grant, '^granted (%d+)$')
  -- Only the number of this very tenure: nothing draws from the counter while the key holds
  -- our token, so a grant below the counter is stale (an earlier tenure's, U2) and a repeat of
  -- our take must draw a new number, never hand back an older one.
  if number and number ~= redis.call('get', KEYS[4]) then number = nil end
  if ARGV[7] == '1' and not (number and number ~= '0') and exhausted() then
    return redis.error_reply(EXHAUSTED)
  end
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('zrem', KEYS[2], ARGV[3])
  local n = 0
  if ARGV[7] == '1' then
    if number and number ~= '0' then
      n = tonumber(number)
    else
      n = redis.call('incr', KEYS[4])
    end
  end
  redis.call('del', entry)
  return {1, n}
end
local pruning = false
if not holder then
  -- The first live waiter, if any (dead entries at the head dropped, at most 100 a call).
  local first
  for _ = 1, 100 do
    first = redis.call('zrange', KEYS[2], 0, 0)[1]
    if not first or entry_of(first) then break end
    redis.call('zrem', KEYS[2], first)
    first = nil
  end
  -- Bound reached: whoever is first now (live or not, unread) still counts as ahead of us;
  -- only an empty queue, or us at its head, lets this attempt take the lock.
  pruning = not first
  if pruning then first = redis.call('zrange', KEYS[2], 0, 0)[1] end
  if not first or first == ARGV[3] then
    if ARGV[7] == '1' and exhausted() then return redis.error_reply(EXHAUSTED) end
    redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
    if first then redis.call('zrem', KEYS[2], first) end
    -- Our entry goes whether or not we were queued: a `granted n` left by an earlier handoff
    -- must not be claimed by a repeat of this attempt (U2).
    redis.call('del', entry)
    local n = 0
    if ARGV[7] == '1' then n = redis.call('incr', KEYS[4]) end
    return {1, n}
  end
end
if ARGV[6] == '1' then
  if not redis.call('zscore', KEYS[2], ARGV[3]) then
    -- Behind the last one queued: arrival order.
    local last = redis.call('zrange', KEYS[2], -1, -1, 'WITHSCORES')[2]
    redis.call('zadd', KEYS[2], (tonumber(last) or 0) + 1, ARGV[3])
  end
  redis.call('set', entry,
    ARGV[1] .. ' ' .. ARGV[4] .. ' ' .. ARGV[7] .. ' ' .. ARGV[9] .. ' ' .. ARGV[8],
    'PX', ARGV[5])
  -- The queue never expires (a queue left with a TTL by an older version loses it): its
  -- members leave only by a release's pop, their own claim or leave, or as dead heads.
  redis.call('persist', KEYS[2])
end
-- Dead entries left to drop: come back at once rather than when the holder's lease ends.
if pruning then return {0, 0} end
return {0, redis.call('pttl', KEYS[1])}