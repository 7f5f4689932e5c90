-- Rate limiting, part 3 of 7: token bucket. The key is a hash {tokens, last}:
-- whole tokens, and when the last whole token was added (µs). Mirrors
-- limit/token_bucket.rs.
STEPS[2] = function(p, key, now, cost)
  local cap, t = p.cap, p.interval
  local tokens, last = cap, now
  local s = hash_fields(key, {'tokens', 'last'})
  if s then
    tokens, last = s.tokens, s.last
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
  local function until_full(left)
    if left >= cap then
      return 0
    end
    return last + (cap - left) * t - now
  end
  local retry = 0
  if cost > tokens then
    retry = last + (cost - tokens) * t - now
  end
  local ev = {
    available = tokens,
    retry = retry,
    reset = until_full(tokens),
    reset_consumed = until_full(math.max(tokens - cost, 0)),
    skew = skew,
  }
  return ev, function()
    local left = tokens - cost
    redis.call('HSET', key, 'tokens', int(left), 'last', int(last))
    redis.call('PEXPIRE', key, expiry(until_full(left), skew))
  end
end
