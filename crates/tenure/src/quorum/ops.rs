//! The quorum's operations on a held lease — extend (with taking free nodes),
//! release — and the read-only ones — status, the merged release watch — each
//! one [`gather`](super::gather) with its own rule for when the answer is known.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::gather::{Call, count_ok, target};
use super::node::{NodeStatus, QuorumNode, Renewal};
use super::store::{Deadlines, Quorum};
use crate::error::{NodeOutcome, Result};
use crate::lease::{ExtendReply, LeaseStatus, ReleaseOutcome, ReleaseWatch};
use crate::token::OwnerToken;

/// How often a forwarding task checks whether the merged release watch is still
/// wanted.
const WATCH_POLL: Duration = Duration::from_secs(1);

/// The nodes' answers to an extend, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Renewals {
    pub extended: usize,
    /// The nodes taken while free.
    pub taken: Vec<usize>,
    pub not_ours: usize,
}

impl Renewals {
    pub(super) fn of(replies: &[Option<Result<Renewal>>]) -> Renewals {
        Renewals {
            extended: count_ok(replies, |r| *r == Renewal::Extended),
            taken: (0..replies.len())
                .filter(|i| matches!(replies[*i], Some(Ok(Renewal::Taken))))
                .collect(),
            not_ours: count_ok(replies, |r| *r == Renewal::NotOurs),
        }
    }

    /// Whether the extend is decided: won, lost, or no majority can answer. As
    /// for acquire, a node that timed out last time is not waited for
    /// (`pending` leaves it out) once a majority answered.
    pub(super) fn decided(&self, missing: usize, quorum: usize, pending: usize) -> bool {
        let ours = self.extended + self.taken.len();
        let answered = ours + self.not_ours;
        let won = ours >= quorum && self.extended > 0;
        let lost = ours + pending < quorum && answered >= quorum;
        won || lost || answered + missing < quorum
    }
}

impl<N: QuorumNode> Quorum<N> {
    /// Extends on every node; see the [module docs](crate::quorum).
    pub(super) async fn extend(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let Deadlines {
            valid_at,
            node: deadline,
            ..
        } = self.deadlines(ttl);
        // A free node is taken only while the lease is still valid by the last
        // confirmed deadline: then a majority holds our token, nobody else can
        // have held the lease since, and taking a free node gives the lease back
        // its margin (a lease won on exactly a majority would otherwise die
        // with the first of its nodes that freezes). After the deadline a free
        // node may mean the lease expired and changed hands: never revive it.
        let holding = self.holding(key, token);
        let may_take = holding.is_some_and(|h| crate::clock::now() < h.valid_until);
        let fence = holding.map_or(0, |h| h.fence);
        let target = target(key, token);
        let asked = Arc::clone(&target);
        let quorum = self.quorum();
        let mut replies = self
            .fan_out(Call::new("extend", key, Some(deadline)), move |node| {
                let t = Arc::clone(&asked);
                async move { node.extend_or_take(&t.0, &t.1, ttl, fence, may_take).await }
            })
            .await;
        replies
            .until(|r| {
                let missing = r.iter().filter(|r| r.is_none()).count();
                Renewals::of(r).decided(missing, quorum, self.pending(r))
            })
            .await;
        let renewals = Renewals::of(&replies.replies);
        let won = renewals.extended > 0
            && renewals.extended + renewals.taken.len() >= quorum
            && crate::clock::now() < valid_at;
        // Only a lease still held here is renewed: one released (or lost)
        // while the extend was under way stays gone.
        let held = won && self.renew_holding(key, token, valid_at);
        let answer = if won {
            if !renewals.taken.is_empty() {
                tracing::debug!(
                    key,
                    taken = renewals.taken.len(),
                    "quorum extend took free nodes"
                );
            }
            Ok(ExtendReply::Extended {
                valid_until: valid_at,
            })
        } else {
            self.extend_failed(key, token, &replies.replies, renewals)
        };
        // A take that lands after the release (or after the lease was found
        // lost) would leave our key on its node for a TTL: once every request
        // has ended, the follow-up undoes them unless the lease is still held.
        if replies.running() > 0 || !held {
            let give_up_at = self.keys_expire(ttl);
            self.spawn(
                self.clone()
                    .follow_extend(target, replies.take(), give_up_at),
            );
        }
        answer
    }

