-- Rate limiting, part 7 of 7: apply a request to every policy of a limiter,
-- atomically (mirrors `apply` in limit/step.rs). When all policies allow,
-- each consumes; when any refuses, none does (only sliding logs that record
-- refusals write). Every written key gets a TTL: after it the state would read
-- as fresh anyway.
--
-- keys[i]  storage key of policy i; all share one hash tag (one cluster slot)
-- args[1]  now in µs, or '' for the server's clock (TIME). Tests inject it;
--          keys then live at least a minute longer, as their TTLs no longer
--          relate to the server's clock
-- args[2]  cost (units)        args[3]  '1' to peek
-- args[4]  nonce (sliding logs only, else any string)
-- args[5 + 5(i-1) ...]  algorithm code (the STEPS and WRITES key), capacity,
--                       period µs, interval µs, '1' when refusals are recorded
-- Returns {allowed 0/1, limit, remaining, reset µs, retry µs or -1} for one
-- policy, and a list of them, one per policy, for several.

-- A policy's decision from what its step found.
local function decision(cap, cost, peek, available, retry, reset, reset_consumed, skew)
  if cost > available then
    return {0, cap, available, later(reset, skew), math.max(later(retry, skew), 1)}
  elseif peek then
    return {1, cap, available, later(reset, skew), -1}
  end
  return {1, cap, available - cost, later(reset_consumed, skew), -1}
end

-- One policy, the common case: no table but the answer.
local function apply_one(key, args, now, pad, cost, peek, nonce)
  local code, cap = args[5], tonumber(args[6])
  local available, retry, reset, reset_consumed, skew, a, b, c, d =
    STEPS[code](key, now, cost, nonce, cap, args[7], args[8])
  if not peek and (cost <= available or args[9] == '1') then
    WRITES[code](key, pad, skew, cost, nonce, a, b, c, d)
  end
  return decision(cap, cost, peek, available, retry, reset, reset_consumed, skew)
end

-- Several policies: every step first, then the writes of all or none.
local function apply_all(keys, args, now, pad, cost, peek, nonce)
  local decisions, commits = {}, {}
  local all = true
  for i = 1, #keys do
    local b = 4 + (i - 1) * 5
    local code, cap = args[b + 1], tonumber(args[b + 2])
    local available, retry, reset, reset_consumed, skew, w1, w2, w3, w4 =
      STEPS[code](keys[i], now, cost, nonce, cap, args[b + 3], args[b + 4])
    decisions[i] = decision(cap, cost, peek, available, retry, reset, reset_consumed, skew)
    all = all and cost <= available
    commits[i] = {code, args[b + 5] == '1', skew, w1, w2, w3, w4}
  end
  if not peek then
    for i = 1, #keys do
      local c = commits[i]
      if all or c[2] then
        WRITES[c[1]](keys[i], pad, c[3], cost, nonce, c[4], c[5], c[6], c[7])
      end
    end
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
  local peek, nonce = args[3] == '1', args[4]
  if #keys == 1 then
    return apply_one(keys[1], args, now, pad, cost, peek, nonce)
  end
  return apply_all(keys, args, now, pad, cost, peek, nonce)
end
