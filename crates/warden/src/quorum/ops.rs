//! The quorum's operations on a held lease — extend (with taking free nodes),
//! release — and the read-only ones — status, the merged release watch — each
//! one [`gather`](super::gather) with its own rule for when the answer is known.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::gather::{Call, count_ok, target};
use super::node::{QuorumNode, Renewal};
use super::store::{Deadlines, Holding, Quorum};
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
        let quorum = self.quorum();
        let replies = self
            .gather(
                Call::new("extend", key, Some(deadline)),
                move |node| {
                    let t = Arc::clone(&target);
                    async move { node.extend_or_take(&t.0, &t.1, ttl, fence, may_take).await }
                },
                |r| {
                    let missing = r.iter().filter(|r| r.is_none()).count();
                    Renewals::of(r).decided(missing, quorum, self.pending(r))
                },
            )
            .await;
        let renewals = Renewals::of(&replies);
        if renewals.extended > 0
            && renewals.extended + renewals.taken.len() >= quorum
            && crate::clock::now() < valid_at
        {
            if let Some(h) = holding {
                let renewed = Holding {
                    valid_until: valid_at,
                    ..h
                };
                self.set_holding(key, token, Some(renewed));
            }
            if !renewals.taken.is_empty() {
                tracing::debug!(
                    key,
                    taken = renewals.taken.len(),
                    "quorum extend took free nodes"
                );
            }
            return Ok(ExtendReply::Extended {
                valid_until: valid_at,
            });
        }
        self.extend_failed(key, token, &replies, renewals)
    }

    /// An extend that did not win: lost (the takes are undone) or undecided.
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
        // it, so the takes are undone and the lease is reported lost.
        let vanished = renewals.extended == 0 && renewals.taken.len() >= quorum;
        if renewals.not_ours > n - quorum || vanished {
            self.set_holding(key, token, None);
            for i in renewals.taken {
                let (node, key, token) = (self.nodes()[i].clone(), key.to_string(), token.clone());
                tokio::spawn(async move {
                    let _ = node
                        .undo_logged(&key, &token, "undoing an extend's take")
                        .await;
                });
            }
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
    /// released, the rest finish in the background.
    pub(super) async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.set_holding(key, token, None);
        let quorum = self.quorum();
        let deadline = Instant::now() + self.options().node_timeout;
        let target = target(key, token);
        let released = |r: &ReleaseOutcome| *r == ReleaseOutcome::Released;
        let replies = self
            .gather(
                Call::new("release", key, Some(deadline)),
                move |node| {
                    let t = Arc::clone(&target);
                    async move { node.release(&t.0, &t.1).await }
                },
                |r| count_ok(r, |_| true) >= quorum && count_ok(r, released) > 0,
            )
            .await;
        if count_ok(&replies, released) > 0 {
            return Ok(ReleaseOutcome::Released);
        }
        if count_ok(&replies, |_| true) >= quorum {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let votes = self.votes(&replies, |_| NodeOutcome::NotHeld);
        Err(self.unavailable("release", key, votes))
    }

    /// Reads every node: held while a majority holds it, until the quorum-th
    /// longest TTL runs out; the fence is the highest any node reports.
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
        let statuses: Vec<&LeaseStatus> = replies.iter().flatten().flatten().collect();
        if statuses.len() < quorum {
            let votes = self.votes(&replies, |_| NodeOutcome::Granted);
            return Err(self.unavailable("status", key, votes));
        }
        let mut ttls: Vec<Duration> = statuses
            .iter()
            .filter(|s| s.held)
            .map(|s| s.ttl_left.unwrap_or(Duration::MAX))
            .collect();
        ttls.sort_unstable_by(|a, b| b.cmp(a));
        let held = ttls.len() >= quorum;
        let ttl_left = held
            .then(|| ttls.get(quorum - 1).copied())
            .flatten()
            .filter(|t| *t != Duration::MAX);
        let storage_key = format!(
            "{} on {} nodes",
            self.nodes()[0].storage_key(key),
            self.nodes().len()
        );
        let mut status =
            LeaseStatus::free(storage_key, statuses.iter().filter_map(|s| s.fence).max());
        // Waiters subscribe on every node; the node that counts the most
        // missed the fewest subscriptions.
        status.waiters = statuses.iter().filter_map(|s| s.waiters).max();
        if held {
            status.held = true;
            status.ttl_left = ttl_left;
            // The holder as recorded on a node that holds the lease for the
            // fence it granted (a node whose counter was raised to the
            // quorum's fence reports none).
            status.holder = statuses
                .iter()
                .filter(|s| s.held)
                .find_map(|s| s.holder.clone());
        }
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
            ..Call::new("watch", key, None)
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
            .until(Some(deadline), |r| {
                r.iter().flatten().count() >= quorum && self.pending(r) == 0
            })
            .await;
        if count_ok(&ready.replies, |push| *push) > 0 {
            ReleaseWatch::from_channel(merged_rx, Some(Box::new(merged_tx)))
        } else {
            ReleaseWatch::polling()
        }
    }
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
