-- Delete a fenced record if it carries the given fence.
-- KEYS[1] record key; ARGV[1] fence
-- Returns 1 when deleted, 0 otherwise.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE record key ' .. KEYS[1] .. ' holds a ' .. kind)
end
if redis.call('HGET', KEYS[1], 'fence') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
