-- The grant of an acquire that did not end in its fast path
-- (lease_acquire_fast.lua): the grant and the fence are one step or none
-- (take_fence), and the holder is recorded when asked. A free key is taken
-- even when waiters are in line: they are handed the lease on release, not
-- when it expires.
local fence, err = take_fence(KEYS[1], KEYS[2], floor, replaced)
if not fence then
  return err
end
record_holder(KEYS[3], fence, ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return fence
