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
use tokio::time::{Instant, sleep_until};

use super::gather::{Call, Inbox, count_ok, target};
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

/// Undoes an acquisition attempt on every node when dropped armed: a caller
/// dropped in the middle of an attempt leaves no key behind.
struct UndoOnDrop<'a, N: QuorumNode> {
    quorum: &'a Quorum<N>,
    key: &'a str,
    token: &'a OwnerToken,
    armed: bool,
}

impl<N: QuorumNode> Drop for UndoOnDrop<'_, N> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (tasks, _) = self.quorum.undo_tasks(self.key, self.token);
            for task in tasks {
                runtime.spawn(task);
            }
        }
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
        // Unless the lease is won, the votes are undone on every node; a
        // dropped caller counts as a failed attempt.
        let mut undo = UndoOnDrop {
            quorum: self,
            key,
            token,
            armed: true,
        };
        let call = Call::new("acquire", key, Some(d.node));
        let target = target(key, token);
        let mut votes = self
            .fan_out(call, move |node| {
                let (t, h) = (Arc::clone(&target), holder.clone());
                async move { node.vote(&t.0, &t.1, ttl, h.as_deref()).await }
            })
            .await;
        let quorum = self.quorum();
        votes
            .until(None, |b| Tally::of(b).decided(quorum, self.pending(b)))
            .await;
        let won = Tally::of(&votes.replies).granted >= quorum && crate::clock::now() < d.valid_at;
        if won
            && let Some(fence) = self.settle(key, token, &votes.replies, d.valid_until).await
            && crate::clock::now() < d.valid_at
        {
            undo.armed = false;
            return Ok(self.won(key, token, fence, d.valid_at, votes));
        }
        undo.armed = false;
        self.refuse(key, token, ttl, votes, d.node).await
    }

    /// Records a won lease and follows up on the votes still to come.
    fn won(
        &self,
        key: &str,
        token: &OwnerToken,
        fence: u64,
        valid_until: crate::clock::Moment,
        votes: Inbox<Ballot>,
    ) -> AcquireReply {
        self.set_holding(key, token, Some(Holding { fence, valid_until }));
        if votes.replies.iter().any(Option::is_none) {
            tokio::spawn(
                self.clone()
                    .follow_late_grants((key.to_string(), token.clone()), votes),
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
        if at_fence >= quorum {
            return Some(fence); // the steady state: no second round trip
        }
        let to_raise: Vec<usize> = grants
            .iter()
            .filter(|(_, f)| *f < fence)
            .map(|(i, _)| *i)
            .collect();
        let call = Call {
            mark: false,
            only: Some(&to_raise),
            ..Call::new("raise fence", key, Some(deadline))
        };
        let target = target(key, token);
        let confirmed = |r: &[Option<Result<bool>>]| at_fence + count_ok(r, |ok| *ok) >= quorum;
        let replies = self
            .gather(
                call,
                move |node| {
                    let t = Arc::clone(&target);
                    async move { node.raise_fence(&t.0, &t.1, fence).await }
                },
                confirmed,
            )
            .await;
        confirmed(&replies).then_some(fence)
    }

    /// A lost, split, too slow or unavailable ballot: undo every vote — also on
    /// nodes that timed out or have not answered yet — and say why.
    ///
    /// The undo requests are on every connection before this returns, behind
    /// this attempt's votes and ahead of the caller's next attempt (which in any
    /// case carries a fresh owner token), so an undo can only ever remove this
    /// attempt's grant. The nodes that answered are waited for (they are quick),
    /// so a caller that sees `Held` leaves no key behind on a responsive node.
    async fn refuse(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        votes: Inbox<Ballot>,
        node_deadline: Instant,
    ) -> Result<AcquireReply> {
        let (tasks, mut undos) = self.undo_tasks(key, token);
        super::gather::launch(tasks).await;
        let ballots = &votes.replies;
        let answered: Vec<usize> = (0..ballots.len())
            .filter(|i| matches!(ballots[*i], Some(Ok(_))))
            .collect();
        let cleanup_deadline = Instant::now() + self.options().node_timeout;
        undos
            .until(Some(cleanup_deadline), |u| {
                answered.iter().all(|i| u[*i].is_some())
            })
            .await;
        let votes_now = self.votes(ballots, |b| match b {
            Ballot::Granted(_) => NodeOutcome::Granted,
            Ballot::Held(ttl_left) => NodeOutcome::Held {
                ttl_left: *ttl_left,
            },
        });
        let tally = Tally::of(ballots);
        let held: Vec<Duration> = ballots
            .iter()
            .filter_map(|b| match b {
                Some(Ok(Ballot::Held(t))) => Some(t.unwrap_or(ttl)),
                _ => None,
            })
            .collect();
        if tally.missing > 0 {
            let late_deadline = node_deadline + self.options().node_timeout;
            let follow = (key.to_string(), token.clone());
            tokio::spawn(
                self.clone()
                    .undo_late_votes(follow, votes, undos, late_deadline),
            );
        }
        if answered.len() < self.quorum() {
            return Err(self.unavailable("acquire", key, votes_now));
        }
        let ttl_left = if held.len() >= self.quorum() {
            held_ttl(self.quorum(), tally.granted, held)
        } else {
            Some(self.retry_delay())
        };
        tracing::debug!(key, votes = %super::list_votes(&votes_now), "quorum acquire refused");
        Ok(AcquireReply::Held { ttl_left })
    }

    /// Tasks that delete the lease key on every node if it holds `token`,
    /// without waking waiters, and the inbox of whether each deleted our key.
    pub(super) fn undo_tasks(
        &self,
        key: &str,
        token: &OwnerToken,
    ) -> (Vec<super::gather::NodeTask>, Inbox<bool>) {
        let target = target(key, token);
        self.tasks(Call::new("undo", key, None), move |node| {
            let t = Arc::clone(&target);
            async move { node.undo_logged(&t.0, &t.1, "undoing a quorum vote").await }
        })
    }

    /// Follows up on nodes whose vote had not arrived when an attempt failed.
    /// Their undo went out at once, so it stays ahead of the caller's next
    /// attempt; but on a connection still being (re)established it can overtake
    /// the vote it undoes. When that happened — the undo found nothing and the
    /// vote then granted — the grant is undone again. Only then: a second undo
    /// after the vote found *our own* key — this attempt's token, which no later
    /// attempt carries — so it never removes a newer grant.
    async fn undo_late_votes(
        self,
        (key, token): (String, OwnerToken),
        mut votes: Inbox<Ballot>,
        mut undos: Inbox<bool>,
        deadline: Instant,
    ) {
        let late: Vec<usize> = (0..votes.replies.len())
            .filter(|i| votes.replies[*i].is_none())
            .collect();
        let settled = |v: &Inbox<Ballot>, u: &Inbox<bool>| {
            late.iter()
                .all(|i| v.replies[*i].is_some() && u.replies[*i].is_some())
        };
        while !settled(&votes, &undos) {
            tokio::select! {
                Some(_) = votes.next() => {}
                Some(_) = undos.next() => {}
                () = sleep_until(deadline) => break,
                else => break,
            }
        }
        for &i in &late {
            let granted = matches!(votes.replies[i], Some(Ok(Ballot::Granted(_))));
            let found_nothing = matches!(undos.replies[i], Some(Ok(false) | Err(_)));
            if granted && found_nothing {
                let node = &self.nodes()[i];
                let _ = node
                    .undo_logged(&key, &token, "undoing a late quorum vote")
                    .await;
            }
        }
    }

    /// Follows up on the votes of a won attempt that had not arrived when it was
    /// decided. Usually the release of the lease deletes them; but on a
    /// connection still being (re)established the release can overtake the vote
    /// and find nothing, and the vote then grants a key nobody will delete
    /// before its TTL. A late grant that arrives once the lease is released (or
    /// its validity over) is therefore undone — it carries this attempt's
    /// token, so it is ours alone.
    async fn follow_late_grants(
        self,
        (key, token): (String, OwnerToken),
        mut votes: Inbox<Ballot>,
    ) {
        while let Some(i) = votes.next().await {
            let granted = matches!(votes.replies[i], Some(Ok(Ballot::Granted(_))));
            if !granted || self.holding(&key, &token).is_some() {
                continue;
            }
            let node = &self.nodes()[i];
            let _ = node.undo_logged(&key, &token, "undoing a late grant").await;
        }
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
