-- Acquire a lease and, only when it is won, increment the key's fence counter.
-- KEYS[1] lease key, KEYS[2] fence counter
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds
-- Returns {1, fence} when acquired, {0, pttl} when held by someone else.
-- The grant and the fence are one step or none: if the INCR fails (a counter at
-- its maximum), the key just set is deleted again before the error is returned,
-- so a failed acquire never leaves a lease without a fence behind.
local lease_type = redis.call('TYPE', KEYS[1]).ok
if lease_type ~= 'none' and lease_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lease key ' .. KEYS[1] .. ' holds a ' .. lease_type)
end
local current = redis.call('GET', KEYS[2])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' is not an integer')
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    redis.call('DEL', KEYS[1])
    return redis.error_reply('ERR fence counter ' .. KEYS[2] .. ' cannot be incremented (' .. fence.err .. '); no lease was granted')
  end
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
