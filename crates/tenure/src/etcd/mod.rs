//! Leases on an etcd cluster (feature `etcd`): consensus-grade leases and fences
//! behind the same [`Lease`](crate::Lease) API.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! let tenure = tenure::Coordinator::connect("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379").await?;
//! let guard = tenure.lease("orders:42").try_acquire().await?;
//! # Ok(()) }
//! ```
//!
//! # How leases map onto etcd
//!
//! - **Acquire**: an etcd lease is granted with the TTL, then one transaction
//!   creates the key only if it does not exist (`create_revision == 0`), bound
//!   to that lease, with the owner token as value. When the key exists, the
//!   same transaction reads it and the holder's lease tells the remaining TTL.
//!   Two round trips (grant, transaction).
//! - **Fence**: the key's create revision. etcd's revision is one counter for
//!   the whole cluster, raised by every write and kept through leader changes
//!   and restarts by the Raft log, so each new holder's fence is larger than
//!   every earlier one — with no extra counter and no persistence caveat.
//!   [`LeaseStatus::fence`](crate::LeaseStatus::fence) of a free key is `None`
//!   (etcd forgets a deleted key; the next fence is larger all the same).
//! - **Extend**: a keep-alive of our etcd lease and a transaction checking that
//!   the key still holds our token on that lease, sent together; the new local
//!   deadline counts from the send time. A lease etcd has already ended is not
//!   revived.
//! - **Release**: a transaction deletes the key only if it holds our token,
//!   then our etcd lease is revoked.
//! - **Waiting** is first-in-first-out by create revision, like etcd's own
//!   concurrency mutex: a waiter stands in line with a key of its own,
//!   `{prefix}{key}\0line\0{token}`, bound to a one-second etcd lease that
//!   the process's places share and its waiters' heartbeats keep alive (so a
//!   killed waiter's place dies within about 1.5 s, whatever the lease's
//!   TTL); each look is one transaction that takes the lease only when it is
//!   free and no place in line is older than ours (a range compare), and one
//!   watch per line per process, filtered here, wakes only the waiter whose
//!   turn it may be. A plain attempt does not jump a
//!   line that is not empty. An etcd watch on the key also pushes its
//!   deletion and a write of its record (a new leader's id) to election
//!   observers.
//!
//! # Recipes
//!
//! Elections, semaphores, run-once and the waiting line keep what they need
//! next to the lease key, behind a NUL byte no tenure key contains: the
//! fenced record at
//! `{prefix}{key}\0record` (the fence in 20 zero-padded digits, a space, the
//! value — so etcd's byte-wise value comparison compares fences and every
//! write is one transaction), and each semaphore member (a permit held or
//! waited for) at `{prefix}{key}\0permit\0p{N}.{token}`, bound to its own
//! etcd lease. A member is admitted when fewer than N members created before
//! it (by create revision) are still there; a waiting member keeps its place
//! in that order, so permits go in order of arrival (see `gate.rs`). An
//! election's term is its leader key's create revision, like etcd's own
//! campaign, and its candidates wait in the lease's line, so they are
//! elected in the order they began.
//!
//! # TLS
//!
//! `etcds://` speaks TLS (rustls with ring) to every member, trusting the
//! system's roots or [`EtcdOptions::ca_file`], presenting
//! [`EtcdOptions::client_cert`] when given (etcdctl's `--cacert`, `--cert`,
//! `--key`); see [`Coordinator::connect_etcd`](crate::Coordinator::connect_etcd).
//!
//! # TTLs are whole seconds
//!
//! etcd counts lease TTLs in whole seconds. tenure rounds the etcd TTL *up*
//! (300 ms → 1 s, 1.5 s → 2 s) and keeps the holder's local deadline from the
//! TTL asked for, minus the drift margin: the holder stops believing in the
//! lease first, and the key stays on the cluster until the rounded-up TTL runs
//! out (plus etcd's expiry sweep, every 500 ms on the leader) — other clients
//! can wait up to that long for an abandoned key. etcd may also raise a TTL
//! below its minimum (1.5 × the election timeout); the local deadline never
//! grows with it.
//!
//! # What consensus buys, and what it does not
//!
//! A granted key is committed by a majority of members before the grant is
//! answered, so a leader crash or a partitioned minority member cannot hand the
//! key to a second client, and fences keep increasing across all of it. The
//! local deadline (the lost signal) still assumes clocks that run at about the
//! same rate, like every lease; the fence checked at the resource does not.
//!
//! Rate limits are refused on etcd ([`EtcdLimits`]): keep them in Redis or
//! SQLite.

mod api;
mod client;
mod conn;
mod gate;
mod holder;
mod keys;
mod lease;
mod limit;
mod line;
mod line_watch;
mod ops;
mod options;
mod place_lease;
mod record;
mod turn;

pub use lease::EtcdStore;

/// Locks `m`, ignoring poisoning: nothing the etcd store keeps behind a
/// mutex is left half-changed by a panic.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
pub use limit::EtcdLimits;
pub use options::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_TIMEOUT, EtcdOptions};
