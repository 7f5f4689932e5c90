-- Gates (semaphores, read-write leases), shared part: each gate script is
-- this prelude followed by its own part (see redis/gate.rs). The rules are
-- those of gate/step.rs, run here on the server's clock.
--
-- KEYS[1] holds the gate's state as JSON: {holders = [...], line = [...],
-- next_seq = n}; a holder is {token, kind, expires_ms, fence, claimed,
-- since_ms, holder}, a waiter {token, kind, ttl_ms, expires_ms, seq}; a kind
-- is "r", "w" or {p = N}. Fences are kept as strings (JSON numbers lose
-- digits) and taken from the counter KEYS[2], floored by the server's clock
-- (`fence_floor` of lease_fence.lua, which comes first). An idle gate is
-- deleted (the counter stays).

-- How long a waiter's place lives after its last look (at most its TTL),
-- and how long a grant made to a waiter lives until its look claims it
-- (`PLACE_LIFETIME` and `CLAIM_WINDOW` in lease/line.rs): a waiter looks
-- every heartbeat, so one that was killed stops counting within a second.
local PLACE_MS = 1000
local CLAIM_MS = 500

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The state, or nil and an error reply for data tenure cannot use.
local function load(key)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then
    return {holders = {}, line = {}, next_seq = 0}
  end
  if kind ~= 'string' then
    return nil, redis.error_reply('WRONGTYPE gate key ' .. key .. ' holds a ' .. kind)
  end
  local ok, state = pcall(cjson.decode, redis.call('GET', key))
  if not ok or type(state) ~= 'table' then
    return nil, redis.error_reply('WRONGTYPE gate key ' .. key .. ' does not hold a gate')
  end
  state.holders = state.holders or {}
  state.line = state.line or {}
  state.next_seq = state.next_seq or 0
  return state
end

-- Nil when the fence counter can be incremented, else an error reply.
local function fence_err(key)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then
    return nil
  end
  if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE fence counter ' .. key .. ' holds a ' .. kind)
  end
  local value = redis.call('GET', key)
  if not string.match(value, '^%d+$') or #value > 18 then
    return redis.error_reply('WRONGTYPE fence counter ' .. key .. ' is not an integer')
  end
  return nil
end

-- Saves the state (deleted when idle), to live as long as its latest entry.
local function save(key, state)
  local last = 0
  for _, h in ipairs(state.holders) do last = math.max(last, h.expires_ms) end
  for _, w in ipairs(state.line) do last = math.max(last, w.expires_ms) end
  if #state.holders == 0 and #state.line == 0 then
    redis.call('DEL', key)
    return
  end
  local out = {next_seq = state.next_seq}
  if #state.holders > 0 then out.holders = state.holders end
  if #state.line > 0 then out.line = state.line end
  redis.call('SET', key, cjson.encode(out), 'PXAT', last)
end

local function prune(state, now)
  local holders, line = {}, {}
  for _, h in ipairs(state.holders) do
    if h.expires_ms > now then holders[#holders + 1] = h end
  end
  for _, w in ipairs(state.line) do
    if w.expires_ms > now then line[#line + 1] = w end
  end
  state.holders, state.line = holders, line
end

-- Whether a holder of `kind` fits beside the holders.
local function fits(state, kind)
  if kind == 'w' then
    return #state.holders == 0
  end
  if kind == 'r' then
    for _, h in ipairs(state.holders) do
      if h.kind ~= 'r' then return false end
    end
    return true
  end
  return #state.holders < tonumber(kind.p)
end

-- The next fence of the gate, as a string: max(counter + 1, clock floor)
-- (gate/step.rs `next_fence`), so a gate whose counter was lost (a restart
-- without persistence, FLUSHALL) goes on above every fence it handed out.
-- Formatted as an integer: Lua numbers are doubles (tostring gives 1.8e+15).
local function next_fence(fence_key)
  local fence = redis.call('INCR', fence_key)
  local floor = fence_floor(fence)
  if fence < floor then
    fence = floor
    redis.call('SET', fence_key, string.format('%.0f', fence))
  end
  return string.format('%.0f', fence)
end

-- Grants the waiters at the head of the line while they fit (each with a
-- fresh fence, living for the claim window and never longer than its place
-- would have) and wakes them on `channel` (best effort). Nothing is granted
-- while the counter is unusable.
local function promote(state, fence_key, channel, now)
  if fence_err(fence_key) then
    return
  end
  while #state.line > 0 and fits(state, state.line[1].kind) do
    local head = table.remove(state.line, 1)
    local fence = next_fence(fence_key)
    state.holders[#state.holders + 1] = {
      token = head.token, kind = head.kind,
      expires_ms = math.min(head.expires_ms, now + math.min(head.ttl_ms, CLAIM_MS)),
      fence = fence, claimed = false, since_ms = 0,
    }
    redis.pcall('PUBLISH', channel, head.token)
  end
end

-- Time until the soonest holder expires, or -1.
local function ttl_left(state, now)
  local soonest = -1
  for _, h in ipairs(state.holders) do
    local left = math.max(h.expires_ms - now, 1)
    if soonest < 0 or left < soonest then soonest = left end
  end
  return soonest
end

local function find(list, token)
  for i, e in ipairs(list) do
    if e.token == token then return i, e end
  end
  return nil
end
