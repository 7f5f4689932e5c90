-- Reset the TTL of our grant (gate/step.rs `State::extend`).
-- KEYS[1] state; ARGV[1] owner token, ARGV[2] ttl ms
-- Returns 1 when renewed, 0 when we hold no grant.
local state, err = load(KEYS[1])
if not state then
  return err
end
local now = server_ms()
prune(state, now)
local _, held = find(state.holders, ARGV[1])
if not held then
  return 0
end
held.expires_ms = now + tonumber(ARGV[2])
save(KEYS[1], state)
return 1
