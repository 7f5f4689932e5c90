-- Reset the TTL of a lease that still holds our token; never revive an expired one.
-- KEYS[1] lease key, KEYS[2] holder hash (renewed with it when there is one)
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds
-- Returns 1 when extended, 0 when the key does not hold our token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
