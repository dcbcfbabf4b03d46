-- Appends an event to the lock's history stream KEYS[2] (in the lock's slot): ARGV[at] is the
-- cap, ARGV[at + 1] the oldest stream id kept (ms; '' leaves the retention's trim to the next
-- acquisition), ARGV[at + 2] the retention (ms), and the ARGV after them the event's
-- field/value pairs, after `extra`'s. Returns the append's error, or nil. redis.pcall: a
-- refused append must not fail the lock operation, which has already written (scripts do not
-- roll back).
local function record(at, extra)
  for i = at + 3, #ARGV do extra[#extra + 1] = ARGV[i] end
  local added = redis.pcall('xadd', KEYS[2], 'MAXLEN', '=', ARGV[at], '*', unpack(extra))
  if type(added) == 'table' and added.err then return added.err end
  if ARGV[at + 1] ~= '' then redis.pcall('xtrim', KEYS[2], 'MINID', '~', ARGV[at + 1]) end
  redis.pcall('pexpire', KEYS[2], ARGV[at + 2])
  return nil
end
