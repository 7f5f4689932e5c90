-- One look at a gate (gate/step.rs `State::look`).
-- KEYS[1] state, KEYS[2] fence counter
-- ARGV[1] owner token, ARGV[2] kind ('r', 'w' or the permit count N),
-- ARGV[3] ttl ms, ARGV[4] '1' to stand in line when refused, ARGV[5] channel,
-- ARGV[6] the holder as JSON ('' for none)
-- Returns {1, fence} when granted, {0, ms until the soonest holder expires
-- (-1: none), place ('' when not in line)} when refused.
local state, err = load(KEYS[1])
if not state then
  return err
end
err = fence_err(KEYS[2])
if err then
  return err
end
local kind = ARGV[2]
if kind ~= 'r' and kind ~= 'w' then
  kind = {p = tonumber(kind)}
end
local ttl = tonumber(ARGV[3])
local now = server_ms()
prune(state, now)
promote(state, KEYS[2], ARGV[5], now)
local _, held = find(state.holders, ARGV[1])
if held then
  held.expires_ms = now + ttl
  if not held.claimed then
    held.claimed, held.since_ms = true, now
    if ARGV[6] ~= '' then held.holder = cjson.decode(ARGV[6]) end
  end
  save(KEYS[1], state)
  return {1, held.fence, ''}
end
local _, waiting = find(state.line, ARGV[1])
if waiting then
  waiting.expires_ms, waiting.ttl_ms = now + math.min(ttl, PLACE_MS), ttl
  save(KEYS[1], state)
  return {0, ttl_left(state, now), tostring(waiting.seq)}
end
if #state.line == 0 and fits(state, kind) then
  local fence = next_fence(KEYS[2])
  local h = {token = ARGV[1], kind = kind, expires_ms = now + ttl, fence = fence,
             claimed = true, since_ms = now}
  if ARGV[6] ~= '' then h.holder = cjson.decode(ARGV[6]) end
  state.holders[#state.holders + 1] = h
  save(KEYS[1], state)
  return {1, fence, ''}
end
local place = ''
if ARGV[4] == '1' then
  local seq = state.next_seq
  state.next_seq = seq + 1
  state.line[#state.line + 1] = {token = ARGV[1], kind = kind, ttl_ms = ttl,
                                 expires_ms = now + math.min(ttl, PLACE_MS), seq = seq}
  place = tostring(seq)
end
save(KEYS[1], state)
return {0, ttl_left(state, now), place}
