-- Acquire a lease and, only when it is won, increment the key's fence counter.
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] holder hash
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds; when the holder is
-- recorded, ARGV[3] host, ARGV[4] pid and ARGV[5] label (if any)
-- Returns the fence (at least 1) when acquired; when held by someone else,
-- -2 - pttl (at most -1: -1 for a key without a TTL). One integer, where a
-- pair would cost the client a nested reply to parse.
-- The fast path is two commands (SET NX, INCR); the type checks run only when
-- one of them did not go through, so a key of another type is still a clear
-- WRONGTYPE error and never a hold. The grant and the fence are one step or
-- none (take_fence). A free key is taken even when waiters are in line: they
-- are handed the lease on release, not when it expires.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence, err = take_fence(KEYS[1], KEYS[2])
  if not fence then
    return err
  end
  record_holder(KEYS[3], fence, ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  return fence
end
local lease_type = redis.call('TYPE', KEYS[1]).ok
if lease_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lease key ' .. KEYS[1] .. ' holds a ' .. lease_type)
end
return -2 - redis.call('PTTL', KEYS[1])
