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
local function sw_first_fit(cap, period, previous, current, cost, from)
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

-- Time until the untouched state with `c` units in the current window.
local function sw_reset(c, previous, to_end, period)
  if c > 0 then
    return to_end + period
  elseif previous > 0 then
    return to_end
  end
  return 0
end

-- The counts (current, previous) of the window starting at `start`: the
-- stored ones when the stored window began in it (the same window, or a
-- shorter one of an earlier quota), the stored current count as the previous
-- one when it is the window before.
local function sw_counted(s, start, period)
  if s and s[1] >= start then
    return s[2], s[3]
  elseif s and s[1] + period == start then
    return 0, s[2]
  end
  return 0, 0
end

STEPS['4'] = function(key, now, cost, _, cap, period_arg)
  local period = tonumber(period_arg)
  local s = hash_fields(key, 'start', 'current', 'previous')
  local skew = 0
  if s and now < s[1] then
    skew, now = s[1] - now, s[1] -- a clock that went back stands still
  end
  local start = align(now, period)
  local current, previous = sw_counted(s, start, period)
  local elapsed = now - start
  local to_end = period - elapsed
  local retry
  local e = sw_first_fit(cap, period, previous, current, cost, elapsed)
  if e then
    retry = math.max(e, elapsed + 1) - elapsed
  else
    -- in the next window the current count becomes the previous one
    retry = to_end + (sw_first_fit(cap, period, current, 0, cost, 0) or period)
  end
  return sw_available(cap, period, previous, current, elapsed), retry,
    sw_reset(current, previous, to_end, period), sw_reset(current + cost, previous, to_end, period),
    skew, start, current + cost, previous, to_end + period
end

WRITES['4'] = function(key, pad, skew, _, _, start, current, previous, ttl)
  redis.call('HSET', key, 'start', int(start), 'current', int(current), 'previous', int(previous))
  redis.call('PEXPIRE', key, expiry(ttl, skew, pad))
end

REFUNDS['4'] = function(key, now, cost, _, period_arg)
  local period = tonumber(period_arg)
  local s = hash_fields(key, 'start', 'current', 'previous')
  if not s then
    return false
  end
  if now < s[1] then
    now = s[1]
  end
  local start = align(now, period)
  local current, previous = sw_counted(s, start, period)
  local from_current = math.min(current, cost)
  local from_previous = math.min(previous, cost - from_current)
  redis.call('HSET', key, 'start', int(start), 'current', int(current - from_current),
    'previous', int(previous - from_previous))
  return true
end
