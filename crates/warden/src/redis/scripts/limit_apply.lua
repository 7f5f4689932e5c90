-- Rate limiting, part 7 of 7: apply a request to every policy of a limiter,
-- atomically (mirrors `apply` in limit/step.rs). When all policies allow,
-- each consumes; when any refuses, none does (only sliding logs that record
-- refusals write). Every written key gets a TTL: after it the state would read
-- as fresh anyway.
--
-- KEYS[i]  storage key of policy i; all share one hash tag (one cluster slot)
-- ARGV[1]  now in µs, or '' for the server's clock (TIME). Tests inject it;
--          keys then live at least a minute longer, as their TTLs no longer
--          relate to the server's clock
-- ARGV[2]  cost (units)        ARGV[3]  '1' to peek      ARGV[4]  nonce
-- ARGV[5 + 5(i-1) ...]  algorithm code, capacity, period µs, interval µs,
--                       '1' when refusals are recorded
-- Returns per policy {allowed 0/1, limit, remaining, reset µs, retry µs or -1}.
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  PAD_MS = 60000
end
local cost, peek, nonce = tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4]

local policies, decisions, commits = {}, {}, {}
local all = true
for i = 1, #KEYS do
  local b = 4 + (i - 1) * 5
  local p = {
    cap = tonumber(ARGV[b + 2]),
    period = tonumber(ARGV[b + 3]),
    interval = tonumber(ARGV[b + 4]),
    record = ARGV[b + 5] == '1',
  }
  local ev, commit = STEPS[tonumber(ARGV[b + 1])](p, KEYS[i], now, cost, nonce)
  local allowed = cost <= ev.available
  local skew = ev.skew or 0
  if allowed and not peek then
    decisions[i] = {1, p.cap, ev.available - cost, later(ev.reset_consumed, skew), -1}
  elseif allowed then
    decisions[i] = {1, p.cap, ev.available, later(ev.reset, skew), -1}
  else
    decisions[i] = {0, p.cap, ev.available, later(ev.reset, skew),
      math.max(later(ev.retry, skew), 1)}
    all = false
  end
  policies[i], commits[i] = p, commit
end

if not peek then
  for i = 1, #KEYS do
    if all or policies[i].record then
      commits[i]()
    end
  end
end
return decisions
