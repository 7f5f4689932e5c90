-- Delete a lease that still holds our token and wake the waiters.
-- KEYS[1] lease key, KEYS[2] holder hash (deleted with it, in the same DEL)
-- ARGV[1] owner token, ARGV[2] release channel
-- Returns 1 when released, 0 when the key does not hold our token.
-- The PUBLISH is best-effort (pcall): an ACL user without channel rights gets
-- NOPERM on it, and a refused notification must neither fail nor undo the
-- release; waiters then fall back to their TTL-based retry.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.pcall('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
