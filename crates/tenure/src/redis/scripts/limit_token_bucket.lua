-- Rate limiting, part 3 of 7: token bucket. The key is a hash {tokens, last,
-- cap, t}: whole tokens, when the last whole token was added (µs; in the
-- future when units are booked ahead), and the capacity and interval (µs per
-- token) of the quota that wrote them. Mirrors
-- limit/token_bucket.rs.

-- Time until a bucket last refilled at `last` is full again with `left` tokens.
local function tb_until_full(left, cap, last, t, now)
  if left >= cap then
    return 0
  end
  return last + (cap - left) * t - now
end

-- The stored tokens and last refill under a capacity `cap` at `t` µs per
-- unit, or nil: after a quota change the bucket is refilled at its own rate,
-- its backlog rescaled like GCRA's and read back as tokens; a backlog beyond
-- the new capacity is owed as time (`convert` in Rust).
local function tb_state(key, now, cap, t)
  local s = hash_fields(key, 'tokens', 'last', 'cap', 't')
  if not s then
    return nil
  end
  local tokens, last, old_cap, old_t = s[1], s[2], s[3], s[4]
  if old_cap == cap and old_t == t then
    return tokens, last
  end
  local step = math.max(old_t, 1)
  if now < last then
    now = last
  end
  local added = idiv(now - last, step)
  if tokens + added >= old_cap then
    tokens, last = old_cap, now
  else
    tokens, last = tokens + added, last + added * step
  end
  local backlog = (old_cap - tokens) * step - (now - last)
  if old_t ~= t and backlog > 0 then
    backlog = math.min(math.ceil(backlog * t / step), 1125899906842624)
  end
  tokens = math.max(cap - idiv(backlog + t - 1, t), 0)
  return tokens, now + backlog - (cap - tokens) * t
end

-- Refilled tokens and last refill at `now`, and the instant judged at (later
-- than `now` when the clock went back or units are booked ahead).
local function tb_refill(tokens, last, cap, t, now)
  if now < last then
    now = last -- a clock that went back stands still
  end
  local added = idiv(now - last, t)
  if tokens + added >= cap then
    return cap, now, now
  end
  return tokens + added, last + added * t, now
end

STEPS['2'] = function(key, now, cost, _, cap, _, interval)
  local t = tonumber(interval)
  local tokens, last = tb_state(key, now, cap, t)
  if not tokens then
    tokens, last = cap, now
  end
  local raw = now
  tokens, last, now = tb_refill(tokens, last, cap, t, now)
  local skew = now - raw
  local retry = 0
  if cost > tokens then
    retry = last + (cost - tokens) * t - now
  end
  local left = math.max(tokens - cost, 0)
  local full_left = tb_until_full(left, cap, last, t, now)
  return tokens, retry, tb_until_full(tokens, cap, last, t, now), full_left, skew,
    left, last, full_left, cap, t
end

WRITES['2'] = function(key, pad, skew, _, _, left, last, ttl, cap, t)
  redis.call('HSET', key, 'tokens', int(left), 'last', int(last), 'cap', int(cap), 't', int(t))
  redis.call('PEXPIRE', key, expiry(ttl, skew, pad))
end

REFUNDS['2'] = function(key, now, cost, cap, _, interval)
  local t = tonumber(interval)
  local tokens, last = tb_state(key, now, cap, t)
  if not tokens then
    return false
  end
  if last > now then -- units booked ahead are given back first
    local back = math.min(cost, idiv(last - now + t - 1, t))
    last, cost = last - back * t, cost - back
  end
  local judged
  tokens, last, judged = tb_refill(tokens, last, cap, t, now)
  tokens = math.min(tokens + cost, cap)
  if tokens == cap then
    last = judged
  end
  redis.call('HSET', key, 'tokens', int(tokens), 'last', int(last), 'cap', int(cap), 't', int(t))
  return true
end
