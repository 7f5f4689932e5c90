-- Read a gate: {state JSON ('' when idle), the server's clock ms, the fence
-- counter ('' when none)}.
-- KEYS[1] state, KEYS[2] fence counter
local state, err = load(KEYS[1])
if not state then
  return err
end
err = fence_err(KEYS[2])
if err then
  return err
end
local text = redis.call('GET', KEYS[1]) or ''
return {text, tostring(server_ms()), redis.call('GET', KEYS[2]) or ''}
