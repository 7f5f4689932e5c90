//! What a quorum needs from one node: [`QuorumNode`].
//!
//! The quorum's decision logic (`gather`, `ballot`, `store`) only speaks this
//! trait; the Redis store implements it in `redis/node.rs`, and the unit tests
//! implement it with in-process nodes that are slow, down or busy.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::lease::{HolderInfo, LeaseStatus, ReleaseOutcome, ReleaseWatch};
use crate::token::OwnerToken;

/// One node's answer to an acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ballot {
    /// Granted; the node's fence counter after its increment.
    Granted(u64),
    /// Someone else holds the key there, for this long when known.
    Held(Option<Duration>),
}

/// One node's answer to an extend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The key held our token; its TTL was reset.
    Extended,
    /// The key was free and now holds our token.
    Taken,
    /// Another owner holds the key (or it was free and not ours to take).
    NotOurs,
}

/// One node's view of a lease key: its status, and which owner token holds it
/// (compared between nodes only; never shown).
#[derive(Debug, Clone)]
pub(crate) struct NodeStatus {
    pub lease: LeaseStatus,
    /// The token the lease key holds (`None` when free).
    pub owner: Option<String>,
}

/// The operations of one quorum node. Each is one atomic step on the node; the
/// quorum bounds every call by its own deadline, so an implementation needs no
/// timeout of its own beyond its connection's.
///
/// The first poll of a returned future should queue the request on the
/// node's connection, so that requests normally reach the node in the order
/// they were made; where they do not, the quorum's follow-ups undo what a
/// reordered vote left once its request has ended (`cleanup.rs`). So a
/// request made after another one has ended (answered or failed) must reach
/// the node behind it — true on one connection; a vote stuck on a connection
/// that broke is the limit `docs/quorum.md` states.
#[async_trait]
pub(crate) trait QuorumNode: Debug + Clone + Send + Sync + 'static {
    /// Checks the node answers.
    async fn ping(&self) -> Result<()>;

    /// Votes: sets `key` to `token` for `ttl` unless it exists, and on success
    /// increments the key's fence counter (and records `holder`, if any).
    async fn vote(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<Ballot>;

    /// Deletes `key` if it holds `token` without waking waiters (undoing a vote
    /// wakes nobody: they would only split the next vote too). `true` when it
    /// deleted our key.
    async fn undo(&self, key: &str, token: &OwnerToken) -> Result<bool>;

    /// Raises the key's fence counter to at least `fence` if the key still holds
    /// `token`. `true` when the counter is now at least `fence`.
    async fn raise_fence(&self, key: &str, token: &OwnerToken, fence: u64) -> Result<bool>;

    /// Resets the TTL of `key` if it holds `token`; with `may_take`, takes the
    /// key if it is free (raising its fence counter to `fence`).
    async fn extend_or_take(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        fence: u64,
        may_take: bool,
    ) -> Result<Renewal>;

    /// Deletes `key` if it holds `token`, and wakes waiters.
    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome>;

    /// Reads the state of `key` on this node, with the token that holds it.
    async fn status(&self, key: &str) -> Result<NodeStatus>;

    /// Starts watching `key` for releases on this node.
    async fn watch_releases(&self, key: &str) -> ReleaseWatch;

    /// Where the node stores `key`, for [`LeaseStatus::storage_key`].
    fn storage_key(&self, key: &str) -> String;

    /// The node's name in logs.
    fn name(&self) -> String;

    /// [`undo`](Self::undo), logging a failure: the TTL frees the key then.
    async fn undo_logged(&self, key: &str, token: &OwnerToken, what: &'static str) -> Result<bool> {
        let reply = self.undo(key, token).await;
        if let Err(e) = &reply {
            tracing::debug!(key, node = %self.name(), error = %e, "{what} failed; the TTL will free the key");
        }
        reply
    }
}
