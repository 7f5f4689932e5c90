-- Write a fenced record (a hash: fence, value) unless the rule keeps the old one.
-- KEYS[1] record key
-- ARGV[1] fence, ARGV[2] value, ARGV[3] ttl in milliseconds (0: no expiry),
-- ARGV[4] rule: 'absent' (only when there is none) or 'not-older' (unless the
-- stored fence is newer), ARGV[5] a channel to announce a written record on
-- ('' for none)
-- Returns {1, nil, nil} when written, {0, fence, value} with the record kept.
-- The PUBLISH is best-effort (pcall): an ACL user without channel rights gets
-- NOPERM on it, and a refused announcement must neither fail nor undo the
-- write; observers then learn of the new leader by polling or its TTL.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE record key ' .. KEYS[1] .. ' holds a ' .. kind)
end
local current = redis.call('HMGET', KEYS[1], 'fence', 'value')
if current[1] then
  if not string.match(current[1], '^%d+$') then
    return redis.error_reply('WRONGTYPE record key ' .. KEYS[1] .. ' has a non-integer fence')
  end
  if ARGV[4] == 'absent' or tonumber(current[1]) > tonumber(ARGV[1]) then
    return {0, current[1], current[2] or ''}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
if ARGV[5] ~= '' then
  redis.pcall('PUBLISH', ARGV[5], 'record')
end
return {1, false, false}
