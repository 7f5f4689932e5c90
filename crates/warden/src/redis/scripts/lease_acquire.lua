-- Acquire a lease and, only when it is won, increment the key's fence counter.
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] holder hash
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds; when the holder is
-- recorded, ARGV[3] host, ARGV[4] pid and ARGV[5] label (if any)
-- Returns {1, fence} when acquired, {0, pttl} when held by someone else.
-- The fast path is two commands (SET NX, INCR); the type checks run only when
-- one of them did not go through, so a key of another type is still a clear
-- WRONGTYPE error and never a hold. The grant and the fence are one step or
-- none: if the INCR fails (a counter of another type, not an integer, or at its
-- maximum), the key just set is deleted again before the error is returned, so
-- a failed acquire never leaves a lease without a fence behind.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    redis.call('DEL', KEYS[1])
    local fence_type = redis.call('TYPE', KEYS[2]).ok
    if fence_type ~= 'string' then
      return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' holds a ' .. fence_type)
    end
    if not string.match(redis.call('GET', KEYS[2]), '^%d+$') then
      return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' is not an integer')
    end
    return redis.error_reply('ERR fence counter ' .. KEYS[2] .. ' cannot be incremented (' .. fence.err .. '); no lease was granted')
  end
  if fence < 1 then
    -- A negative counter is not a fence: put it back as it was, grant nothing.
    redis.call('DECR', KEYS[2])
    redis.call('DEL', KEYS[1])
    return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' is not an integer')
  end
  if ARGV[3] then
    -- Who holds it (never the token), stamped with the server's clock, with
    -- the lease's TTL. TIME before a write is fine under effects replication,
    -- the only mode of Redis 7.
    local now = redis.call('TIME')
    local fields = {'host', ARGV[3], 'pid', ARGV[4], 'fence', fence, 'since_s', now[1], 'since_us', now[2]}
    if ARGV[5] then
      fields[#fields + 1] = 'label'
      fields[#fields + 1] = ARGV[5]
    end
    redis.call('DEL', KEYS[3])
    redis.call('HSET', KEYS[3], unpack(fields))
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
  end
  return {1, fence}
end
local lease_type = redis.call('TYPE', KEYS[1]).ok
if lease_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lease key ' .. KEYS[1] .. ' holds a ' .. lease_type)
end
return {0, redis.call('PTTL', KEYS[1])}
