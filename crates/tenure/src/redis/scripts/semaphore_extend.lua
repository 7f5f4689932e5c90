-- Renew a permit that is still held.
-- KEYS[1] permits; ARGV[1] owner token, ARGV[2] ttl ms. Returns 1 renewed, 0 not held.
local refused = foreign_data(KEYS[1], nil)
if refused then
  return refused
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
