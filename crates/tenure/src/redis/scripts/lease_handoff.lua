-- The release's hand-off to the waiter it popped (`first`, from
-- lease_release.lua), written out before the helpers of lease_fence.lua and
-- lease_line.lua are defined: under contention every release hands off, and
-- defining them would cost the server each call about as much as the
-- hand-off's commands (closures created and collected per call). It ends
-- here in the common case: on one master, a waiter's entry (not an
-- observer's marker) and a fence counter below the clock or gone, with TIME,
-- SET ... GET, SET and the message, as hand_off (lease_line.lua) would send
-- them. Any other case goes on to release_to_next with the floor written and
-- the counter it replaced, where take_fence settles the fence as always. The
-- floor and the test of the replaced counter are fence_floor's and
-- settle_at_clock's (lease_fence.lua) written out, as lease_acquire_fast.lua
-- writes them: a change to one belongs in the others.
local floor, replaced
if type(first) == 'string' and fence_floor_unit == 'us' then
  local _, ttl, token = string.match(first, '^(%d+) (%d+) (.+)$')
  if ttl and ttl ~= '0' then
    local now = redis.call('TIME')
    floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
    replaced = redis.pcall('SET', KEYS[2], string.format('%.0f', floor), 'PX', fence_retention_ms, 'GET')
    local last = type(replaced) == 'string' and string.match(replaced, '^%d+$') and tonumber(replaced)
    if not replaced or (last and last < floor) then
      redis.call('SET', KEYS[1], token, 'PX', math.min(tonumber(ttl), CLAIM_MS))
      redis.pcall(PUBLISH, ARGV[2], string.format('%s %d %s', token, floor, first))
      return 1
    end
  end
end
