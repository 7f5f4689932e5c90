-- Rate limiting, part 6 of 7: fixed window. The key is a hash {start, count}.
-- The count and its TTL are set in the same script (the seed's INCR then
-- EXPIRE could leave a counter without TTL), and refusals are not counted.
-- Mirrors limit/fixed_window.rs.
STEPS[5] = function(p, key, now, cost)
  local period, cap = p.period, p.cap
  local s = hash_fields(key, {'start', 'count'})
  local skew = 0
  if s and now < s.start then
    skew, now = s.start - now, s.start -- a clock that went back stands still
  end
  local start = align(now, period)
  local count = 0
  if s and s.start == start then
    count = s.count
  end
  local to_end = start + period - now
  local reset = 0
  if count > 0 then
    reset = to_end
  end
  local ev = {
    available = cap - math.min(count, cap),
    retry = to_end,
    reset = reset,
    reset_consumed = to_end,
    skew = skew,
  }
  return ev, function()
    redis.call('HSET', key, 'start', int(start), 'count', int(count + cost))
    redis.call('PEXPIRE', key, expiry(to_end, skew))
  end
end
