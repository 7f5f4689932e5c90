-- Delete one node's part of a quorum lease if it still holds our token.
-- KEYS[1] lease key; ARGV[1] owner token, ARGV[2] release channel, ARGV[3] '1'
-- to wake the waiters (a release), '0' not to (the undo of a vote: waking
-- every waiter there would only make the next vote split too)
-- Returns 1 when released, 0 when the key does not hold our token.
-- A quorum has no waiting line: its waiters race, so a release wakes them
-- all. The PUBLISH is best-effort (pcall): an ACL user without channel rights
-- gets NOPERM on it, and a refused notification must neither fail nor undo
-- the release; waiters then fall back to their TTL-based retry.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[3] == '1' then
    redis.pcall('PUBLISH', ARGV[2], '1')
  end
  return 1
end
return 0
