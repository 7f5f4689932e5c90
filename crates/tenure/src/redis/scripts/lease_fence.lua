-- Shared by the lease scripts that grant (prepended to each of them, after
-- lease_settings.lua).

-- The clock floor of the fence that follows `fence` (the counter after its
-- INCR; 1 when it was missing), on the server's clock. On one master, the
-- clock in microseconds: above every fence handed out before (each was at
-- most the clock of its grant, unless grants came faster than one per
-- microsecond), so a promoted replica whose counter is behind the old
-- master's goes on above the old master's fences. On a quorum node, whole
-- seconds x 10^6 while the counter lives, so the nodes agree, and the clock
-- in milliseconds x 1000 for a missing counter (a new key, one dropped by
-- the retention, a store that lost its data), which is then above every
-- fence handed out before: those were never above the clock, and a restart
-- takes longer than a millisecond. See docs/leases.md, "Fences".
local function fence_floor(fence)
  local now = redis.call('TIME')
  local seconds = tonumber(now[1]) * 1000000
  if fence_floor_unit == 'us' then
    return seconds + tonumber(now[2])
  end
  local ms = fence == 1 and math.floor(tonumber(now[2]) / 1000) or 0
  return seconds + ms * 1000
end

-- On one master the floor (the clock in microseconds) wins at nearly every
-- grant, so the counter is written with it at once: SET ... GET answers the
-- counter it replaced (`old`), one write where INCR and SET were two. This
-- settles the fence once `floor` is written: only when `old` was not below
-- it (two grants within a microsecond, a counter ahead of the clock) is the
-- counter written again, one above the old value. Answers nil, nil where
-- SET ... GET is unknown (Redis before 6.2): take_fence then counts with
-- INCR. A counter that is not a non-negative integer below 2^53 is written
-- back (without an expiry: such a value is not tenure's, and a TTL it had is
-- not known any more) and the grant refused, as take_fence does.
-- (lease_acquire_fast.lua writes the common case of this out before the
-- helpers are defined.)
local function settle_at_clock(lease_key, fence_key, floor, old)
  if type(old) == 'table' and old.err then
    if string.sub(old.err, 1, 9) ~= 'WRONGTYPE' then
      return nil, nil
    end
    redis.call('DEL', lease_key)
    return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' holds a ' .. redis.call('TYPE', fence_key).ok)
  end
  if not old then
    return floor
  end
  local last = string.match(old, '^%d+$') and tonumber(old)
  if last and last < floor then
    return floor
  end
  if not last or last + 1 >= 9007199254740992 then
    redis.call('SET', fence_key, old)
    redis.call('DEL', lease_key)
    if not last then
      return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' is not an integer')
    end
    return nil, redis.error_reply('ERR fence counter ' .. fence_key .. ' is past 2^53; no lease was granted')
  end
  redis.call('SET', fence_key, string.format('%.0f', last + 1), 'PX', fence_retention_ms)
  return last + 1
end

-- Takes the next fence for a grant of lease_key: max(counter + 1, clock
-- floor), stored with the fence retention (written whenever the floor wins:
-- on one master at nearly every grant; on a quorum node a counter that only
-- grows by one was written within the second). Lua
-- numbers are doubles, exact to 2^53 (the year 2255 in microseconds): stored
-- fences are formatted as integers, never left to tostring (1.8e+15). On
-- failure (a counter of another type, not an integer, at its maximum, or
-- negative) lease_key is deleted, the counter left as it was, and nil plus an
-- error reply returned: no lease ever exists without its fence. On one
-- master, `floor` and `old` are the clock floor already written by
-- SET ... GET and its answer, when the caller wrote it (the acquire's fast
-- path); without them the floor is written here.
local function take_fence(lease_key, fence_key, floor, old)
  if fence_floor_unit == 'us' then
    if not floor then
      floor = fence_floor()
      old = redis.pcall('SET', fence_key, string.format('%.0f', floor), 'PX', fence_retention_ms, 'GET')
    end
    local fence, err = settle_at_clock(lease_key, fence_key, floor, old)
    if fence or err then
      return fence, err
    end
  end
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

