-- Rate limiting, part 2 of 7: GCRA. The key is a string `tat:interval`: the
-- theoretical arrival time (TAT) in µs and the emission interval (µs per
-- unit) it was counted with. Mirrors limit/gcra.rs.
--
-- Every step takes (key, now, cost, nonce, cap, period, interval), the last two
-- as the strings they arrived as (each step converts the one it uses), and returns
-- (available, retry, reset, reset_consumed, skew, a, b, c, d, e): what it found
-- (see limit_apply.lua) and up to five values its WRITES twin stores, called
-- as (key, pad_ms, skew, cost, nonce, a, b, c, d, e) only when the request
-- commits. REFUNDS[code](key, now, cost, cap, period, interval) gives units
-- back and says whether it wrote. No table or closure is made on the way.

-- The stored TAT under the interval `t`, or nil: a backlog counted at another
-- interval (the quota changed) is rescaled, rounded up, in the same double
-- operations as `gcra::arrival`.
local function gcra_tat(key, now, t)
  local stored = read(key, 'string', 'GET', key)
  if not stored then
    return nil
  end
  local a, b = string.match(stored, '^(%d+):(%d+)$')
  if not a then
    corrupt(key, 'has a bad arrival time: ' .. stored)
  end
  local tat, old = field(key, a, 'arrival time'), field(key, b, 'interval')
  if old ~= t and tat > now then
    tat = now + math.min(math.ceil((tat - now) * t / old), 1125899906842624)
  end
  return tat
end

STEPS['1'] = function(key, now, cost, _, cap, _, interval)
  local t = tonumber(interval)
  local tat = gcra_tat(key, now, t) or now
  if tat < now then
    tat = now
  end
  local backlog = tat - now
  local need = cost * t
  return idiv(math.max(cap * t - backlog, 0), t), math.max(backlog + need - cap * t, 0),
    backlog, backlog + need, 0, tat + need, backlog + need, t
end

WRITES['1'] = function(key, pad, skew, _, _, tat, ttl, t)
  redis.call('SET', key, int(tat) .. ':' .. int(t), 'PX', expiry(ttl, skew, pad))
end

REFUNDS['1'] = function(key, now, cost, _, _, interval)
  local t = tonumber(interval)
  local tat = gcra_tat(key, now, t)
  if not tat then
    return false
  end
  tat = math.max(tat - cost * t, now)
  redis.call('SET', key, int(tat) .. ':' .. int(t), 'KEEPTTL')
  return true
end
