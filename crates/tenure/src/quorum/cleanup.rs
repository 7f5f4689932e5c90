//! No vote left behind: the follow-ups that delete our key wherever a vote may
//! have left it after the attempt failed or the lease was released.
//!
//! A vote's fate is known only from its answer. Without one — the request
//! timed out, failed, or had not answered when the attempt was decided — the
//! vote may still have run, possibly *after* the undo or release sent behind
//! it (on a connection still being established, requests made by different
//! tasks are sent in the order those tasks get to run). So a vote counts as
//! possibly granted unless its node refused it, and such a vote is undone again
//! once its request has ended: a request made after that reaches the node
//! behind the vote. Every undo deletes the key only if it holds this attempt's
//! owner token, which no other attempt carries, so an undo never removes
//! anyone else's grant, however late it runs.

use std::time::Duration;

use tokio::time::Instant;

use super::gather::{Fanout, Target};
use super::node::{Ballot, QuorumNode, Renewal};
use super::store::{Holding, Quorum};
use crate::error::{Error, Result};

/// How often an undo whose node did not answer is sent before the key is left
/// to its TTL.
const UNDO_ATTEMPTS: u32 = 3;

/// Whether a node's vote may have left our key there: it granted, or its fate
/// is unknown (no answer, a timeout or a failure). Only a refusal is known to
/// have left nothing.
pub(super) fn may_have_granted(vote: &Option<Result<Ballot>>) -> bool {
    !matches!(vote, Some(Ok(Ballot::Held(_))))
}

/// The votes of an attempt that is not (or not yet) won, and the undos sent
/// for them. Dropped while still holding votes — the caller gave up on the
/// attempt, or some vote or undo was still out when it was decided — it
/// finishes the clean-up in one background task: nothing blocks in `Drop`,
/// and a cancelled acquire leaves no key behind.
pub(super) struct VoteCleanup<N: QuorumNode> {
    pub quorum: Quorum<N>,
    pub target: Target,
    /// Past this the votes' keys have expired on their own.
    pub give_up_at: Instant,
    pub votes: Fanout<N, Ballot>,
    /// Whether the votes are still to be cleaned up.
    pub armed: bool,
    /// The undos sent, and for each node whether its vote's request had ended
    /// when its undo was sent (then the undo ran behind it). A vote that only
    /// timed out for the decision has not ended: the undo may overtake it —
    /// on a connection being established, or when a slow node's queue is full
    /// and the waiting requests are let in in the order their tasks get to
    /// run.
    pub undos: Option<(Fanout<N, bool>, Vec<bool>)>,
}

impl<N: QuorumNode> VoteCleanup<N> {
    /// Whether nothing is left to do: every vote and undo has ended, and every
    /// vote that may have granted was deleted by an undo that ran behind it.
    fn done(&self) -> bool {
        if !self.armed {
            return true;
        }
        let Some((undos, after)) = &self.undos else {
            return false;
        };
        let votes = &self.votes;
        votes.running() == 0
            && undos.running() == 0
            && (0..votes.replies.len()).all(|i| !needs_undo(votes, undos, after, i))
    }

    /// Stops guarding the votes (the lease was won) and hands them over.
    pub(super) fn disarm(&mut self) -> Fanout<N, Ballot> {
        self.armed = false;
        self.votes.take()
    }
}

/// Whether node `i` may still hold our key after the undos: its vote may have
/// granted and no undo is known to have run behind it (one that deleted our
/// key did; one that found nothing did only if the vote's request had ended
/// first).
fn needs_undo<N: QuorumNode>(
    votes: &Fanout<N, Ballot>,
    undos: &Fanout<N, bool>,
    after: &[bool],
    i: usize,
) -> bool {
    let confirmed = match undos.replies[i] {
        Some(Ok(true)) => true,
        Some(Ok(false)) => after[i],
        _ => false,
    };
    may_have_granted(&votes.replies[i]) && !confirmed
}

impl<N: QuorumNode> Drop for VoteCleanup<N> {
    fn drop(&mut self) {
        if self.done() {
            return;
        }
        let votes = self.votes.take();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let quorum = self.quorum.clone();
        let (target, give_up_at) = (self.target.clone(), self.give_up_at);
        let undos = self.undos.take();
        quorum.spawn_on(
            quorum
                .clone()
                .undo_remaining(target, votes, undos, give_up_at),
            &runtime,
        );
    }
}

