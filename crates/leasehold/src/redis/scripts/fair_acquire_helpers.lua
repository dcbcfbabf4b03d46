-- A waiter's entry: token, handoff window, fencing flag, owner, attempt (nil if it expired).
local function entry_of(ticket)
  local entry = redis.call('get', KEYS[3] .. ticket)
  if entry then
    return string.match(entry, '^(%S+) (%d+) (%d) (%S+) (%d+)$')
  end
  return nil
end
-- Past 2^53 the next number would be rounded (Lua numbers are doubles): none is issued.
local function exhausted()
  return tonumber(redis.call('get', KEYS[4]) or '0') >= 9007199254740992
end
local EXHAUSTED = 'LEASEHOLD_FENCING_EXHAUSTED the fencing counter is at 2^53 or beyond'
