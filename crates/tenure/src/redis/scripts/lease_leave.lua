-- Leave the waiting line: remove every entry of our token and, if the lease
-- was handed to us meanwhile, pass it on to the next waiter (or delete it).
-- Every entry, not just the one we know of: a look whose reply was lost (a
-- timeout, a reset) may have written another, which would otherwise stay in
-- line under a token nobody listens for.
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] waiting line
-- ARGV[1] owner token, ARGV[2] release channel, ARGV[3] our last known entry
-- ('' if none; every entry of the token is removed either way)
-- Returns 1 when a lease handed to us was passed on, 0 otherwise.
local ours = ' ' .. ARGV[1]
for _, entry in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  if string.sub(entry, -#ours) == ours then
    redis.call('LREM', KEYS[3], 0, entry)
  end
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return release_to_next(KEYS, ARGV[2], true)
