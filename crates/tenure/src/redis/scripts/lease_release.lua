-- Release a lease that still holds our token: hand it to the first waiter in
-- line, or delete it when nobody waits. The waiter's entry is not checked
-- against the clock (one TIME less per hand-off): a waiter that died is
-- handed the lease for the claim window, after which the next live waiter's
-- look, which skips expired entries, takes it (within about 0.75 s).
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] waiting line
-- ARGV[1] owner token, ARGV[2] release channel
-- Returns 1 when released, 0 when the key does not hold our token.
-- Uncontended this is GET, LPOP, DEL: nothing is published when nobody waits.
--
-- This part runs before anything else is defined, which would cost each
-- call as much as the uncontended release itself: only a line with an entry
-- (or of the wrong type) goes on, with the entry already popped, to the
-- settings and lease_handoff.lua, and past that to the helpers
-- (lease_fence.lua, lease_line.lua; redis/lease.rs puts the parts together).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local first = redis.pcall('LPOP', KEYS[3])
if not first then
  redis.call('DEL', KEYS[1])
  return 1
end
