-- Shared by the lease scripts that grant (prepended to each of them).

-- Increments the fence counter for a grant of lease_key. On failure (a counter
-- of another type, not an integer, at its maximum, or negative) lease_key is
-- deleted, the counter left as it was, and nil plus an error reply returned:
-- no lease ever exists without its fence.
local function take_fence(lease_key, fence_key)
  local fence = redis.pcall('INCR', fence_key)
  if type(fence) == 'table' and fence.err then
    redis.call('DEL', lease_key)
    local fence_type = redis.call('TYPE', fence_key).ok
    if fence_type ~= 'string' then
      return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' holds a ' .. fence_type)
    end
    if not string.match(redis.call('GET', fence_key), '^%d+$') then
      return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' is not an integer')
    end
    return nil, redis.error_reply('ERR fence counter ' .. fence_key .. ' cannot be incremented (' .. fence.err .. '); no lease was granted')
  end
  if fence < 1 then
    redis.call('DECR', fence_key)
    redis.call('DEL', lease_key)
    return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' is not an integer')
  end
  return fence
end

