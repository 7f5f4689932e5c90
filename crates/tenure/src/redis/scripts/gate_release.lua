-- Give back our grant and our place in line, and grant the waiters that fit
-- now (gate/step.rs `State::release`).
-- KEYS[1] state, KEYS[2] fence counter; ARGV[1] owner token, ARGV[2] channel
-- Returns 1 when a grant was given back, 0 otherwise.
local state, err = load(KEYS[1])
if not state then
  return err
end
local now = server_ms()
prune(state, now)
local released = 0
local at = find(state.holders, ARGV[1])
if at then
  table.remove(state.holders, at)
  released = 1
end
at = find(state.line, ARGV[1])
if at then
  table.remove(state.line, at)
end
promote(state, KEYS[2], ARGV[2], now)
save(KEYS[1], state)
if released == 1 then
  redis.pcall('PUBLISH', ARGV[2], '1')
end
return released
