//! Everything Redis: the connection (`conn`), the key layout (`keys`), the
//! settings (`options`), the lease store ([`RedisStore`], `lease`), its release
//! subscriber (`subscriber`), what a quorum needs from one node (`node`: the
//! quorum's node trait implemented on [`RedisStore`]), the rate-limit store
//! ([`RedisLimits`], `limit`), the fenced resource ([`RedisFencedStore`],
//! `fenced`) and the Lua scripts they run (`scripts/*.lua`).
//!
//! Every operation is one script call on the server (its clock, its atomicity);
//! scripts go by `EVALSHA` with a reload on `NOSCRIPT`, connections reconnect by
//! themselves, and every call has a time budget.

mod conn;
mod fenced;
mod keys;
mod lease;
mod limit;
#[cfg(feature = "quorum")]
mod node;
mod options;
mod record;
mod semaphore;
mod subscriber;

pub use conn::split_redis_urls;
pub use fenced::RedisFencedStore;
pub use lease::RedisStore;
pub use limit::RedisLimits;
pub use options::{DEFAULT_PREFIX, RedisOptions, RedisTls, ReplicaAcks};
