-- Delete a lease that still holds our token and wake the waiters.
-- KEYS[1] lease key; ARGV[1] owner token, ARGV[2] release channel
-- Returns 1 when released, 0 when the key does not hold our token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
