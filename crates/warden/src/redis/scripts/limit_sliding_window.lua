-- Rate limiting, part 5 of 7: sliding window counter. The key is a hash
-- {start, current, previous}. The weighting uses the same double operations,
-- in the same order, as limit/sliding_window.rs, so both give the same bits.
local function sw_available(cap, period, previous, current, elapsed)
  local weight = (period - elapsed) / period
  local estimate = previous * weight + current
  local left = math.floor(cap - estimate)
  if left <= 0 then
    return 0
  end
  return left
end

-- The first `elapsed` in [from, period) at which `cost` units fit, or nil.
local function sw_first_fit(p, previous, current, cost, from)
  local cap, period = p.cap, p.period
  if current + cost > cap then
    return nil
  end
  local room = cap - current - cost
  local e = 0
  if previous ~= 0 then
    e = math.ceil(period - room * period / previous)
  end
  if e < from then
    e = from
  end
  for i = e, e + 3 do
    if i >= period then
      return nil
    end
    if sw_available(cap, period, previous, current, i) >= cost then
      return i
    end
  end
  return nil
end

STEPS[4] = function(p, key, now, cost)
  local period, cap = p.period, p.cap
  local s = hash_fields(key, {'start', 'current', 'previous'})
  local skew = 0
  if s and now < s.start then
    skew, now = s.start - now, s.start -- a clock that went back stands still
  end
  local start = align(now, period)
  local current, previous = 0, 0
  if s and s.start == start then
    current, previous = s.current, s.previous
  elseif s and s.start + period == start then
    previous = s.current
  end
  local elapsed = now - start
  local to_end = period - elapsed
  local retry
  local e = sw_first_fit(p, previous, current, cost, elapsed)
  if e then
    retry = math.max(e, elapsed + 1) - elapsed
  else
    -- in the next window the current count becomes the previous one
    retry = to_end + (sw_first_fit(p, current, 0, cost, 0) or period)
  end
  local function reset(c)
    if c > 0 then
      return to_end + period
    elseif previous > 0 then
      return to_end
    end
    return 0
  end
  local ev = {
    available = sw_available(cap, period, previous, current, elapsed),
    retry = retry,
    reset = reset(current),
    reset_consumed = reset(current + cost),
    skew = skew,
  }
  return ev, function()
    redis.call('HSET', key, 'start', int(start), 'current', int(current + cost),
      'previous', int(previous))
    redis.call('PEXPIRE', key, expiry(to_end + period, skew))
  end
end
