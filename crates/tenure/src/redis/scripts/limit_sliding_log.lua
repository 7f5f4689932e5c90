-- Rate limiting, part 4 of 7: sliding log. The key is a sorted set with one
-- member per unit, scored by its time in µs. Members are `time:nonce:index`
-- (the nonce is random per request), so units taken in the same microsecond
-- never collapse into one member. Mirrors limit/sliding_log.rs.
STEPS['3'] = function(key, now, cost, _, cap, period_arg)
  local period = tonumber(period_arg)
  local cutoff = now - period -- entries at or before it have left the window
  local above = '(' .. int(cutoff)
  local count = read(key, 'zset', 'ZCOUNT', key, above, '+inf')
  local retry, reset, after = 0, 0, now
  if count > 0 then
    local newest = field(key, redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2], 'entry time')
    reset = newest + period - now
    if newest > now then
      after = newest
    end
  end
  local k = count + cost - cap -- the k-th live entry must leave first
  if k >= 1 then
    local e = redis.call('ZRANGEBYSCORE', key, above, '+inf', 'WITHSCORES', 'LIMIT', int(k - 1), 1)
    retry = field(key, e[2], 'entry time') + period - now
  end
  local until_empty = after + period - now
  return cap - math.min(count, cap), retry, reset, until_empty, 0, now, cutoff, k, until_empty
end

WRITES['3'] = function(key, pad, skew, cost, nonce, now, cutoff, excess, ttl)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(cutoff))
  local at = int(now)
  local i = 1
  if cost == 1 then -- the common case, without a table
    redis.call('ZADD', key, at, at .. ':' .. nonce .. ':1')
    i = 2
  end
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
  -- The log now holds the live entries and the `cost` new ones (members are
  -- unique: the nonce is). Recorded refusals may overfill it; the newest `cap`
  -- entries decide every future request, so the `excess` oldest can go.
  if excess > 0 then
    redis.call('ZREMRANGEBYRANK', key, 0, int(excess - 1))
  end
  -- The newest entry is now the later of the newest live one and `now`.
  redis.call('PEXPIRE', key, expiry(ttl, skew, pad))
end

-- The newest `cost` entries of the window go (entries booked ahead first).
REFUNDS['3'] = function(key, now, cost, _, period_arg)
  local period = tonumber(period_arg)
  if read(key, 'zset', 'ZCARD', key) == 0 then
    return false
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - period))
  local k = math.min(cost, redis.call('ZCARD', key))
  if k > 0 then
    redis.call('ZREMRANGEBYRANK', key, -k, -1)
  end
  return true
end
