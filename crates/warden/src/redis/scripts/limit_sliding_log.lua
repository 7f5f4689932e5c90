-- Rate limiting, part 4 of 7: sliding log. The key is a sorted set with one
-- member per unit, scored by its time in µs. Members are `time:nonce:index`
-- (the nonce is random per request), so units taken in the same microsecond
-- never collapse into one member. Mirrors limit/sliding_log.rs.
STEPS[3] = function(p, key, now, cost, nonce)
  local period, cap = p.period, p.cap
  local cutoff = now - period -- entries at or before it have left the window
  local above = '(' .. int(cutoff)
  local count, newest = read(key, 'zset', 'ZCOUNT', key, above, '+inf'), nil
  if count > 0 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    newest = field(key, last[2], 'entry time')
  end
  local retry = 0
  local k = count + cost - cap -- the k-th live entry must leave first
  if k >= 1 then
    local e = redis.call('ZRANGEBYSCORE', key, above, '+inf', 'WITHSCORES', 'LIMIT', int(k - 1), 1)
    retry = field(key, e[2], 'entry time') + period - now
  end
  local function until_empty(n)
    if n == nil then
      return 0
    end
    return n + period - now
  end
  local after = now
  if newest and newest > now then
    after = newest
  end
  local ev = {
    available = cap - math.min(count, cap),
    retry = retry,
    reset = until_empty(newest),
    reset_consumed = until_empty(after),
  }
  return ev, function()
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(cutoff))
    local at = int(now)
    local i = 1
    while i <= cost do -- in batches: unpack() has a stack limit
      local args = {}
      local last = math.min(cost, i + 499)
      for j = i, last do
        args[#args + 1] = at
        args[#args + 1] = at .. ':' .. nonce .. ':' .. j
      end
      redis.call('ZADD', key, unpack(args))
      i = last + 1
    end
    -- The log now holds the `count` live entries and the `cost` new ones
    -- (members are unique: the nonce is). Recorded refusals may overfill it;
    -- the newest `cap` entries decide every future request, so the rest can go.
    local n = count + cost
    if n > cap then
      redis.call('ZREMRANGEBYRANK', key, 0, int(n - cap - 1))
    end
    -- The newest entry is now the later of the newest live one and `now`.
    redis.call('PEXPIRE', key, expiry(until_empty(after), 0))
  end
end
