-- One look by a waiter in line: take the lease when it was handed to us or is
-- free with us first in line; otherwise keep (or take) our place. The first
-- look of a wait (ARGV[4] '') is also its first attempt: it takes a free key
-- when nobody lives in line, and otherwise joins the line at once, so a
-- waiter's place is fixed by the first script it sends.
-- KEYS[1] lease key, KEYS[2] fence counter, KEYS[3] waiting line, KEYS[4]
-- holder hash
-- ARGV[1] owner token, ARGV[2] ttl in milliseconds, ARGV[3] release channel,
-- ARGV[4] our entry from the last look ('' before the first), ARGV[5] '1' when
-- the client knows of others waiting in line (a first look then stands behind
-- them without looking at the key), else ''; when the holder is recorded,
-- ARGV[6] host, ARGV[7] pid and ARGV[8] label (if any)
-- Returns {1, fence, ''} when the lease is ours (its TTL reset to ttl from now),
-- {0, pttl, entry} when we wait, entry being our place in line; a first look
-- that stood behind others without looking at the key answers the entry
-- alone (lease_stand.lua), which the client reads as {0, -1, entry}.
--
-- A first look behind others ends in lease_stand.lua, which runs before
-- the helpers are defined; this is the rest of the look.

-- The owner of the lease key, or nil when it is free. The first look sets the
-- key to our token at once if it is free (one SET NX GET, Redis 7; before 7,
-- a GET) and says whether it did: most first looks of a free key need no more
-- than that, the line's LPOP and the fence.
local function owner_or_take(first)
  if first then
    local old = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
    if type(old) ~= 'table' or not old.err then
      return old, not old
    end
  end
  -- A later look, a Redis before 7, or a key of another type (the GET
  -- raises WRONGTYPE).
  return redis.call('GET', KEYS[1]), false
end

local first = ARGV[4] == ''
local owner, taken = owner_or_take(first)
if owner == ARGV[1] then
  -- Handed over and not taken from the hand-off message (the waiter was
  -- looking, or had looked too long ago): claim it, so the holder counts its
  -- validity from this call.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = tonumber(redis.call('GET', KEYS[2]))
  record_holder(KEYS[4], fence, ARGV[2], ARGV[6], ARGV[7], ARGV[8])
  return {1, fence, ''}
end
if not owner then
  -- Free (its holder's TTL ran out): the first live waiter gets it.
  -- (A key we took is overwritten by a hand-off, deleted on an error.)
  local waiter, _, err = pop_waiter(KEYS[3], true)
  if err then
    if taken then
      redis.call('DEL', KEYS[1])
    end
    return err
  end
  if not waiter or waiter.token == ARGV[1] then
    if not taken then
      redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    end
    local fence, fence_err = take_fence(KEYS[1], KEYS[2])
    if not fence then
      return fence_err
    end
    record_holder(KEYS[4], fence, ARGV[2], ARGV[6], ARGV[7], ARGV[8])
    return {1, fence, ''}
  end
  local handoff_err = hand_off(KEYS, waiter, ARGV[3])
  if handoff_err then
    return handoff_err
  end
end
local entry = entry_for(ARGV[1], ARGV[2])
keep_place(KEYS[3], entry, ARGV[4], PLACE_MS, ARGV[1])
return {0, redis.call('PTTL', KEYS[1]), entry}