impl<N: QuorumNode> Quorum<N> {
    /// Waits for every vote and undo to end, then undoes every vote that may
    /// have granted and that no undo is known to have removed.
    async fn undo_remaining(
        self,
        target: Target,
        mut votes: Fanout<N, Ballot>,
        mut undos: Option<(Fanout<N, bool>, Vec<bool>)>,
        give_up_at: Instant,
    ) {
        let undos_done = async {
            if let Some((u, _)) = undos.as_mut() {
                u.finish().await;
            }
        };
        tokio::join!(votes.finish(), undos_done);
        for i in 0..votes.replies.len() {
            let needed = match &undos {
                Some((u, after)) => needs_undo(&votes, u, after, i),
                None => may_have_granted(&votes.replies[i]),
            };
            if needed {
                self.undo_until_answered(i, &target, give_up_at, "undoing a late quorum vote")
                    .await;
            }
        }
    }

    /// Follows up on the votes of a won attempt that had not answered when it
    /// was decided. Usually the release deletes them: it is sent after them.
    /// But a vote held up on a connection still being established can be sent
    /// after the release. So once every late vote has ended, if the lease is
    /// no longer held, each late vote that may have granted is undone; if it
    /// is still held, its release is sent after those votes and needs no
    /// help, and a late grant below the lease's fence is raised to it.
    pub(super) async fn follow_late_votes(
        self,
        target: Target,
        mut votes: Fanout<N, Ballot>,
        give_up_at: Instant,
    ) {
        let late: Vec<usize> = (0..votes.replies.len())
            .filter(|i| !votes.ended(*i))
            .collect();
        votes.finish().await;
        if let Some(Holding { fence, .. }) = self.holding(&target.0, &target.1) {
            // Raised as the ballot raised the grants it counted (`settle`):
            // left below the lease's fence, this node would make the holder's
            // fence read low (`status`) once a node of the majority lost the
            // key. A node that does not answer in time is left so.
            let below: Vec<usize> = late
                .into_iter()
                .filter(|&i| matches!(votes.replies[i], Some(Ok(Ballot::Granted(f))) if f < fence))
                .collect();
            if !below.is_empty() {
                let deadline = Instant::now() + self.options().node_timeout;
                self.raise_fences(&target.0, &target.1, &below, fence, deadline)
                    .await;
            }
            return;
        }
        for i in late {
            if may_have_granted(&votes.replies[i]) {
                self.undo_until_answered(i, &target, give_up_at, "undoing a late grant")
                    .await;
            }
        }
    }

    /// Follows up on an extend once each of its requests has ended: unless
    /// the lease is still held here, every node it may have taken (taken, or
    /// no answer) is undone — a take that ran after the release, or after the
    /// lease was found lost, must not keep our key there for a TTL.
    pub(super) async fn follow_extend(
        self,
        target: Target,
        mut extends: Fanout<N, Renewal>,
        give_up_at: Instant,
    ) {
        extends.finish().await;
        if self.holding(&target.0, &target.1).is_some() {
            return;
        }
        for i in 0..extends.replies.len() {
            let may_have_taken = !matches!(
                extends.replies[i],
                Some(Ok(Renewal::Extended | Renewal::NotOurs))
            );
            if may_have_taken {
                self.undo_until_answered(i, &target, give_up_at, "undoing an extend's take")
                    .await;
            }
        }
    }

    /// Follows up on a release whose request to some node did not come back
    /// with an answer: asks that node again (it may hold our key still).
    pub(super) async fn follow_release(
        self,
        target: Target,
        mut releases: Fanout<N, crate::lease::ReleaseOutcome>,
        give_up_at: Instant,
    ) {
        releases.finish().await;
        for i in 0..releases.replies.len() {
            if matches!(releases.replies[i], Some(Err(_))) {
                self.undo_until_answered(i, &target, give_up_at, "releasing again")
                    .await;
            }
        }
    }

    /// Deletes our key on node `i` if it holds our token (waking nobody),
    /// asking again while the node does not answer — a request that timed out
    /// may never have been sent — up to [`UNDO_ATTEMPTS`] times and never past
    /// `give_up_at`, when the key has expired anyway.
    pub(super) async fn undo_until_answered(
        &self,
        i: usize,
        target: &Target,
        give_up_at: Instant,
        what: &'static str,
    ) {
        let node = &self.nodes()[i];
        let mut pause = self.options().node_timeout;
        for _ in 0..UNDO_ATTEMPTS {
            match node.undo_logged(&target.0, &target.1, what).await {
                Err(Error::Timeout { .. } | Error::Unreachable { .. }) => {}
                _ => return,
            }
            if Instant::now() + pause >= give_up_at {
                return;
            }
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2).min(Duration::from_secs(1));
        }
    }

    /// When the keys of a lease (or of an attempt) for `ttl` from now have
    /// expired on every node: nothing is left to undo then.
    pub(super) fn keys_expire(&self, ttl: Duration) -> Instant {
        let margin = self.options().drift.of(ttl);
        Instant::now() + crate::duration::capped(ttl.saturating_add(margin))
    }
}
