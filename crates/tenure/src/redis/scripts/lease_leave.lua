-- Leave the waiting line: remove our entry and, if the lease was handed to us
-- meanwhile, pass it on to the next waiter (or delete it).
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] waiting line
-- ARGV[1] owner token, ARGV[2] release channel, ARGV[3] our entry ('' if none)
-- Returns 1 when a lease handed to us was passed on, 0 otherwise.
if ARGV[3] ~= '' then
  redis.call('LREM', KEYS[3], 1, ARGV[3])
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return release_to_next(KEYS, ARGV[2])
