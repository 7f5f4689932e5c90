-- Count live permits and read the fence counter.
-- KEYS[1] permits, KEYS[2] fence counter. Returns {held, fence or false}.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'zset' then
  return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[1] .. ' holds a ' .. kind)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'), redis.call('GET', KEYS[2]) or false}
