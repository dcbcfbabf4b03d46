-- Both keys live as long as the permit that expires last.
local function keep(now)
  local last = redis.call('zrange', KEYS[1], -1, -1, 'WITHSCORES')[2]
  if last then
    local ms = math.max(1, tonumber(last) - now + 1)
    redis.call('pexpire', KEYS[1], ms)
    if redis.call('exists', KEYS[2]) == 1 then redis.call('pexpire', KEYS[2], ms) end
  else
    redis.call('del', KEYS[2])
  end
end
