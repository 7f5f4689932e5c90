-- Renew one node's part of a quorum lease: reset the TTL where the key holds our
-- token; where the key is free and the caller still holds a valid majority, take
-- it (the node missed our acquire, or its copy expired while it was slow), so a
-- lease won on exactly a majority regains its margin. A node taken this way gets
-- its fence counter raised to our fence, so every later grant here is above it.
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] holder hash (renewed with
-- the lease when there is one; a node taken here records no holder)
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds, ARGV[3] our fence (decimal),
-- ARGV[4] '1' when a free key may be taken
-- Returns 1 when extended, 2 when taken, 0 when held by another owner (or free
-- and not to be taken).

-- How long a fence counter outlives its last write, in milliseconds (the
-- store's fence retention: the Rust side replaces this line when it differs).
local fence_retention_ms = '86400000'
local lease_type = redis.call('TYPE', KEYS[1]).ok
if lease_type ~= 'none' and lease_type ~= 'string' then
  return redis.error_reply('WRONGTYPE lease key ' .. KEYS[1] .. ' holds a ' .. lease_type)
end
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return 1
end
if owner or ARGV[4] ~= '1' then
  return 0
end
local current = redis.call('GET', KEYS[2])
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' is not an integer')
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if current == false or tonumber(current) < tonumber(ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', fence_retention_ms)
end
return 2
