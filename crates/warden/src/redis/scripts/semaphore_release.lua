-- Give a permit back and wake the waiters.
-- KEYS[1] permits; ARGV[1] owner token, ARGV[2] release channel. Returns 1 released, 0 not held.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'zset' then
  return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[1] .. ' holds a ' .. kind)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
