-- Acquire a lease and, only when it is won, increment the key's fence counter.
-- KEYS[1] lease key, KEYS[2] fence counter
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds
-- Returns {1, fence} when acquired, {0, pttl} when held by someone else.
local lease_type = redis.call('TYPE', KEYS[1]).ok
if lease_type ~= 'none' and lease_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lease key ' .. KEYS[1] .. ' holds a ' .. lease_type)
end
local current = redis.call('GET', KEYS[2])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' is not an integer')
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
