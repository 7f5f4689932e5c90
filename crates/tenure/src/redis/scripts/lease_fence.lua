-- Shared by the lease scripts that grant (prepended to each of them).

-- How long a fence counter outlives its last grant, in milliseconds (the
-- store's fence retention: the Rust side replaces this line when it differs).
local fence_retention_ms = '86400000'

-- The clock floor of the fence that follows `fence` (the counter after its
-- INCR; 1 when it was missing): whole seconds x 10^6 on the server's clock
-- while the counter lives, so the nodes of a quorum agree on it, and the clock
-- in milliseconds x 1000 for a missing counter (a new key, one dropped by the
-- retention, a store that lost its data), which is then above every fence
-- handed out before: those were never above the clock, and a restart takes
-- longer than a millisecond. See docs/leases.md, "Fences".
local function fence_floor(fence)
  local now = redis.call('TIME')
  local ms = fence == 1 and math.floor(tonumber(now[2]) / 1000) or 0
  return tonumber(now[1]) * 1000000 + ms * 1000
end

-- Takes the next fence for a grant of lease_key: max(counter + 1, clock
-- floor), stored with the fence retention (written whenever the floor wins,
-- so a counter that only grows by one was written within the second). Lua
-- numbers are doubles, exact to 2^53 (the year 2255 in microseconds): stored
-- fences are formatted as integers, never left to tostring (1.8e+15). On
-- failure (a counter of another type, not an integer, at its maximum, or
-- negative) lease_key is deleted, the counter left as it was, and nil plus an
-- error reply returned: no lease ever exists without its fence.
local function take_fence(lease_key, fence_key)
  local fence = redis.pcall('INCR', fence_key)
  if type(fence) == 'table' and fence.err then
    redis.call('DEL', lease_key)
    local fence_type = redis.call('TYPE', fence_key).ok
    if fence_type ~= 'string' then
      return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' holds a ' .. fence_type)
    end
    if not string.match(redis.call('GET', fence_key), '^%d+$') then
      return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' is not an integer')
    end
    return nil, redis.error_reply('ERR fence counter ' .. fence_key .. ' cannot be incremented (' .. fence.err .. '); no lease was granted')
  end
  if fence < 1 then
    redis.call('DECR', fence_key)
    redis.call('DEL', lease_key)
    return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' is not an integer')
  end
  if fence >= 9007199254740992 then
    redis.call('DECR', fence_key)
    redis.call('DEL', lease_key)
    return nil, redis.error_reply('ERR fence counter ' .. fence_key .. ' is past 2^53; no lease was granted')
  end
  local floor = fence_floor(fence)
  if fence < floor then
    fence = floor
    redis.call('SET', fence_key, string.format('%.0f', fence), 'PX', fence_retention_ms)
  end
  return fence
end