    /// An extend that did not win: lost (its takes are undone by the
    /// follow-up) or undecided.
    fn extend_failed(
        &self,
        key: &str,
        token: &OwnerToken,
        replies: &[Option<Result<Renewal>>],
        renewals: Renewals,
    ) -> Result<ExtendReply> {
        let (n, quorum) = (self.nodes().len(), self.quorum());
        // No node still held our token, yet a majority was free: the lease
        // expired everywhere (or the nodes lost it). Taking them would revive
        // it, so the lease is reported lost and the takes are undone.
        let vanished = renewals.extended == 0 && renewals.taken.len() >= quorum;
        if renewals.not_ours > n - quorum || vanished {
            self.set_holding(key, token, None);
            return Ok(ExtendReply::NotHeld);
        }
        // Not decided (too many nodes failed or answered too late): an error, so
        // the watchdog tries again until the local deadline. Nodes taken stay
        // ours (they were taken within the validity) and are renewed next time.
        let votes = self.votes(replies, |r| match r {
            Renewal::Extended | Renewal::Taken => NodeOutcome::Granted,
            Renewal::NotOurs => NodeOutcome::NotHeld,
        });
        Err(self.unavailable("extend", key, votes))
    }

    /// Releases on every node; once a majority has answered and one of them
    /// released, the rest finish in the background, and a node that did not
    /// answer is asked again (see `cleanup.rs`).
    pub(super) async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let give_up_at = match self.holding(key, token) {
            Some(h) => {
                let left = h.valid_until.saturating_duration_since(crate::clock::now());
                self.keys_expire(left)
            }
            None => self.keys_expire(self.options().node_timeout),
        };
        self.set_holding(key, token, None);
        let quorum = self.quorum();
        let deadline = Instant::now() + self.options().node_timeout;
        let target = target(key, token);
        let asked = Arc::clone(&target);
        let released = |r: &ReleaseOutcome| *r == ReleaseOutcome::Released;
        let mut replies = self
            .fan_out(Call::new("release", key, Some(deadline)), move |node| {
                let t = Arc::clone(&asked);
                async move { node.release(&t.0, &t.1).await }
            })
            .await;
        replies
            .until(|r| count_ok(r, |_| true) >= quorum && count_ok(r, released) > 0)
            .await;
        let answered = count_ok(&replies.replies, |_| true);
        let outcome = if count_ok(&replies.replies, released) > 0 {
            Ok(ReleaseOutcome::Released)
        } else if answered >= quorum {
            Ok(ReleaseOutcome::NotHeld)
        } else {
            let votes = self.votes(&replies.replies, |_| NodeOutcome::NotHeld);
            Err(self.unavailable("release", key, votes))
        };
        if answered < self.nodes().len() {
            self.spawn(
                self.clone()
                    .follow_release(target, replies.take(), give_up_at),
            );
        }
        outcome
    }

    /// Reads every node. The lease is held while a majority of the nodes holds
    /// it with the same owner token, until the quorum-th longest of their
    /// TTLs runs out; its fence is then the one those nodes agree on (the
    /// holder's own fence: see [`holder_fence`]). A free lease reports the
    /// highest counter any node has.
    pub(super) async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let quorum = self.quorum();
        let deadline = Instant::now() + self.options().node_timeout;
        let shared: Arc<str> = Arc::from(key);
        let replies = self
            .gather(
                Call::new("status", key, Some(deadline)),
                move |node| {
                    let key = Arc::clone(&shared);
                    async move { node.status(&key).await }
                },
                |_| false,
            )
            .await;
        let statuses: Vec<&NodeStatus> = replies.iter().flatten().flatten().collect();
        if statuses.len() < quorum {
            let votes = self.votes(&replies, |_| NodeOutcome::Granted);
            return Err(self.unavailable("status", key, votes));
        }
        let storage_key = format!(
            "{} on {} nodes",
            self.nodes()[0].storage_key(key),
            self.nodes().len()
        );
        let highest = statuses.iter().filter_map(|s| s.lease.fence).max();
        let mut status = LeaseStatus::free(storage_key, highest);
        // Waiters subscribe on every node; the node that counts the most
        // missed the fewest subscriptions.
        status.waiters = statuses.iter().filter_map(|s| s.lease.waiters).max();
        let Some(holding) = majority_holder(&statuses, quorum) else {
            return Ok(status);
        };
        let mut ttls: Vec<Duration> = holding
            .iter()
            .map(|s| s.lease.ttl_left.unwrap_or(Duration::MAX))
            .collect();
        ttls.sort_unstable_by(|a, b| b.cmp(a));
        status.held = true;
        status.ttl_left = ttls
            .get(quorum - 1)
            .copied()
            .filter(|t| *t != Duration::MAX);
        status.fence = holder_fence(&holding, quorum).or(highest);
        // The holder as recorded on a node that holds the lease for the fence
        // it granted (a node whose counter was raised to the quorum's fence
        // reports none).
        status.holder = holding.iter().find_map(|s| s.lease.holder.clone());
        Ok(status)
    }

    /// Subscribes on every node at once (bounded by the node timeout) and merges
    /// the notifications: a release is published on every node it reaches.
    pub(super) async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        let deadline = Instant::now() + self.options().node_timeout;
        let (merged_tx, merged_rx) = watch::channel(0u64);
        let merged_tx = Arc::new(merged_tx);
        let call = Call {
            mark: false,
            ..Call::new("watch", key, Some(deadline))
        };
        let (shared, forward_to) = (Arc::<str>::from(key), Arc::clone(&merged_tx));
        let mut ready = self
            .fan_out(call, move |node| {
                let (key, merged_tx) = (Arc::clone(&shared), Arc::clone(&forward_to));
                async move {
                    let watch = node.watch_releases(&key).await;
                    let push = watch.is_push();
                    if push {
                        tokio::spawn(forward(watch, merged_tx));
                    }
                    Ok(push)
                }
            })
            .await;
        // Wait for every node that is answering; a node that timed out last
        // time (frozen) is not waited for once a majority is subscribed — its
        // subscription goes on in the background. Waiting for it would keep a
        // waiter from its next attempt for the whole node timeout, while the
        // lease may already be free.
        let quorum = self.quorum();
        ready
            .until(|r| r.iter().flatten().count() >= quorum && self.pending(r) == 0)
            .await;
        if count_ok(&ready.replies, |push| *push) > 0 {
            ReleaseWatch::from_channel(merged_rx, Some(Box::new(merged_tx)))
        } else {
            ReleaseWatch::polling()
        }
    }
}

