//! The acquire ballot: every node votes at once; the tally decides as soon as
//! the outcome is known; a won ballot settles the fence on a majority; a lost
//! one undoes every vote (also the votes that arrive after the decision) and
//! chooses the refusal the caller sees.
//!
//! The decisions themselves ([`Tally`], [`held_ttl`]) are plain functions of
//! the replies, unit-tested in `tests.rs` over in-process nodes.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::cleanup::VoteCleanup;
use super::gather::{Call, Fanout, count_ok, target};
use super::node::{Ballot, QuorumNode};
use super::store::{Holding, Quorum};
use crate::error::{NodeOutcome, Result};
use crate::fence::Fence;
use crate::lease::{AcquireReply, HolderInfo};
use crate::token::OwnerToken;

/// Where an acquire ballot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tally {
    pub granted: usize,
    pub held: usize,
    /// Nodes that have not answered at all.
    pub missing: usize,
}

impl Tally {
    pub(super) fn of(ballots: &[Option<Result<Ballot>>]) -> Tally {
        Tally {
            granted: count_ok(ballots, |b| matches!(b, Ballot::Granted(_))),
            held: count_ok(ballots, |b| matches!(b, Ballot::Held(_))),
            missing: ballots.iter().filter(|b| b.is_none()).count(),
        }
    }

    /// Won; or lost and known why: a majority answered (contention) or too many
    /// nodes failed for a majority ever to answer (unavailable). Contention is
    /// decided without the nodes that timed out last time and have not answered
    /// since (`pending` leaves them out): after a split vote with one node
    /// frozen, waiting for it would cost every contender the whole node timeout
    /// and then fail the attempt all the same. Unavailability is only declared
    /// once every node has answered or failed.
    pub(super) fn decided(self, quorum: usize, pending: usize) -> bool {
        let answered = self.granted + self.held;
        let contended = self.granted + pending < quorum && answered >= quorum;
        let unavailable = answered + self.missing < quorum;
        self.granted >= quorum || contended || unavailable
    }
}

