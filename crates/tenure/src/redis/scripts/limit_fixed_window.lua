-- Rate limiting, part 6 of 7: fixed window. The key is a hash {start, count}.
-- The count and its TTL are set in the same call (the usual INCR then
-- EXPIRE can leave a counter without TTL), and refusals are not counted.
-- Mirrors limit/fixed_window.rs.
STEPS['5'] = function(key, now, cost, _, cap, period_arg)
  local period = tonumber(period_arg)
  local s = hash_fields(key, 'start', 'count')
  local skew = 0
  if s and now < s[1] then
    skew, now = s[1] - now, s[1] -- a clock that went back stands still
  end
  local start = align(now, period)
  local count = 0
  if s and s[1] >= start then -- the same window, or a shorter one of an earlier quota
    count = s[2]
  end
  local to_end = start + period - now
  local reset = 0
  if count > 0 then
    reset = to_end
  end
  return cap - math.min(count, cap), to_end, reset, to_end, skew, start, count + cost, to_end
end

WRITES['5'] = function(key, pad, skew, _, _, start, count, ttl)
  redis.call('HSET', key, 'start', int(start), 'count', int(count))
  redis.call('PEXPIRE', key, expiry(ttl, skew, pad))
end

REFUNDS['5'] = function(key, now, cost, _, period_arg)
  local period = tonumber(period_arg)
  local s = hash_fields(key, 'start', 'count')
  if not s then
    return false
  end
  if now < s[1] then
    now = s[1]
  end
  local start = align(now, period)
  local count = 0
  if s[1] >= start then
    count = s[2]
  end
  redis.call('HSET', key, 'start', int(start), 'count', int(count - math.min(count, cost)))
  return true
end
