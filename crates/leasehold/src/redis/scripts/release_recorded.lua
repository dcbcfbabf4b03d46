local deleted
if ARGV[4] == 'delex' then
  deleted = redis.call('delex', KEYS[1], 'IFEQ', ARGV[1])
elseif ARGV[4] == 'delifeq' then
  deleted = redis.call('delifeq', KEYS[1], ARGV[1])
elseif redis.call('get', KEYS[1]) == ARGV[1] then
  deleted = redis.call('del', KEYS[1])
end
if deleted ~= 1 then return 0 end
if ARGV[2] ~= '' then redis.pcall(ARGV[3], ARGV[2], KEYS[1]) end
local failed = record(5, {})
if failed then return {1, failed} end
return 1