/// The nodes that hold the lease for one owner token, when a majority does
/// (at most one token can have a majority).
pub(super) fn majority_holder<'a>(
    statuses: &[&'a NodeStatus],
    quorum: usize,
) -> Option<Vec<&'a NodeStatus>> {
    statuses.iter().find_map(|s| {
        let owner = s.owner.as_deref()?;
        let same: Vec<&NodeStatus> = statuses
            .iter()
            .copied()
            .filter(|o| o.lease.held && o.owner.as_deref() == Some(owner))
            .collect();
        (same.len() >= quorum).then_some(same)
    })
}

/// The holder's fence as the nodes holding its token report it: the
/// `quorum`-th highest of their counters. While a node holds a token its
/// counter does not move, and the won ballot left a majority at the holder's
/// fence — those that granted it, those raised to it — while a minority may
/// sit below it (a node that granted a lower fence and was not raised: fences
/// floored by each node's clock differ) or above it (an extend that took a
/// node whose counter was already higher). A counter raised by someone
/// else's failed vote sits on a node that does not hold the token, and is
/// left out.
pub(super) fn holder_fence(holding: &[&NodeStatus], quorum: usize) -> Option<crate::fence::Fence> {
    let mut fences: Vec<_> = holding.iter().filter_map(|s| s.lease.fence).collect();
    fences.sort_unstable_by(|a, b| b.cmp(a));
    fences
        .get(quorum.saturating_sub(1))
        .or(fences.last())
        .copied()
}

/// Forwards one node's release notifications to the merged watch while anyone
/// still holds it.
async fn forward(mut watch: ReleaseWatch, merged_tx: Arc<watch::Sender<u64>>) {
    while !merged_tx.is_closed() {
        if watch.wait(WATCH_POLL).await {
            merged_tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}
