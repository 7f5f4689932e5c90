//! Everything Redis: the connection (`conn`, on one server or a Redis Cluster:
//! `cluster`), the key layout (`keys`), the
//! settings (`options`), the lease store ([`RedisStore`], `lease`), its
//! waiting line (`queue`), its release subscriber (`subscriber`), what a
//! quorum needs from one node (`node`: the
//! quorum's node trait implemented on [`RedisStore`]), the rate-limit store
//! ([`RedisLimits`], `limit`), the fenced resource ([`RedisFencedStore`],
//! `fenced`) and the Lua scripts they run (`scripts/*.lua`).
//!
//! Every operation is one script call on the server (its clock, its atomicity);
//! scripts go by `EVALSHA` with a reload on `NOSCRIPT`, connections reconnect by
//! themselves, and every call has a time budget.
//!
//! # Redis Cluster
//!
//! Every store here also runs on a Redis Cluster: connect with
//! `redis+cluster://[user:password@]host1:port1,host2:port2[?query]`
//! (`rediss+cluster://` over TLS), naming a few seed nodes. The client reads
//! the slot map, sends each script to the master of its keys' slot, follows
//! `MOVED`/`ASK` and re-reads the map after a failover (`cluster`). All keys
//! of one lease (lease, fence counter, waiting line, release channel, record,
//! permits) and
//! of one limiter key (every policy of a compound limiter) share one hash tag,
//! so each script runs whole on one master. Release notifications of leases
//! are sharded (`SPUBLISH`/`SSUBSCRIBE`) on Redis 7 or later: only the
//! lease's master and its replicas carry them (`publish`); on older servers
//! they use plain `PUBLISH`, which a cluster forwards to every node.
//! [`RedisOptions::require_replicas`] works per master (`WAIT` goes to the
//! master that took the write). What a failover does to held leases and fences
//! is measured in the repository's `docs/redis.md`.
//!
//! # Redis Sentinel
//!
//! `redis+sentinel://[user:password@]sentinel1:26379,sentinel2:26379/MASTER[/DB]`
//! (`rediss+sentinel://` over TLS) connects to the master the sentinels name
//! for `MASTER` (`sentinel`); the credentials and database are the master's.
//! A call that fails as a dead or demoted master fails (refused, dropped,
//! timed out, `READONLY`) makes the next call ask the sentinels again, so
//! tenure follows a failover; the failed call is a transient error that
//! waiters and the watchdog retry. The release subscriber connects to the
//! master found when it opens; after a failover waiters are woken by its
//! disconnection and then retry on their own (at least once a second)
//! instead of being notified.

mod cluster;
mod conn;
mod counter;
mod fenced;
mod function;
mod gate;
mod holder;
mod keeper;
mod keys;
mod lease;
mod limit;
mod list;
#[cfg(feature = "quorum")]
mod node;
mod options;
mod publish;
mod queue;
mod record;
mod sentinel;
mod subscriber;

pub use conn::split_redis_urls;
pub use fenced::RedisFencedStore;
pub use lease::RedisStore;
pub use limit::RedisLimits;
pub use options::{DEFAULT_FENCE_RETENTION, DEFAULT_PREFIX, RedisOptions, RedisTls, ReplicaAcks};
