-- Shared by the lease scripts that grant to a holder that may record itself
-- (prepended to each of them).

-- Records who holds the lease granted with `fence` (never the owner token):
-- host, pid, the label if any, the fence and the server's clock, in a hash
-- with the lease's TTL. Nothing when `host` is nil (the lease records
-- nothing). TIME before a write is fine under effects replication, the only
-- mode of Redis 7.
local function record_holder(holder_key, fence, ttl, host, pid, label)
  if not host then
    return
  end
  local now = redis.call('TIME')
  local fields = {'host', host, 'pid', pid, 'fence', string.format('%.0f', fence), 'since_s', now[1], 'since_us', now[2]}
  if label then
    fields[#fields + 1] = 'label'
    fields[#fields + 1] = label
  end
  redis.call('DEL', holder_key)
  redis.call('HSET', holder_key, unpack(fields))
  redis.call('PEXPIRE', holder_key, ttl)
end
