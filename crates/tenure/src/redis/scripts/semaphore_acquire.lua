-- Take a permit of an expiring semaphore unless N are held.
-- KEYS[1] permits (sorted set: owner token -> expiry in server ms), KEYS[2] fence counter
-- ARGV[1] owner token, ARGV[2] ttl ms, ARGV[3] permits N
-- Returns {1, fence} when taken, {0, ms until the soonest permit expires} when full.
local refused = foreign_data(KEYS[1], KEYS[2])
if refused then
  return refused
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - now, 1)}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {1, fence}
