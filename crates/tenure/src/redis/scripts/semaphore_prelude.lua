-- Expiring semaphores, shared part: each semaphore script is this prelude
-- followed by its own part (see redis/semaphore.rs).

-- The refusal of data tenure cannot use in the permits set (KEYS[1]) or, when
-- given, the fence counter; nil when both are usable (a missing key is).
local function foreign_data(permits, fence)
  local kind = redis.call('TYPE', permits).ok
  if kind ~= 'none' and kind ~= 'zset' then
    return redis.error_reply('WRONGTYPE semaphore key ' .. permits .. ' holds a ' .. kind)
  end
  if fence then
    kind = redis.call('TYPE', fence).ok
    if kind ~= 'none' and kind ~= 'string' then
      return redis.error_reply('WRONGTYPE fence counter ' .. fence .. ' holds a ' .. kind)
    end
    local current = redis.call('GET', fence)
    if current and not string.match(current, '^%d+$') then
      return redis.error_reply('WRONGTYPE fence counter ' .. fence .. ' is not an integer')
    end
  end
  return nil
end

-- The server's clock, in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

