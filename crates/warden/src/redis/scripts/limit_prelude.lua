-- Rate limiting, part 1 of 7: helpers shared by every algorithm. The parts are
-- concatenated into one script (see limit/redis.rs); each algorithm part adds
-- a function to STEPS mirroring its Rust twin in limit/<algorithm>.rs, and
-- limit_apply.lua runs them. All times are integer microseconds: they stay
-- below 2^53, where Lua's doubles are exact, and are written with '%d' because
-- tostring() would print 1.7e+15 and lose the digits.
local STEPS = {}
local MAX_STORED = 9007199254740991

-- floor(a / b) for non-negative integers below 2^53. The quotient of two
-- doubles is rounded, so floor(a / b) can be one too high; fix it up.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function int(n)
  return string.format('%d', n)
end

-- Start of the window of length `period` that contains `now`.
local function align(now, period)
  return idiv(now, period) * period
end

local function corrupt(key, what)
  error({err = 'WRONGTYPE limiter key ' .. key .. ' ' .. what})
end

-- A stored non-negative integer; anything else is corruption, never a guess.
local function field(key, v, name)
  if type(v) ~= 'string' or not string.match(v, '^%d+$') or #v > 16 then
    corrupt(key, 'has a bad ' .. name .. ': ' .. tostring(v))
  end
  local n = tonumber(v)
  if n > MAX_STORED then
    corrupt(key, 'has a ' .. name .. ' beyond 2^53: ' .. v)
  end
  return n
end

-- Whether `key` exists; an error when it holds another type.
local function exists_as(key, want)
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    return false
  end
  if t ~= want then
    corrupt(key, 'holds a ' .. t .. ', a ' .. want .. ' was expected')
  end
  return true
end

-- Hash fields as integers, or nil when the key does not exist.
local function hash_fields(key, names)
  if not exists_as(key, 'hash') then
    return nil
  end
  local raw = redis.call('HMGET', key, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    out[name] = field(key, raw[i], name)
  end
  return out
end
