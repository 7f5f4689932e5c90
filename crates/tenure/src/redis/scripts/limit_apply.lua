-- Rate limiting, part 7 of 7: apply a request to every policy of a limiter,
-- atomically (mirrors `apply` in limit/step.rs). When all policies allow,
-- each consumes; when any refuses, none does (only sliding logs that record
-- refusals write). A refund gives back to every policy; a reservation books
-- every policy at the first instant all admit, when that is close enough
-- (only GCRA, token bucket and sliding log policies book).
-- Every written key gets a TTL: after it the state would read as fresh anyway.
--
-- keys[i]  storage key of policy i; all share one hash tag (one cluster slot)
-- args[1]  now in µs, or '' for the server's clock (TIME). Tests inject it;
--          keys then live at least a minute longer, as their TTLs no longer
--          relate to the server's clock
-- args[2]  cost (units)
-- args[3]  the mode: '0' consume, '1' peek, 'r' refund, 'd<µs>' reserve with
--          at most that delay
-- args[4]  nonce (sliding logs only, else any string)
-- args[5 + 5(i-1) ...]  algorithm code (the STEPS and WRITES key), capacity,
--                       period µs, interval µs, '1' when refusals are recorded
-- Returns {allowed 0/1, limit, remaining, reset µs, retry µs or -1} for one
-- policy, and a list of them, one per policy, for several. A granted
-- reservation's retry is its wait (-1 for none).

-- A policy's decision from what its step found.
local function decision(cap, cost, peek, available, retry, reset, reset_consumed, skew)
  if cost > available then
    return {0, cap, available, later(reset, skew), math.max(later(retry, skew), 1)}
  elseif peek then
    return {1, cap, available, later(reset, skew), -1}
  end
  return {1, cap, available - cost, later(reset_consumed, skew), -1}
end

-- One policy, consuming or peeking, the common case: no table but the answer.
local function apply_one(key, args, now, pad, cost, peek, nonce)
  local code, cap = args[5], tonumber(args[6])
  local available, retry, reset, reset_consumed, skew, a, b, c, d, e =
    STEPS[code](key, now, cost, nonce, cap, args[7], args[8])
  if not peek and (cost <= available or args[9] == '1') then
    WRITES[code](key, pad, skew, cost, nonce, a, b, c, d, e)
  end
  return decision(cap, cost, peek, available, retry, reset, reset_consumed, skew)
end

-- Every policy's step at `now`: {decision, code, recorded, skew, w1..w5}.
local function steps_at(keys, args, now, cost, peek, nonce)
  local steps = {}
  for i = 1, #keys do
    local b = 4 + (i - 1) * 5
    local code, cap = args[b + 1], tonumber(args[b + 2])
    local available, retry, reset, reset_consumed, skew, w1, w2, w3, w4, w5 =
      STEPS[code](keys[i], now, cost, nonce, cap, args[b + 3], args[b + 4])
    local d = decision(cap, cost, peek, available, retry, reset, reset_consumed, skew)
    steps[i] = {d, code, args[b + 5] == '1', skew, w1, w2, w3, w4, w5}
  end
  return steps
end

-- Whether every step admits, and the longest wait of those that refuse.
local function verdict(steps)
  local all, wait = true, 0
  for i = 1, #steps do
    local d = steps[i][1]
    if d[1] == 0 then
      all, wait = false, math.max(wait, d[5])
    end
  end
  return all, wait
end

-- Several policies, or a reservation: every step first, then the writes of
-- all or none. A reservation refused now looks again `delay` µs ahead, where
-- the longest wait ends; when all admit there, it books there.
local function apply_all(keys, args, now, pad, cost, peek, nonce, max_delay)
  local steps = steps_at(keys, args, now, cost, peek, nonce)
  local all, delay = verdict(steps)
  if max_delay and not all and delay <= max_delay then
    local ahead = steps_at(keys, args, now + delay, cost, false, nonce)
    if verdict(ahead) then
      steps, all = ahead, true
    else
      delay = 0
    end
  else
    delay = 0
  end
  local decisions = {}
  for i = 1, #keys do
    local s = steps[i]
    if not peek and (all or s[3]) then
      WRITES[s[2]](keys[i], pad, s[4] + delay, cost, nonce, s[5], s[6], s[7], s[8], s[9])
    end
    local d = s[1]
    if delay > 0 then
      d[4], d[5] = d[4] + delay, delay
    end
    decisions[i] = d
  end
  return decisions
end

-- Gives `cost` units back to every policy; each decision is a peek of one
-- unit afterwards, and the TTL of what was written is the time until fresh.
local function refund_all(keys, args, now, pad, cost, nonce)
  local decisions = {}
  for i = 1, #keys do
    local b = 4 + (i - 1) * 5
    local code, cap = args[b + 1], tonumber(args[b + 2])
    local wrote = REFUNDS[code](keys[i], now, cost, cap, args[b + 3], args[b + 4])
    local available, retry, reset, reset_consumed, skew =
      STEPS[code](keys[i], now, 1, nonce, cap, args[b + 3], args[b + 4])
    local d = decision(cap, 1, true, available, retry, reset, reset_consumed, skew)
    if wrote then
      redis.call('PEXPIRE', keys[i], expiry(d[4], 0, pad))
    end
    decisions[i] = d
  end
  if #keys == 1 then
    return decisions[1]
  end
  return decisions
end

local function apply(keys, args)
  local now, pad
  if args[1] == '' then
    local t = redis.call('TIME')
    now, pad = t[1] * 1000000 + t[2], 0
  else
    now, pad = tonumber(args[1]), 60000
  end
  -- (Lua strings are interned: comparing with '1' costs less than a parse.)
  local cost = 1
  if args[2] ~= '1' then
    cost = tonumber(args[2])
  end
  local mode, nonce = args[3], args[4]
  if mode == 'r' then
    return refund_all(keys, args, now, pad, cost, nonce)
  end
  local peek, max_delay = mode == '1', nil
  if string.byte(mode, 1) == 100 then -- 'd'
    max_delay = tonumber(string.sub(mode, 2))
    -- Window counters cannot book ahead (see `books` in step.rs): then a
    -- reservation is a plain check.
    for i = 1, #keys do
      local code = args[5 + (i - 1) * 5]
      if code == '4' or code == '5' then
        max_delay = nil
      end
    end
  end
  if #keys == 1 and not max_delay then
    return apply_one(keys[1], args, now, pad, cost, peek, nonce)
  end
  local decisions = apply_all(keys, args, now, pad, cost, peek, nonce, max_delay)
  if #keys == 1 then
    return decisions[1]
  end
  return decisions
end