impl<N: QuorumNode> Quorum<N> {
    /// Runs one acquire ballot; see the [module docs](crate::quorum).
    pub(super) async fn acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        let d = self.deadlines(ttl);
        let holder = holder.cloned().map(Arc::new);
        let target = target(key, token);
        let asked = Arc::clone(&target);
        let votes = self
            .fan_out(Call::new("acquire", key, Some(d.node)), move |node| {
                let (t, h) = (Arc::clone(&asked), holder.clone());
                async move { node.vote(&t.0, &t.1, ttl, h.as_deref()).await }
            })
            .await;
        // Unless the lease is won, the votes are undone on every node; a
        // dropped caller counts as a failed attempt.
        let mut cleanup = VoteCleanup {
            quorum: self.clone(),
            target,
            give_up_at: self.keys_expire(ttl),
            votes,
            armed: true,
            undos: None,
        };
        let quorum = self.quorum();
        let votes = &mut cleanup.votes;
        votes
            .until(|b| Tally::of(b).decided(quorum, self.pending(b)))
            .await;
        let won = Tally::of(&votes.replies).granted >= quorum && crate::clock::now() < d.valid_at;
        if won
            && let Some(fence) = self.settle(key, token, &votes.replies, d.valid_until).await
            && crate::clock::now() < d.valid_at
        {
            let votes = cleanup.disarm();
            return Ok(self.won(&cleanup, fence, d.valid_at, votes));
        }
        self.refuse(ttl, cleanup).await
    }

    /// Records a won lease and follows up on the votes still to come.
    fn won(
        &self,
        cleanup: &VoteCleanup<N>,
        fence: u64,
        valid_until: crate::clock::Moment,
        votes: Fanout<N, Ballot>,
    ) -> AcquireReply {
        let (key, token) = (&cleanup.target.0, &cleanup.target.1);
        self.set_holding(key, token, Some(Holding { fence, valid_until }));
        if votes.running() > 0 {
            // Also the votes that timed out for the decision but still run.
            let target = cleanup.target.clone();
            self.spawn(
                self.clone()
                    .follow_late_votes(target, votes, cleanup.give_up_at),
            );
        }
        AcquireReply::Acquired {
            fence: Fence::new(fence),
            valid_until,
        }
    }

    /// The fence of a won ballot, the maximum of its grants, once a majority of
    /// the nodes has `counter ≥ fence` while still holding our token: nodes
    /// whose grant returned it already do; the other granting nodes get a
    /// raise. `None` when no majority confirmed it by `deadline`.
    async fn settle(
        &self,
        key: &str,
        token: &OwnerToken,
        ballots: &[Option<Result<Ballot>>],
        deadline: Instant,
    ) -> Option<u64> {
        let grants: Vec<(usize, u64)> = ballots
            .iter()
            .enumerate()
            .filter_map(|(i, b)| match b {
                Some(Ok(Ballot::Granted(f))) => Some((i, *f)),
                _ => None,
            })
            .collect();
        let fence = grants.iter().map(|(_, f)| *f).max().unwrap_or(0);
        let at_fence = grants.iter().filter(|(_, f)| *f == fence).count();
        let quorum = self.quorum();
        let to_raise: Vec<usize> = grants
            .iter()
            .filter(|(_, f)| *f < fence)
            .map(|(i, _)| *i)
            .collect();
        if to_raise.is_empty() {
            return (at_fence >= quorum).then_some(fence); // the steady state: one round trip
        }
        // Every granting node is raised before the fence is returned, also
        // when a majority already granted it: fences floored by each node's
        // clock differ, and a node left below the fence would make the
        // holder's fence read lower than it is (`status`) once a node of that
        // majority lost the key. A node that does not answer is waited for
        // until the deadline only.
        let replies = self
            .raise_fences(key, token, &to_raise, fence, deadline)
            .await;
        (at_fence + count_ok(&replies, |ok| *ok) >= quorum).then_some(fence)
    }

    /// Raises the fence counters of the nodes `only` to `fence` where they
    /// still hold `token`'s key (`scripts/quorum_fence.lua`), waiting for
    /// every answer until `deadline`. Each reply is `true` when that node's
    /// counter is now at least `fence`.
    pub(super) async fn raise_fences(
        &self,
        key: &str,
        token: &OwnerToken,
        only: &[usize],
        fence: u64,
        deadline: Instant,
    ) -> Vec<Option<Result<bool>>> {
        let call = Call {
            mark: false,
            only: Some(only),
            ..Call::new("raise fence", key, Some(deadline))
        };
        let target = target(key, token);
        let raises = only.len();
        self.gather(
            call,
            move |node| {
                let t = Arc::clone(&target);
                async move { node.raise_fence(&t.0, &t.1, fence).await }
            },
            move |r| count_ok(r, |ok| *ok) >= raises,
        )
        .await
    }

    /// A lost, split, too slow or unavailable ballot: undo every vote — also on
    /// nodes that timed out or have not answered yet — and say why.
    ///
    /// The undo requests are queued on every connection before this waits,
    /// behind this attempt's votes and ahead of the caller's next attempt
    /// (which in any case carries a fresh owner token), so an undo can only
    /// ever remove this attempt's grant. The nodes that answered are waited
    /// for (they are quick), so a caller that sees `Held` leaves no key behind
    /// on a responsive node; what is still out is followed up in the
    /// background (see `cleanup.rs`).
    async fn refuse(&self, ttl: Duration, mut cleanup: VoteCleanup<N>) -> Result<AcquireReply> {
        let target = Arc::clone(&cleanup.target);
        let key = &*target.0;
        // Everything the answer needs is read before anything is awaited.
        let ballots = &cleanup.votes.replies;
        let ended: Vec<bool> = (0..ballots.len()).map(|i| cleanup.votes.ended(i)).collect();
        let ok: Vec<usize> = (0..ballots.len())
            .filter(|i| matches!(ballots[*i], Some(Ok(_))))
            .collect();
        let refused = self.refusal(key, ttl, ballots, ok.len());
        let undone = Arc::clone(&target);
        let deadline = Instant::now() + self.options().node_timeout;
        let mut undos = self
            .fan_out(Call::new("undo", key, Some(deadline)), move |node| {
                let t = Arc::clone(&undone);
                async move { node.undo_logged(&t.0, &t.1, "undoing a quorum vote").await }
            })
            .await;
        undos.until(|u| ok.iter().all(|i| u[*i].is_some())).await;
        // What is still out (or failed) is finished when `cleanup` drops.
        cleanup.undos = Some((undos, ended));
        refused
    }

    /// What the caller of a lost ballot is told: unavailable when fewer than
    /// a majority answered (`answered`), else held — for the other holder's
    /// remaining TTL when a majority holds it, for a random retry delay when
    /// the vote split.
    fn refusal(
        &self,
        key: &str,
        ttl: Duration,
        ballots: &[Option<Result<Ballot>>],
        answered: usize,
    ) -> Result<AcquireReply> {
        let votes_now = self.votes(ballots, |b| match b {
            Ballot::Granted(_) => NodeOutcome::Granted,
            Ballot::Held(ttl_left) => NodeOutcome::Held {
                ttl_left: *ttl_left,
            },
        });
        if answered < self.quorum() {
            return Err(self.unavailable("acquire", key, votes_now));
        }
        let held: Vec<Duration> = ballots
            .iter()
            .filter_map(|b| match b {
                Some(Ok(Ballot::Held(t))) => Some(t.unwrap_or(ttl)),
                _ => None,
            })
            .collect();
        let ttl_left = if held.len() >= self.quorum() {
            held_ttl(self.quorum(), Tally::of(ballots).granted, held)
        } else {
            Some(self.retry_delay())
        };
        tracing::debug!(key, votes = %super::list_votes(&votes_now), "quorum acquire refused");
        Ok(AcquireReply::Held { ttl_left })
    }

    /// A random pause before the next attempt after a split vote.
    fn retry_delay(&self) -> Duration {
        let max = self.options().retry_delay;
        if max.is_zero() {
            return max;
        }
        // The whole range, not [max/2, max]: two clients that split a vote
        // decide at the same moment, and the wider the spread of their pauses,
        // the likelier one of them retries alone and wins.
        rand::rng().random_range(Duration::ZERO..=max)
    }
}

/// When a majority of the nodes holds the lease for others: the time until
/// enough of them expire for a majority to be free again (`granted` nodes are
/// ours already).
pub(super) fn held_ttl(quorum: usize, granted: usize, mut held: Vec<Duration>) -> Option<Duration> {
    held.sort_unstable();
    let must_expire = quorum.saturating_sub(granted).max(1);
    held.get(must_expire - 1).or(held.last()).copied()
}
