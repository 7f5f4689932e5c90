-- Keeps one process's places in one waiting line alive: one call per line
-- and heartbeat instead of one look per waiter (redis/keeper.rs). Each
-- waiter's live entry gets a fresh expiry, PLACE_MS from now; entries that
-- are gone or expired stay so (the keeper never puts a waiter in line). A
-- free lease (its holder's TTL ran out: nobody published anything) is handed
-- to the first live waiter, as any waiter's look would have done.
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] waiting line
-- ARGV[1] release channel, ARGV[2..] the owner tokens of the waiters whose
-- places are due (none: the call only serves the line)
-- Returns {pttl, owner, entries}: the lease's PTTL after this call (-2 when
-- free), its owner token ('' when free) and each waiter's new entry, in the
-- order of ARGV ('' for a waiter with no live place in line).
local slots, entries = {}, {}
for i = 2, #ARGV do
  slots[ARGV[i]] = i - 1
  entries[i - 1] = ''
end
local line = #ARGV > 1 and redis.pcall('LRANGE', KEYS[3], 0, -1) or {}
if type(line) == 'table' and line.err then
  return redis.error_reply('WRONGTYPE waiting line ' .. KEYS[3] .. ' is not a list')
end
local now, kept = server_ms(), false
for at, entry in ipairs(line) do
  local expires, ttl, token = parse_entry(entry)
  local slot = token and slots[token]
  if slot and ttl ~= '0' and entries[slot] == '' and tonumber(expires) > now then
    entries[slot] = string.format('%d %s %s', now + PLACE_MS, ttl, token)
    redis.call('LSET', KEYS[3], at - 1, entries[slot])
    kept = true
  end
end
if kept then
  outlive(KEYS[3], PLACE_MS)
end
local owner = redis.call('GET', KEYS[1])
if not owner then
  local waiter, _, err = pop_waiter(KEYS[3], true)
  if err then
    return err
  end
  if waiter then
    local handoff_err = hand_off(KEYS, waiter, ARGV[1])
    if handoff_err then
      return handoff_err
    end
    owner = waiter.token
  end
end
return {redis.call('PTTL', KEYS[1]), owner or '', entries}
