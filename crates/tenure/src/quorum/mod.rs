//! Quorum leases over N independent Redis masters (Redlock), with fencing tokens
//! that stay monotonic across holders.
//!
//! [`QuorumStore`] is a [`LeaseStore`](crate::lease::store::LeaseStore), so a
//! quorum lease has the same guard, watchdog, lost-lease signal and waiting as a
//! lease on one node:
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::Coordinator;
//!
//! let tenure = Coordinator::connect_quorum([
//!     "redis://10.0.0.1:6379",
//!     "redis://10.0.0.2:6379",
//!     "redis://10.0.0.3:6379",
//! ])
//! .await?;
//! let lease = tenure.lease("orders:42").ttl(Duration::from_secs(10));
//! if let Some(guard) = lease.try_acquire().await? {
//!     println!("fence {}", guard.fence()); // pass it to the resource
//!     guard.release().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # The protocol
//!
//! - **Acquire** sends the single-node acquire script to every node at once, each
//!   call bounded by a short per-node timeout ([`QuorumOptions::node_timeout`]).
//!   The lease is won with at least N/2+1 grants *and* a remaining validity
//!   `ttl − elapsed − drift > 0`, where elapsed runs on the monotonic clock from
//!   the moment the requests were sent. The answer is taken as soon as it is
//!   decided: a slow or frozen node is not waited for once a majority has
//!   answered either way, and a node whose last request timed out (frozen) is
//!   not waited for on a split vote until it answers again — the attempt fails
//!   at once and the contenders back off by a random delay. When the attempt
//!   fails, every node — including those that timed out or had not answered
//!   yet — is told to undo our vote before the call returns (the caller's
//!   next attempt carries a fresh owner token, so no undo can remove its
//!   grant; a vote that may have run after its undo is undone again once its
//!   request has ended, see "No vote left behind" in `docs/quorum.md`), and
//!   the caller gets
//!   [`Held`](crate::lease::store::AcquireReply::Held) with a random retry delay as
//!   `ttl_left` when the vote split, or the other holder's remaining TTL when a
//!   majority holds the lease. [`Error::QuorumUnavailable`](crate::Error) is
//!   returned only when fewer than N/2+1 nodes answered at all; it lists every
//!   node's outcome.
//! - **Extend** resets the TTL on every node that still holds our token and,
//!   while the lease is still valid by its last confirmed deadline, takes every
//!   node where the key is free (raising that node's fence counter to our
//!   fence), so a lease won on exactly a majority regains its margin and
//!   survives one of its nodes freezing. It succeeds with a majority (extended
//!   and taken, at least one extended) within the validity, and says `NotHeld`
//!   once a majority no longer holds it (an expired lease is never revived).
//! - **Release** deletes the key on every node that holds our token; a node
//!   that does not answer is asked again (a few times, never past the TTL).
//!
//! # Fencing tokens across holders
//!
//! Every node keeps a fence counter per key that the acquire script increments
//! when — and only when — that node grants the lease. A winner takes `t`, the
//! maximum over the grants it counts, and before it returns the lease (still
//! within the validity) makes sure a majority `M` of the nodes has `counter ≥ t`
//! while still holding our token there: the nodes whose grant returned `t` already
//! do, the others get `counter = max(counter, t)` by a script that first checks
//! the lease key still holds our token. When all grants returned the same value
//! (the steady state) this costs no second round trip.
//!
//! *Why fences increase:* a later holder needs grants from a majority `M'`, and any
//! two majorities of the same N nodes share a node `n`. On `n`, the later grant
//! happened after our key there was gone, hence after our raise (which ran while
//! the key held our token); so its increment returned at least `t + 1`, and its
//! own maximum is greater than `t`.
//!
//! The argument holds under two assumptions, which Redlock needs anyway:
//!
//! 1. **Bounded clock drift.** Nodes expire keys by their own clocks; a node whose
//!    clock runs fast by more than the drift margin can expire our key while we
//!    still count on it. The margin defaults to `ttl·1% + 2 ms`
//!    ([`DriftMargin`]).
//! 2. **No node loses an acknowledged write.** A node restarted with an empty or
//!    stale dataset forgets both our key and its fence counter. Either run every
//!    node with `appendonly yes` and `appendfsync always`, or keep a restarted node
//!    out of service for at least the longest TTL before it rejoins (the Redis
//!    documentation's *delayed restart*). A delayed restart restores mutual
//!    exclusion but not the fence counter it lost: with fences that must never go
//!    back, use persistence.
//!
//! # What it does not give you
//!
//! Like any lease, a quorum lease limits concurrency; it cannot stop a holder that
//! paused past its validity from acting late. Pass the fence to the resource and
//! let the resource refuse stale ones (see [`fence`](crate::fence)).
//!
//! # Code
//!
//! `node.rs` says what a quorum needs from one node (a crate-internal trait; the
//! Redis store implements it in `redis/node.rs`); `gather.rs` is the one fan-out
//! every operation uses (all nodes at once, per-node deadline, early decision,
//! unresponsive-node marking); `ballot.rs` is the acquire decision (tally, fence
//! settlement, undo of late votes, the refusal); `ops.rs` holds extend, release,
//! status and the release watch; `cleanup.rs` the follow-ups that undo every
//! vote a failed attempt or a released lease may have left; `store.rs` the
//! public [`QuorumStore`] over a node-generic core, which `tests.rs` drives
//! with in-process nodes.

mod ballot;
mod cleanup;
mod dedup;
mod gather;
mod limit;
pub(crate) mod node;
mod ops;
mod options;
mod store;
#[cfg(test)]
mod tests;

pub use crate::error::{NodeOutcome, NodeVote};
pub use limit::QuorumLimits;
pub use options::{DEFAULT_NODE_TIMEOUT, DEFAULT_RETRY_DELAY, DriftMargin, QuorumOptions};
pub use store::QuorumStore;

pub(crate) use crate::error::list_votes;
