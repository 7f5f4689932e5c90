-- Raise a fence counter to at least a given fence, only while the lease still holds
-- our token (so every later grant on this node comes after the raise).
-- KEYS[1] lease key, KEYS[2] fence counter
-- ARGV[1] owner token, ARGV[2] fence (decimal)
-- Returns the counter after the raise, or -1 when the lease is not ours here.

-- How long a fence counter outlives its last write, in milliseconds (the
-- store's fence retention: the Rust side replaces this line when it differs).
local fence_retention_ms = '86400000'
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local current = redis.call('GET', KEYS[2])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' is not an integer')
end
if current == false or tonumber(current) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', fence_retention_ms)
  return tonumber(ARGV[2])
end
return tonumber(current)
