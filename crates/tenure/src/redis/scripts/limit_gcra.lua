-- Rate limiting, part 2 of 7: GCRA. The key is a string: the theoretical
-- arrival time (TAT) in µs. Mirrors limit/gcra.rs.
--
-- Every step takes (key, now, cost, nonce, cap, period, interval), the last two
-- as the strings they arrived as (each step converts the one it uses), and returns
-- (available, retry, reset, reset_consumed, skew, a, b, c, d): what it found
-- (see limit_apply.lua) and up to four values its WRITES twin stores, called
-- as (key, pad_ms, skew, cost, nonce, a, b, c, d) only when the request
-- commits. No table or closure is made on the way.
STEPS['1'] = function(key, now, cost, _, cap, _, interval)
  local t = tonumber(interval)
  local tat = now
  local stored = read(key, 'string', 'GET', key)
  if stored then
    tat = field(key, stored, 'arrival time')
    if tat < now then
      tat = now
    end
  end
  local backlog = tat - now
  local need = cost * t
  return idiv(math.max(cap * t - backlog, 0), t), math.max(backlog + need - cap * t, 0),
    backlog, backlog + need, 0, tat + need, backlog + need
end

WRITES['1'] = function(key, pad, _, _, _, tat, ttl)
  redis.call('SET', key, int(tat), 'PX', expiry(ttl, 0, pad))
end
