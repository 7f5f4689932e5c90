-- Rate limiting, part 1 of 7: helpers shared by every algorithm. The parts are
-- concatenated (see redis/limit.rs) into one Redis 7 function library, loaded
-- once (its top level, these helpers included, runs at load time only), and
-- into one EVALSHA script per algorithm for servers without functions (there
-- the whole text runs on every call). Each algorithm part adds to STEPS a
-- function mirroring its Rust twin in limit/<algorithm>.rs, to WRITES the
-- function that stores its new state with the TTL, and to REFUNDS the one that
-- gives units back; limit_apply.lua runs them.
-- Nothing at the top level changes after load: a library's upvalues outlive
-- the call. All times are integer microseconds: they stay below 2^53, where
-- Lua's doubles are exact, and are written with '%d' because tostring() would
-- print 1.7e+15 and lose the digits.
local STEPS, WRITES, REFUNDS = {}, {}, {}
local MAX_STORED = 9007199254740991
-- Library functions are looked up when called, never kept in locals: while a
-- function library loads, only its loader's `redis` table is visible (no
-- `redis.call`, no `math`).

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

-- A stored non-negative integer of at most 16 digits; anything else (a sign,
-- a fraction, an exponent, spaces, hex) is corruption, never a guess.
local function field(key, v, name)
  if type(v) ~= 'string' or #v > 16 or not string.find(v, '^%d+$') then
    corrupt(key, 'has a bad ' .. name .. ': ' .. tostring(v))
  end
  local n = tonumber(v)
  if n > MAX_STORED then
    corrupt(key, 'has a ' .. name .. ' beyond 2^53: ' .. v)
  end
  return n
end

-- Durations are counted from the instant the state reached; when the clock
-- went back behind it (`skew`), they are longer by that much from `now`.
local function later(us, skew)
  if us == 0 then
    return 0
  end
  return us + skew
end

-- The PEXPIRE/PX argument (ms) for state that reads as fresh `us` from the
-- state's instant: at least 1 ms, rounded up, plus `pad_ms` (a minute when the
-- caller injects `now`, see limit_apply.lua).
local function expiry(us, skew, pad_ms)
  local ttl = math.max(later(us, skew), 1)
  return int(math.max(1, idiv(ttl + 999, 1000)) + pad_ms)
end

-- `redis.call(...)` reading `key`: a key of another type than `want` is the
-- limiter's own WRONGTYPE error naming the key. There is no TYPE on the fast
-- path: the read itself fails on another type, and only then is TYPE asked.
local function read(key, want, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    local t = redis.call('TYPE', key).ok
    if t ~= want and t ~= 'none' then
      corrupt(key, 'holds a ' .. t .. ', a ' .. want .. ' was expected')
    end
    error(r)
  end
  return r
end

-- Hash fields as integers, or nil when the key does not exist. A hash that
-- has none of them was not written by tenure: an error, never a fresh start
-- (EXISTS runs only then, when every field is missing).
local function hash_fields(key, ...)
  local raw = read(key, 'hash', 'HMGET', key, ...)
  local n = select('#', ...)
  local any = false
  for i = 1, n do
    if raw[i] then
      any = true
      break
    end
  end
  if not any then
    if redis.call('EXISTS', key) == 1 then
      corrupt(key, 'has none of the fields ' .. table.concat({...}, ', '))
    end
    return nil
  end
  for i = 1, n do
    raw[i] = field(key, raw[i], (select(i, ...)))
  end
  return raw
end
