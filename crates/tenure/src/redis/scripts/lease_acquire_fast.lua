-- Acquire a lease and, only when it is won, take the key's fence.
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] holder hash (only when
-- the holder is recorded)
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds; when the holder is
-- recorded, ARGV[3] host, ARGV[4] pid and ARGV[5] label (if any)
-- Returns the fence (at least 1) when acquired; when held by someone else,
-- -2 - pttl (at most -1: -1 for a key without a TTL). One integer, where a
-- pair would cost the client a nested reply to parse.
--
-- This part runs before the helpers (lease_fence.lua, lease_holder.lua) are
-- defined: defining them costs each call about 0.23 us of the server's time
-- (their EVALSHA against an empty script's), more than any of its commands
-- but SET. A refusal ends here, and so does the common grant on one
-- master (its counter below the clock or gone, no holder to record), with
-- three commands: SET NX, TIME, SET ... GET. Any other grant goes on to
-- lease_acquire.lua with the floor written and the counter it replaced,
-- where take_fence settles the fence as always. The floor and the test of
-- the replaced counter are fence_floor's and settle_at_clock's
-- (lease_fence.lua) written out, as no helper exists yet: a change to one
-- belongs in the other (tests/fence_floor.rs checks both ends of the
-- test). The type checks run only when a command did not go through, so a
-- key of another type is still a clear WRONGTYPE error and never a hold.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local lease_type = redis.call('TYPE', KEYS[1]).ok
  if lease_type ~= 'string' then
    return redis.error_reply('WRONGTYPE lease key ' .. KEYS[1] .. ' holds a ' .. lease_type)
  end
  return -2 - redis.call('PTTL', KEYS[1])
end
local floor, replaced
if fence_floor_unit == 'us' then
  local now = redis.call('TIME')
  floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  replaced = redis.pcall('SET', KEYS[2], string.format('%.0f', floor), 'PX', fence_retention_ms, 'GET')
  if not ARGV[3] then
    if not replaced then
      return floor
    end
    local last = type(replaced) == 'string' and string.match(replaced, '^%d+$') and tonumber(replaced)
    if last and last < floor then
      return floor
    end
  end
end
