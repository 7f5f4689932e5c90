-- The settings of the fence helpers (lease_fence.lua), first in every script
-- that takes fences: the Rust side replaces these lines per store.

-- How long a fence counter outlives its last grant, in milliseconds (the
-- store's fence retention: the Rust side replaces this line when it differs).
local fence_retention_ms = '86400000'

-- The unit of the clock floor: 'us' on one master (a Redis master, Sentinel,
-- a Redis Cluster: one master per key), 'seconds' on the nodes of a quorum,
-- which must agree on their fences (the Rust side replaces this line there).
local fence_floor_unit = 'us'
