-- The waiting line's settings and the two helpers its scripts' fast paths
-- need before the others are defined (prepended to every lease script that
-- uses the line, after lease_settings.lua; see lease_line.lua).

-- How long a waiter's entry lives without a look, and how long a lease
-- handed to a waiter is set for it until its look claims the full TTL
-- (`PLACE_LIFETIME` and `CLAIM_WINDOW` in lease/line.rs).
local PLACE_MS = 1000
local CLAIM_MS = 500

-- The command that publishes release notifications: SPUBLISH on a Redis
-- Cluster of Redis 7 or later (the channel shares the lease's hash tag, so only
-- the lease's master and its replicas carry the message), else PUBLISH. The
-- Rust side replaces this line (redis/publish.rs).
local PUBLISH = 'PUBLISH'

-- How long a line lives after a stand behind others refreshed it (see
-- lease_stand.lua): ten times a place's life.
local LINE_MS = 10 * PLACE_MS

-- The server's clock in milliseconds.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Makes the line live at least `ttl` ms from now without ever shortening it
-- (another waiter's entry may live longer): one `PEXPIRE … GT` where the
-- server has it (Redis 7), else a look at its TTL first.
local function outlive(queue, ttl)
  local set = redis.pcall('PEXPIRE', queue, ttl, 'GT')
  if type(set) == 'table' and set.err then
    if redis.call('PTTL', queue) < tonumber(ttl) then
      redis.call('PEXPIRE', queue, ttl)
    end
  end
end

