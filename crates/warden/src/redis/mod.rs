//! Everything Redis: the connection, the key layout, the lease store
//! ([`RedisStore`]), the rate-limit store ([`RedisLimits`]), the fenced resource
//! ([`RedisFencedStore`]) and the Lua scripts they run (`scripts/*.lua`).
//!
//! Every operation is one script call on the server (its clock, its atomicity);
//! scripts go by `EVALSHA` with a reload on `NOSCRIPT`, connections reconnect by
//! themselves, and every call has a time budget.

mod conn;
mod fenced;
mod lease;
mod limit;
mod record;

pub use conn::split_redis_urls;
pub use fenced::RedisFencedStore;
pub use lease::{DEFAULT_PREFIX, RedisOptions, RedisStore, ReplicaAcks};
pub use limit::RedisLimits;

pub(crate) use conn::redact;
