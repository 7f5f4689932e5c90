-- The first part of a waiter's look (lease_wait.lua has its ARGV and the
-- rest): a first look that others wait in front of stands behind them
-- without looking at the key (a free key with waiters in line is theirs, and
-- the first of them takes it with its next look). The line is made to
-- outlive the new place (by LINE_MS, ten times a place's life) only when it
-- is short or in the first 100 ms of each second: the other waiters' looks
-- (every 250 ms) and the stands in those slices keep a long line alive, so a
-- stand in a contended line costs TIME and RPUSH alone. (A long line whose
-- waiters are all served within 250 ms and none of whose stands fell into a
-- slice for ten seconds would lapse: its waiters then stand in line again
-- with their next look.) A line that turns out empty is looked at as usual,
-- by lease_wait.lua.
--
-- Its reply is the place alone, a bulk string, where every other look answers
-- {won, value, place}: the client reads it as {0, -1, place}, and a flat
-- reply is the cheaper one to parse on the client's hot path.
--
-- This part runs before the helpers of lease_fence.lua, lease_holder.lua and
-- lease_line.lua are defined (only lease_line_basics.lua's are): under
-- contention, where most looks are such stands, defining them would cost the
-- server each call about as much again as the stand's two commands (closures
-- created and collected per call).
if ARGV[4] == '' and ARGV[5] == '1' then
  local now = server_ms()
  local entry = string.format('%d %s %s', now + PLACE_MS, ARGV[2], ARGV[1])
  local length = redis.call('RPUSH', KEYS[3], entry)
  if length > 1 then
    if length <= 2 or now % 1000 < 100 then
      outlive(KEYS[3], LINE_MS)
    end
    return entry
  end
  redis.call('DEL', KEYS[3])
end

