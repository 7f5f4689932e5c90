-- Give a permit back and wake the waiters.
-- KEYS[1] permits; ARGV[1] owner token, ARGV[2] release channel. Returns 1 released, 0 not held.
-- The PUBLISH is best-effort (pcall), as for a lease release: a NOPERM on it
-- must neither fail nor undo the release; waiters then retry on their TTL.
local refused = foreign_data(KEYS[1], nil)
if refused then
  return refused
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.pcall('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
