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
-- The next fence, floored by the server's clock like a lease's (see
-- lease_fence.lua): whole seconds x 10^6 while the counter lives, the clock
-- in milliseconds x 1000 for a missing one.
local fence = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000
if fence == 1 then
  floor = floor + math.floor(tonumber(t[2]) / 1000) * 1000
end
if fence < floor then
  fence = floor
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {1, fence}
