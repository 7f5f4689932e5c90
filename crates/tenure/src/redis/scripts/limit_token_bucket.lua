-- Rate limiting, part 3 of 7: token bucket. The key is a hash {tokens, last}:
-- whole tokens, and when the last whole token was added (µs). Mirrors
-- limit/token_bucket.rs.

-- Time until a bucket last refilled at `last` is full again with `left` tokens.
local function tb_until_full(left, cap, last, t, now)
  if left >= cap then
    return 0
  end
  return last + (cap - left) * t - now
end

STEPS['2'] = function(key, now, cost, _, cap, _, interval)
  local t = tonumber(interval)
  local tokens, last = cap, now
  local s = hash_fields(key, 'tokens', 'last')
  if s then
    tokens, last = s[1], s[2]
  end
  local skew = 0
  if now < last then
    skew, now = last - now, last -- a clock that went back stands still
  end
  local added = idiv(now - last, t)
  if tokens + added >= cap then
    tokens, last = cap, now
  else
    tokens, last = tokens + added, last + added * t
  end
  local retry = 0
  if cost > tokens then
    retry = last + (cost - tokens) * t - now
  end
  local left = math.max(tokens - cost, 0)
  local full_left = tb_until_full(left, cap, last, t, now)
  return tokens, retry, tb_until_full(tokens, cap, last, t, now), full_left, skew,
    left, last, full_left
end

WRITES['2'] = function(key, pad, skew, _, _, left, last, ttl)
  redis.call('HSET', key, 'tokens', int(left), 'last', int(last))
  redis.call('PEXPIRE', key, expiry(ttl, skew, pad))
end
