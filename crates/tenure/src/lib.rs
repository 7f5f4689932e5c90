//! # tenure — leases that tell the truth, fencing tokens, and friends
//!
//! Distributed coordination for Rust services, behind one API from a single
//! host to a cluster:
//!
//! - [leases](lease) (distributed locks) that never lie to their holder: the
//!   [`LeaseGuard`] is told it may have lost the lease *before* the store lets
//!   anyone else in;
//! - [fencing tokens](fence), strictly increasing per key, that the protected
//!   resource checks, so a holder that woke up too late is refused;
//! - [leader election](election), [expiring semaphores](semaphore),
//!   [run-once](once) (idempotency keys) and [rate limiters](limit), with a
//!   tower/axum middleware in [`tenure-http`](https://docs.rs/tenure-http);
//! - stores: an embedded [SQLite](crate::sqlite) file (the default of the
//!   command line, no server), [Redis](crate::redis) (one master, Sentinel,
//!   Cluster, or a [`quorum`] of masters) and etcd (feature
//!   `etcd`, module `tenure::etcd`), plus an in-process [`memory`] store.
//!
//! A lease limits concurrency; it does **not** guarantee exclusive execution
//! once it has expired. A holder that pauses past its TTL can still write after
//! someone else took over; only the resource can refuse that write, by checking
//! the fence — which is what the example below shows, with no server.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::{Coordinator, Fence};
//!
//! // The protected resource remembers the highest fence it accepted, and
//! // takes only greater ones (an equal fence is a retry only with the same
//! // acquisition id: `guard.stamp()`, see `fence`).
//! let mut last = Fence::new(0);
//! let mut fenced_write = |fence: Fence| fence > last && { last = fence; true };
//!
//! let tenure = Coordinator::memory(); // or Coordinator::sqlite(path), ::connect(url)
//! // No renewal: it stands in for a process so stalled it renews nothing.
//! let lease = tenure.lease("account:7").ttl(Duration::from_millis(100)).watchdog(false);
//! // A takes the lease, then stalls past its TTL.
//! let a = lease.try_acquire().await?.expect("free");
//! tokio::time::sleep(Duration::from_millis(300)).await;
//! assert!(a.is_lost());
//! // B takes it over with a greater fence and writes.
//! let b = lease.try_acquire().await?.expect("A's lease expired");
//! assert!(b.fence() > a.fence());
//! assert!(fenced_write(b.fence()));
//! // A wakes up and writes anyway: refused.
//! assert!(!fenced_write(a.fence()));
//! b.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Know this first
//!
//! - Unix; the tests run on Linux (macOS is handled by the code, untested).
//!   Lease deadlines use `CLOCK_BOOTTIME` on Linux and `CLOCK_MONOTONIC`
//!   elsewhere ([`clock`]). MSRV: Rust 1.88.
//! - The tests run Redis 7.0; on 6.x (≥ 6.0.6) scripts stand in for the
//!   Redis 7 functions and options, untested; Valkey is not tested. Run
//!   Redis with `maxmemory-policy noeviction`.
//! - Renewal is on by default (every ttl/3) for leases, elections and
//!   run-once; [`Lease::watchdog`] turns it off for a fixed budget.
//! - Fences are large numbers, floored by the store's clock (µs since the
//!   epoch), so they never repeat even after a store lost its data or failed
//!   over, unless its clock stepped back past them; fence counters are
//!   dropped a day after a key's last grant (none on etcd).
//!
//! ## Where to go next
//!
//! - [`Coordinator`]: the handle; [`Coordinator::connect`] turns a URL into
//!   stores (`memory:`, `sqlite:PATH`, `redis://…`, `redis+cluster://…`,
//!   `redis+sentinel://…`, several `redis://` URLs for a quorum, `etcd://…`).
//! - [`lease`]: acquire, wait (first come, first served on Redis, SQLite and
//!   etcd), renew, release, the lost signal; [`fence`]: the resource side.
//! - Recipes on leases: [`election`] (the term is the fence), [`semaphore`]
//!   (up to N holders), [`once`] (a result recorded once per key); [`record`]
//!   is where elections and run-once keep ids and results.
//! - [`limit`]: rate limiters (GCRA, token bucket, sliding log, sliding
//!   window, fixed window), compound policies, waiting.
//! - [`clock`]: the clock of lease deadlines and a fake clock for tests.
//! - [`telemetry`]: `tracing` spans and events, metrics, and how to export them.
//!
//! ## Stores and cargo features
//!
//! | feature | default | what it compiles in |
//! |---|---|---|
//! | `redis` | yes | Redis: one master (`redis://`), a cluster (`redis+cluster://`), Sentinel (`redis+sentinel://`); leases, rate limits, records, semaphores, `RedisFencedStore` |
//! | `quorum` | yes | leases over several Redis masters: `Coordinator::connect_quorum`, comma-separated `redis://` URLs; turns on `redis` |
//! | `sqlite` | yes | the embedded single-host store `sqlite:PATH`, SQLite's C code compiled in (no system library) |
//! | `tls` | no | `rediss://` with rustls (ring); turns on `redis` |
//! | `etcd` | no | the etcd store `etcd://`, `etcds://` (brings tonic and prost) |
//! | `metrics` | no | metrics through the `metrics` facade (see [`telemetry`]); without it no metric code is compiled |
//!
//! The memory store, the APIs and the `tracing` spans are always compiled.
//! [`Coordinator::connect`] with a URL whose store is compiled out returns
//! [`Error::Config`] naming the feature.

#![forbid(unsafe_code)]
// The public surface stays honest: nothing `pub` that a user cannot reach, no
// type in a public signature that a user cannot name, and `Debug` on every
// public type. Here rather than in Cargo.toml's `[lints]`: that table already
// takes the workspace's lints (`workspace = true`), which Cargo does not let a
// crate extend, and these lints are about a library's surface, not the binaries'.
#![warn(unreachable_pub, unnameable_types, missing_debug_implementations)]
// docs.rs builds with `--cfg docsrs` on nightly: each item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod clock;
mod coordinator;
mod duration;
pub mod election;
pub mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fence;
pub mod gate;
mod key;
pub mod lease;
pub mod limit;
pub mod memory;
pub mod once;
#[cfg(feature = "quorum")]
pub mod quorum;
mod random;
pub mod record;
#[cfg(feature = "redis")]
pub mod redis;
pub mod rwlease;
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
pub use crate::lease::{Attempt, ExtendOutcome, Lease, LeaseGuard, LossCause, LostSignal};
pub use crate::lease::{Holder, HolderInfo, LeaseStatus, ReleaseOutcome};
pub use crate::lease::{LeaseSet, LeaseSetGuard};
pub use crate::rwlease::RwLease;

/// The crates.io README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of the long docs in `docs/` (outside the package, so only
/// under `cfg(doctest)`), compiled and, where they need no server, run.
#[cfg(doctest)]
mod docs_doctests {
    #[doc = include_str!("../../../README.md")]
    struct RepositoryReadme;
    #[doc = include_str!("../../../docs/recipes.md")]
    struct Recipes;
    #[doc = include_str!("../../../docs/leases.md")]
    struct Leases;
    #[doc = include_str!("../../../docs/limiters.md")]
    struct Limiters;
    #[doc = include_str!("../../../docs/quorum.md")]
    struct Quorum;
    #[doc = include_str!("../../../docs/redis.md")]
    struct Redis;
}
