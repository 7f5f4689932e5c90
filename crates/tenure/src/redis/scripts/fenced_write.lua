-- Apply a write only if its fencing token is newer than the last one accepted,
-- or equal to it and from the same acquisition: a retry whose reply was lost,
-- or a second write under the same lease. An equal fence from another
-- acquisition (or from a writer that names none) is refused, so no reuse of a
-- fence can let a second holder in.
-- KEYS[1] resource hash {fence, acquisition, value}; ARGV[1] token (decimal),
-- ARGV[2] value, ARGV[3] acquisition id ('' when the writer names none)
-- Returns {1, token} when applied, {0, current} when refused.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE fenced resource ' .. KEYS[1] .. ' holds a ' .. kind)
end
local stored = redis.call('HMGET', KEYS[1], 'fence', 'acquisition')
local current = tonumber(stored[1] or '0')
if current == nil then
  return redis.error_reply('WRONGTYPE fenced resource ' .. KEYS[1] .. ' has a non-numeric fence')
end
local token = tonumber(ARGV[1])
local retry = token == current and ARGV[3] ~= '' and stored[2] == ARGV[3]
if token > current or retry then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[1], 'acquisition', ARGV[3])
  else
    redis.call('HDEL', KEYS[1], 'acquisition')
  end
  return {1, token}
end
return {0, current}
