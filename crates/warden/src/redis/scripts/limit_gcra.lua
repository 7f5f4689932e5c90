-- Rate limiting, part 2 of 7: GCRA. The key is a string: the theoretical
-- arrival time (TAT) in µs. Mirrors limit/gcra.rs.
STEPS[1] = function(p, key, now, cost)
  local tat = now
  local stored = read(key, 'string', 'GET', key)
  if stored then
    tat = field(key, stored, 'arrival time')
  end
  if tat < now then
    tat = now
  end
  local t = p.interval
  local span = p.cap * t
  local backlog = tat - now
  local need = cost * t
  local ev = {
    available = idiv(math.max(span - backlog, 0), t),
    retry = math.max(backlog + need - span, 0),
    reset = backlog,
    reset_consumed = backlog + need,
  }
  return ev, function()
    redis.call('SET', key, int(tat + need), 'PX', expiry(backlog + need, 0))
  end
end
