-- Count live permits and read the fence counter.
-- KEYS[1] permits, KEYS[2] fence counter. Returns {held, fence or false}.
local refused = foreign_data(KEYS[1], KEYS[2])
if refused then
  return refused
end
local now = now_ms()
return {redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'), redis.call('GET', KEYS[2]) or false}
