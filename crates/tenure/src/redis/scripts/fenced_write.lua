-- Apply a write only if its fencing token is not older than the last one accepted.
-- A fence is unique per acquisition, so an equal fence is the same holder writing
-- again (a retry whose reply was lost, or a second write under the same lease).
-- KEYS[1] resource hash {fence, value}; ARGV[1] token (decimal), ARGV[2] value
-- Returns {1, token} when applied, {0, current} when rejected as stale.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE fenced resource ' .. KEYS[1] .. ' holds a ' .. kind)
end
local current = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if current == nil then
  return redis.error_reply('WRONGTYPE fenced resource ' .. KEYS[1] .. ' has a non-numeric fence')
end
local token = tonumber(ARGV[1])
if token >= current then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
  return {1, token}
end
return {0, current}
