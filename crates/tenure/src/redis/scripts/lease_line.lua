-- Shared by the lease scripts that use the waiting line (prepended to each
-- of them, after lease_fence.lua; lease_line_basics.lua comes before, with
-- the line's timings, the publish command, server_ms and outlive).
--
-- The waiting line of a lease is a list, KEYS[3] (`…:queue`), of entries
-- "<expires_ms> <ttl_ms> <token>": a waiter's owner token, the TTL it asked
-- for and, on the server's clock, when the entry dies unless its waiter
-- refreshes it (PLACE_MS after its last look: the waiter's heartbeat keeps
-- it, not the lease's TTL). An entry whose TTL is 0 is an observer's marker,
-- not a waiter: it asks releases to wake every watcher (a release with nobody
-- in line publishes nothing otherwise).

-- Puts `entries` back into the line (with `front` at its head, else at its
-- end). A line that the pops before emptied is re-created by the push: it
-- gets its TTL again (PEXPIRE … GT never adds one to a key without), as long
-- as the longest-lived entry; a line that lives on is made to outlive it.
local function put_back(queue, entries, front, now)
  local longest = 1
  for _, entry in ipairs(entries) do
    local expires = tonumber(string.match(entry, '^(%d+) '))
    if expires and expires - now > longest then
      longest = expires - now
    end
  end
  redis.call(front and 'LPUSH' or 'RPUSH', queue, unpack(entries))
  if redis.call('PTTL', queue) == -1 then
    redis.call('PEXPIRE', queue, longest)
  else
    outlive(queue, longest)
  end
end

-- An entry of the line: `<expires> <ttl> <token>` (its expiry in ms on the
-- server's clock, the waiter's TTL in ms, 0 for an observer's marker, and its
-- owner token); nil for anything else.
local function parse_entry(entry)
  return string.match(entry, '^(%d+) (%d+) (.+)$')
end

-- Pops the line's first waiter: observers' markers are put back at the end,
-- entries that expired are dropped — with `timed`; without, the first
-- waiter's entry is taken as it is (no TIME: a release's hand-off to a waiter
-- that died holds the key for CLAIM_MS only, and the next look of a live
-- waiter, which is timed, skips every expired entry). Returns the waiter
-- ({token, ttl, entry}, or nil when nobody waits) and whether an observer
-- watches; or nil, false and an error reply when the line is not a list.
-- `popped`, if given, is what the caller's own LPOP of the line answered.
local function pop_waiter(queue, timed, popped)
  local now, observed, markers = nil, false, {}
  while true do
    local entry = popped or redis.pcall('LPOP', queue)
    popped = nil
    if type(entry) == 'table' and entry.err then
      return nil, false, redis.error_reply('WRONGTYPE waiting line ' .. queue .. ' is not a list')
    end
    if not entry then
      break
    end
    local expires, ttl, token = parse_entry(entry)
    if expires then
      if ttl ~= '0' and not timed then
        if #markers > 0 then
          put_back(queue, markers, false, now or server_ms())
        end
        return {token = token, ttl = ttl, entry = entry}, observed
      end
      now = now or server_ms()
      if tonumber(expires) > now then
        if ttl ~= '0' then
          if #markers > 0 then
            put_back(queue, markers, false, now)
          end
          return {token = token, ttl = ttl, entry = entry}, observed
        end
        observed = true
        markers[#markers + 1] = entry
      end
    end
  end
  if #markers > 0 then
    put_back(queue, markers, false, now)
  end
  return nil, observed
end

-- Hands the lease (ours, or free) to `waiter`: a fresh fence, the key set to
-- its token for its TTL or CLAIM_MS, whichever is shorter (a waiter that died
-- just before leaves the key free again soon), and a message on the release
-- channel, "<token> <fence> <entry>": the waiter it names may hold the lease
-- with that fence without another call, counting its validity (the time the
-- key was set for) from the look that wrote `entry` (it was sent before this
-- hand-off ran); its first renewal claims the rest of its TTL. Best-effort: an
-- ACL user without channel rights still hands over, and the waiter finds out
-- when it next looks (and claims with that look). If the fence cannot be
-- taken, no key is left, the waiter goes back to the head of the line and is
-- woken (its bare token: no hand-off) so it meets the error itself; the error
-- reply is returned. `floor` and `old`, when given, are the clock floor the
-- caller already wrote to the counter and the counter it replaced (as for
-- take_fence).
local function hand_off(keys, waiter, channel, floor, old)
  local fence, err = take_fence(keys[1], keys[2], floor, old)
  if not fence then
    put_back(keys[3], {waiter.entry}, true, server_ms())
    redis.pcall(PUBLISH, channel, waiter.token)
    return err
  end
  redis.call('SET', keys[1], waiter.token, 'PX', math.min(tonumber(waiter.ttl), CLAIM_MS))
  redis.pcall(PUBLISH, channel, string.format('%s %d %s', waiter.token, fence, waiter.entry))
  return nil
end

-- Releases the lease we hold: hands it to the first waiter in line (with
-- `timed`, the first live one; see pop_waiter), or deletes it. Every watcher
-- is woken ('1') when an observer's marker is in line. Returns 1, or an error
-- reply (nothing changed) when the line is not a list. `popped` as for
-- pop_waiter; `floor` and `old` as for hand_off, written for the waiter
-- `popped` names (lease_handoff.lua).
local function release_to_next(keys, channel, timed, popped, floor, old)
  local waiter, observed, err = pop_waiter(keys[3], timed, popped)
  if err then
    return err
  end
  if waiter then
    -- A failed hand-off still released: it leaves no key behind.
    hand_off(keys, waiter, channel, floor, old)
  else
    redis.call('DEL', keys[1])
  end
  if observed then
    redis.pcall(PUBLISH, channel, '1')
  end
  return 1
end

-- Where the live entry of `token` stands in line (0-based), or nil. A scan
-- of the whole line: only for a look whose last entry was replaced meanwhile
-- (its process's keeper refreshed it, see lease_keep.lua).
local function find_token(queue, token)
  for at, entry in ipairs(redis.call('LRANGE', queue, 0, -1)) do
    local _, ttl, owner = parse_entry(entry)
    if owner == token and ttl ~= '0' then
      return at - 1
    end
  end
  return nil
end

-- Puts `entry` in line for `token`: in place of `old` (its last entry)
-- where that is still in line, else (given `token`) in place of another
-- entry of `token` (one its keeper wrote since), else at the end. The line
-- lives at least as long as its newest entry.
local function keep_place(queue, entry, old, ttl, token)
  local at = old ~= '' and (redis.call('LPOS', queue, old) or (token and find_token(queue, token)))
  if at then
    redis.call('LSET', queue, at, entry)
  elseif redis.call('RPUSH', queue, entry) == 1 then
    -- A new line has no TTL yet (GT would keep it so).
    redis.call('PEXPIRE', queue, ttl)
    return
  end
  outlive(queue, ttl)
end

-- An entry for `token` (asking for `ttl`), alive for PLACE_MS from now.
local function entry_for(token, ttl)
  return string.format('%d %s %s', server_ms() + PLACE_MS, ttl, token)
end

