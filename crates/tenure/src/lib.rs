//! # tenure — leases that tell the truth, fencing tokens, and friends
//!
//! tenure coordinates processes through a shared store (Redis, or in-process
//! memory for tests and single-process programs). Its central type is the
//! [`Lease`]: a time-bounded lock whose [`LeaseGuard`] carries a [`Fence`] token,
//! renews itself when asked to, and tells its holder when it may no longer be
//! alone — before the store expires the key.
//!
//! A lease limits concurrency; it does **not** guarantee exclusive execution once
//! it has expired. A holder that pauses past its TTL can still write after someone
//! else took over. Only the protected resource can refuse such a write, by
//! checking the fencing token — which is what the example below does.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::collections::HashMap;
//! use std::time::Duration;
//! use tenure::{Fence, Coordinator};
//!
//! // A resource that remembers the highest fence it accepted.
//! let mut resource: HashMap<&str, (Fence, u64)> = HashMap::new();
//! let mut fenced_write = |fence: Fence, balance: u64| match resource.get("acct:1") {
//!     Some((last, _)) if *last >= fence => false, // stale holder: refused
//!     _ => { resource.insert("acct:1", (fence, balance)); true }
//! };
//!
//! let tenure = Coordinator::memory(); // or Coordinator::connect("redis://127.0.0.1:6379").await?
//! let lease = tenure.lease("acct:1").ttl(Duration::from_secs(10));
//! let a = lease.try_acquire().await?.expect("free");
//! let stale = a.fence();
//! a.release().await?;
//!
//! let b = lease.try_acquire().await?.expect("free again");
//! assert!(b.fence() > stale);               // fences strictly increase
//! assert!(fenced_write(b.fence(), 150));    // the current holder writes
//! assert!(!fenced_write(stale, 100));       // a late write with an old fence is refused
//! b.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Modules
//! - [`lease`]: acquire, wait, renew, release; the lost-lease signal; the
//!   [`LeaseStore`](lease::store::LeaseStore) trait every store implements.
//! - [`fence`]: fencing tokens and what a fenced resource answers.
//! - Recipes on the lease core: [`election`] (leader election; the term is the
//!   fence), [`semaphore`] (up to N holders, each permit a lease), [`once`]
//!   (run an operation once per key, its result recorded); [`record`] is the
//!   fenced [`RecordStore`](record::RecordStore) trait where elections and
//!   run-once keep ids and results.
//! - [`limit`]: rate limiters (GCRA, token bucket, sliding log, sliding window,
//!   fixed window), compound policies, waiting; the
//!   [`LimitStore`](limit::store::LimitStore) trait.
//! - [`clock`]: the clock of local lease deadlines (counts suspended time) and
//!   a fake clock for tests.
//! - The stores, one folder each: [`memory`] (in-process), [`redis`] (one
//!   master; also the fenced resource and Redis rate limits), [`sqlite`] (the
//!   embedded single-host default), [`quorum`] (leases over N independent Redis
//!   masters with fences that stay monotonic across holders).
//! - [`telemetry`]: the `tracing` spans and the metric names.
//!
//! ## Cargo features
//!
//! The memory store, the APIs and the `tracing` spans are always compiled;
//! each other store is a feature (default: `redis`, `sqlite`, `quorum`).
//!
//! | feature | default | what it compiles in |
//! |---|---|---|
//! | `redis` | yes | Redis: one master (`redis://`), a cluster (`redis+cluster://`), Sentinel (`redis+sentinel://`); leases, rate limits, records, semaphores, `RedisFencedStore` |
//! | `quorum` | yes | leases over several Redis masters (Redlock): `Coordinator::connect_quorum`, comma-separated `redis://` URLs; turns on `redis` |
//! | `sqlite` | yes | the embedded single-host store `sqlite:PATH`, SQLite's C code compiled in (no system library) |
//! | `tls` | no | `rediss://` with rustls (ring); turns on `redis` |
//! | `etcd` | no | the etcd store `etcd://`, `etcds://` (brings tonic and prost; building needs `protoc`) |
//! | `metrics` | no | metrics through the `metrics` facade (see [`telemetry`]); without it no metric code is compiled |
//!
//! [`Coordinator::connect`] with a URL whose store is compiled out returns
//! [`Error::Config`] naming the feature.

#![forbid(unsafe_code)]

pub mod clock;
mod coordinator;
mod duration;
pub mod election;
pub mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fence;
mod key;
pub mod lease;
pub mod limit;
pub mod memory;
pub mod once;
#[cfg(feature = "quorum")]
pub mod quorum;
pub mod record;
#[cfg(feature = "redis")]
pub mod redis;
pub mod semaphore;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod telemetry;
mod token;
mod url;

pub use crate::coordinator::{Coordinator, CoordinatorBuilder};
pub use crate::error::{Cause, Error, Result};
pub use crate::fence::Fence;
pub use crate::key::{MAX_KEY_LEN, validate_key};
pub use crate::lease::{Attempt, ExtendOutcome, Lease, LeaseGuard, LostSignal};
pub use crate::lease::{Holder, HolderInfo, LeaseStatus, ReleaseOutcome};

/// The README's `rust` examples (the recipes), compiled and run as doctests;
/// its fragments are marked `rust,ignore`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
