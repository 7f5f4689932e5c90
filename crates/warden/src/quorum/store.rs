//! The quorum backend: one [`RedisStore`] per node, driven concurrently.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, timeout_at};

use super::node::{Ballot, QuorumNode, Renewal};
use super::options::QuorumOptions;
use crate::error::{Error, Result};
use crate::error::{NodeOutcome, NodeVote};
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStatus, LeaseStore, ReleaseOutcome, ReleaseWatch,
};
use crate::redis::redact;
use crate::redis::{RedisOptions, RedisStore};
use crate::token::OwnerToken;

/// How often a forwarding task checks whether the merged release watch is still
/// wanted.
const WATCH_POLL: Duration = Duration::from_secs(1);

/// Leases over N independent Redis masters (Redlock); see the [module
/// docs](crate::quorum) for the protocol and the fencing argument.
///
/// Each node stores exactly what a [`RedisStore`] stores (`warden:{key}` with
/// the owner token, `warden:{key}:fence`), so any node can be inspected with
/// `redis-cli` like a single-node lease. Cheap to clone.
#[derive(Debug, Clone)]
pub struct QuorumStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    nodes: Vec<RedisStore>,
    names: Vec<String>,
    quorum: usize,
    options: QuorumOptions,
    /// Per node: its last request timed out and it has not answered since. A
    /// decision does not wait for such a node once the others have answered —
    /// it is still asked every time, and its first answer clears the flag.
    unresponsive: Vec<AtomicBool>,
    /// The leases this handle holds, by (key, owner token): the fence and the
    /// end of the validity last confirmed. Extend takes free nodes only for a
    /// lease still valid here, so it never revives an expired one.
    holdings: Mutex<HashMap<(String, String), Holding>>,
}

/// What this handle knows about a lease it won.
#[derive(Debug, Clone, Copy)]
struct Holding {
    fence: u64,
    /// On the clock that counts suspended time, like the guard's deadline: a
    /// host that slept past it must not take nodes for a lease that expired.
    valid_until: crate::clock::Moment,
}

/// Undoes an acquisition attempt on every node when dropped armed: a caller
/// dropped in the middle of an attempt leaves no key behind.
struct UndoOnDrop<'a> {
    backend: &'a QuorumStore,
    key: &'a str,
    token: &'a OwnerToken,
    armed: bool,
}

impl Drop for UndoOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            for task in self.backend.undo_tasks(self.key, self.token, None) {
                runtime.spawn(task);
            }
        }
    }
}

impl QuorumStore {
    /// Prepares a quorum over `urls` without any I/O: nodes that are down now are
    /// simply counted as unavailable until they come back. Fails only on a bad
    /// URL, an empty list, a repeated node or zero timeouts.
    ///
    /// Use an odd number of nodes (3 or 5): a fourth node raises the quorum
    /// without tolerating one more failure.
    pub fn new<I, S>(urls: I, options: QuorumOptions) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let node_options = RedisOptions::default()
            .prefix(options.prefix.clone())
            .timeout(options.node_timeout)
            .connect_timeout(options.connect_timeout.unwrap_or(options.node_timeout));
        let mut nodes = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for url in urls {
            let url = url.as_ref().trim();
            let name = redact(url);
            if names.contains(&name) {
                return Err(Error::Config {
                    url: name,
                    reason: "the same node is listed twice; it would vote twice".into(),
                });
            }
            // EVAL, not EVALSHA: keeps each node's requests in call order (an
            // undo behind its vote, a release ahead of the next acquire).
            nodes.push(RedisStore::quorum_node(url, node_options.clone())?);
            names.push(name);
        }
        if nodes.is_empty() {
            return Err(Error::Config {
                url: String::new(),
                reason: "a quorum needs at least one node URL".into(),
            });
        }
        let quorum = nodes.len() / 2 + 1;
        let unresponsive = nodes.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(QuorumStore {
            inner: Arc::new(Inner {
                nodes,
                names,
                quorum,
                options,
                unresponsive,
                holdings: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Like [`new`](Self::new), then checks that a majority of the nodes answers
    /// `PING` (a minority may be down).
    pub async fn connect<I, S>(urls: I, options: QuorumOptions) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let backend = Self::new(urls, options)?;
        let deadline = Instant::now() + backend.inner.options.node_timeout;
        let quorum = backend.inner.quorum;
        let replies = backend
            .gather(
                ("connect", ""),
                deadline,
                |node| async move { node.ping().await },
                |replies| replies.iter().filter(|r| matches!(r, Some(Ok(())))).count() >= quorum,
            )
            .await;
        let votes = backend.votes(&replies, |()| NodeOutcome::Granted);
        if count(&votes, |o| *o == NodeOutcome::Granted) < quorum {
            return Err(backend.unavailable("connect", "", votes));
        }
        Ok(backend)
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Always `false`: a quorum has at least one node.
    pub fn is_empty(&self) -> bool {
        self.inner.nodes.is_empty()
    }

    /// How many nodes must agree: N/2+1.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The nodes' URLs, without credentials.
    pub fn nodes(&self) -> &[String] {
        &self.inner.names
    }

    /// The single-node backends, e.g. to inspect one node in a test.
    pub fn node_backends(&self) -> &[RedisStore] {
        &self.inner.nodes
    }

    fn validity_end(&self, sent: Instant, ttl: Duration) -> Instant {
        sent + ttl.saturating_sub(self.inner.options.drift.of(ttl))
    }

    /// Records whether node `i` answered: a timeout marks it unresponsive, any
    /// answer (even an error reply) marks it responsive again.
    fn note<T>(&self, i: usize, reply: &Result<T>) {
        let unresponsive = matches!(reply, Err(Error::Timeout { .. }));
        self.inner.unresponsive[i].store(unresponsive, Ordering::Relaxed);
    }

    /// How many nodes have not answered yet and may still answer soon: a node
    /// that timed out last time and has not answered since is not counted, so
    /// a decision that only that node could change is taken without it.
    fn pending<T>(&self, replies: &[Option<T>]) -> usize {
        replies
            .iter()
            .zip(&self.inner.unresponsive)
            .filter(|(r, slow)| r.is_none() && !slow.load(Ordering::Relaxed))
            .count()
    }

    fn holding(&self, key: &str, token: &OwnerToken) -> Option<Holding> {
        let holdings = self
            .inner
            .holdings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        holdings
            .get(&(key.to_string(), token.as_str().to_string()))
            .copied()
    }

    /// Remembers (or, with `None`, forgets) a lease this handle holds; drops
    /// entries whose validity has passed, so the map only holds live leases.
    fn set_holding(&self, key: &str, token: &OwnerToken, holding: Option<Holding>) {
        let mut holdings = self
            .inner
            .holdings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now = crate::clock::now();
        holdings.retain(|_, h| h.valid_until > now);
        let id = (key.to_string(), token.as_str().to_string());
        match holding {
            Some(h) => {
                holdings.insert(id, h);
            }
            None => {
                holdings.remove(&id);
            }
        }
    }

    fn unavailable(&self, op: &'static str, key: &str, votes: Vec<NodeVote>) -> Error {
        Error::QuorumUnavailable {
            op,
            key: key.to_string(),
            needed: self.inner.quorum,
            votes,
        }
    }

    fn timeout_error(&self, node: usize, op: &'static str, key: &str, after: Duration) -> Error {
        Error::Timeout {
            backend: self.inner.names[node].clone(),
            op,
            key: key.to_string(),
            after,
        }
    }

    /// One vote per node, in node order.
    fn votes<T>(
        &self,
        replies: &[Option<Result<T>>],
        outcome: impl Fn(&T) -> NodeOutcome,
    ) -> Vec<NodeVote> {
        replies
            .iter()
            .zip(&self.inner.names)
            .map(|(reply, name)| {
                let o = match reply {
                    None => NodeOutcome::Undecided,
                    Some(Ok(v)) => outcome(v),
                    Some(Err(e)) => NodeOutcome::from_error(e),
                };
                NodeVote::new(name.clone(), o)
            })
            .collect()
    }

    /// Runs `op` on every node, each in its own task bounded by `deadline`, and
    /// collects the replies until `decided` says the outcome is known or every
    /// node has answered. Tasks still running go on in the background (their
    /// requests are on the wire already), so a slow node never holds up a
    /// decided operation.
    async fn gather<T, F, Fut>(
        &self,
        (op_name, key): (&'static str, &str),
        deadline: Instant,
        op: F,
        mut decided: impl FnMut(&[Option<Result<T>>]) -> bool,
    ) -> Vec<Option<Result<T>>>
    where
        T: Send + 'static,
        F: Fn(RedisStore) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut calls = Vec::with_capacity(self.inner.nodes.len());
        for (i, node) in self.inner.nodes.iter().enumerate() {
            let call = op(node.clone());
            let tx = tx.clone();
            let (backend, key) = (self.inner.names[i].clone(), key.to_string());
            let me = self.clone();
            calls.push(Box::pin(async move {
                let started = Instant::now();
                let reply = match timeout_at(deadline, call).await {
                    Ok(reply) => reply,
                    Err(_) => Err(Error::Timeout {
                        backend,
                        op: op_name,
                        key,
                        after: started.elapsed(),
                    }),
                };
                me.note(i, &reply);
                let _ = tx.send((i, reply));
            }) as NodeTask);
        }
        launch(calls).await;
        drop(tx);
        let mut replies: Vec<Option<Result<T>>> =
            (0..self.inner.nodes.len()).map(|_| None).collect();
        while let Some((i, reply)) = rx.recv().await {
            replies[i] = Some(reply);
            if decided(&replies) {
                break;
            }
        }
        replies
    }

    /// One task per node that deletes the lease key if it holds `token`, without
    /// waking waiters; each reports its node's index on `done` when finished.
    fn undo_tasks(
        &self,
        key: &str,
        token: &OwnerToken,
        done: Option<mpsc::UnboundedSender<(usize, bool)>>,
    ) -> Vec<NodeTask> {
        let mut tasks = Vec::with_capacity(self.inner.nodes.len());
        for (i, node) in self.inner.nodes.iter().enumerate() {
            let (node, key, token, done) =
                (node.clone(), key.to_string(), token.clone(), done.clone());
            let me = self.clone();
            tasks.push(Box::pin(async move {
                let reply = node.undo(&key, &token).await;
                me.note(i, &reply);
                let released = match reply {
                    Ok(released) => released,
                    Err(e) => {
                        tracing::debug!(key, node = %node.name(), error = %e, "undoing a quorum vote failed; the TTL will free the key");
                        false
                    }
                };
                if let Some(done) = done {
                    let _ = done.send((i, released));
                }
            }) as NodeTask);
        }
        tasks
    }

    /// Follows up on nodes whose vote had not arrived when an attempt failed. Their
    /// undo went out at once, so it stays ahead of the caller's next attempt; but
    /// on a connection still being (re)established it can overtake the vote it
    /// undoes. When that happened — the undo found nothing and the vote then
    /// granted — the grant is undone again. Only then: a second undo after the
    /// vote found *our own* key — this attempt's token, which no later attempt
    /// carries — so it never removes a newer grant.
    async fn undo_late_votes(
        self,
        (key, token): (String, OwnerToken),
        late: Vec<usize>,
        (mut votes, mut undos, mut undone): (VoteInbox, UndoInbox, Vec<Option<bool>>),
        deadline: Instant,
    ) {
        let mut granted: Vec<Option<bool>> = vec![None; undone.len()];
        let settled = |granted: &[Option<bool>], undone: &[Option<bool>]| {
            late.iter()
                .all(|i| granted[*i].is_some() && undone[*i].is_some())
        };
        while !settled(&granted, &undone) {
            let next = tokio::select! {
                Some((i, ballot)) = votes.recv() => {
                    granted[i] = Some(matches!(ballot, Ok(Ballot::Granted(_))));
                    continue;
                }
                Some((i, released)) = undos.recv() => (i, released),
                () = tokio::time::sleep_until(deadline) => break,
                else => break,
            };
            undone[next.0] = Some(next.1);
        }
        for &i in &late {
            if granted[i] == Some(true) && undone[i] == Some(false) {
                let node = &self.inner.nodes[i];
                if let Err(e) = node.undo(&key, &token).await {
                    tracing::debug!(key, node = %node.name(), error = %e, "undoing a late quorum vote failed; the TTL will free the key");
                }
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
    async fn follow_late_grants(self, (key, token): (String, OwnerToken), mut votes: VoteInbox) {
        while let Some((i, ballot)) = votes.recv().await {
            if !matches!(ballot, Ok(Ballot::Granted(_))) || self.holding(&key, &token).is_some() {
                continue;
            }
            let node = &self.inner.nodes[i];
            if let Err(e) = node.undo(&key, &token).await {
                tracing::debug!(key, node = %node.name(), error = %e, "undoing a late grant failed; the TTL will free the key");
            }
        }
    }

    /// A random pause before the next attempt after a split vote.
    fn retry_delay(&self) -> Duration {
        let max = self.inner.options.retry_delay;
        if max.is_zero() {
            return max;
        }
        // The whole range, not [max/2, max]: two clients that split a vote
        // decide at the same moment, and the wider the spread of their pauses,
        // the likelier one of them retries alone and wins.
        rand::rng().random_range(Duration::ZERO..=max)
    }

    /// When a majority of the nodes holds the lease for others: the time until
    /// enough of them expire for a majority to be free again.
    fn held_ttl(&self, granted: usize, mut held: Vec<Duration>) -> Option<Duration> {
        held.sort_unstable();
        let must_expire = self.inner.quorum.saturating_sub(granted).max(1);
        held.get(must_expire - 1).or(held.last()).copied()
    }

    /// Makes sure a majority of the nodes has `counter ≥ fence` while still
    /// holding our token: nodes whose grant returned `fence` already do; the other
    /// granting nodes get a raise. Returns whether a majority confirmed it.
    async fn settle_fence(
        &self,
        key: &str,
        token: &OwnerToken,
        grants: &[(usize, u64)],
        fence: u64,
        deadline: Instant,
    ) -> bool {
        let at_fence = grants.iter().filter(|(_, f)| *f == fence).count();
        let quorum = self.inner.quorum;
        if at_fence >= quorum {
            return true; // the steady state: no second round trip
        }
        let to_raise: Vec<usize> = grants
            .iter()
            .filter(|(_, f)| *f < fence)
            .map(|(i, _)| *i)
            .collect();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut raises = Vec::with_capacity(to_raise.len());
        for &i in &to_raise {
            let node = self.inner.nodes[i].clone();
            let (tx, key, token) = (tx.clone(), key.to_string(), token.clone());
            raises.push(Box::pin(async move {
                let call = node.raise_fence(&key, &token, fence);
                let ok = matches!(timeout_at(deadline, call).await, Ok(Ok(true)));
                let _ = tx.send(ok);
            }) as NodeTask);
        }
        launch(raises).await;
        drop(tx);
        let mut confirmed = at_fence;
        while let Some(ok) = rx.recv().await {
            confirmed += usize::from(ok);
            if confirmed >= quorum {
                return true;
            }
        }
        false
    }
}

/// One node's part of an operation, run to its end even when the caller has its
/// answer already.
type NodeTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Polls every task once in the caller's context, then spawns those still
/// running. The first poll puts each node's request on that node's connection
/// *now*, so requests reach every node in the order the caller made them: a
/// release that returned early (a majority answered) is never overtaken on a
/// slower node by the caller's next acquire, and an acquire that returned early
/// is never overtaken by its own release.
async fn launch(tasks: Vec<NodeTask>) {
    let mut tasks = tasks;
    let mut running = Vec::with_capacity(tasks.len());
    std::future::poll_fn(|cx| {
        for mut task in tasks.drain(..) {
            if task.as_mut().poll(cx).is_pending() {
                running.push(task);
            }
        }
        Poll::Ready(())
    })
    .await;
    for task in running {
        tokio::spawn(task);
    }
}

fn count(votes: &[NodeVote], pred: impl Fn(&NodeOutcome) -> bool) -> usize {
    votes.iter().filter(|v| pred(&v.outcome)).count()
}

/// Where node tasks report their votes: (node, ballot).
type VoteInbox = mpsc::UnboundedReceiver<(usize, Result<Ballot>)>;

/// Where undo tasks report: (node, whether the undo deleted our key).
type UndoInbox = mpsc::UnboundedReceiver<(usize, bool)>;

#[async_trait]
impl LeaseStore for QuorumStore {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<AcquireReply> {
        let n = self.inner.nodes.len();
        let quorum = self.inner.quorum;
        let sent = Instant::now();
        let valid_until = self.validity_end(sent, ttl);
        // The holder's deadline, on the clock that counts suspended time.
        let valid_at = crate::clock::now() + ttl.saturating_sub(self.inner.options.drift.of(ttl));
        let node_deadline = (sent + self.inner.options.node_timeout).min(valid_until);

        // Every node votes in its own task. Unless the lease is won, the votes
        // are undone on every node; a dropped caller counts as a failed attempt.
        let mut undo = UndoOnDrop {
            backend: self,
            key,
            token,
            armed: true,
        };
        let (votes_tx, mut votes_rx) = mpsc::unbounded_channel();
        let mut votes = Vec::with_capacity(n);
        for (i, node) in self.inner.nodes.iter().enumerate() {
            let (node, key, token) = (node.clone(), key.to_string(), token.clone());
            let votes_tx = votes_tx.clone();
            let me = self.clone();
            votes.push(Box::pin(async move {
                let ballot = match timeout_at(node_deadline, node.vote(&key, &token, ttl)).await {
                    Ok(reply) => reply,
                    Err(_) => Err(me.timeout_error(i, "acquire", &key, sent.elapsed())),
                };
                me.note(i, &ballot);
                let _ = votes_tx.send((i, ballot));
            }) as NodeTask);
        }
        launch(votes).await;
        drop(votes_tx);

        let mut ballots: Vec<Option<Result<Ballot>>> = (0..n).map(|_| None).collect();
        let (mut granted, mut held) = (0, 0);
        while let Some((i, ballot)) = votes_rx.recv().await {
            match &ballot {
                Ok(Ballot::Granted(_)) => granted += 1,
                Ok(Ballot::Held(_)) => held += 1,
                Err(_) => {}
            }
            ballots[i] = Some(ballot);
            // Won; or lost and known why: a majority answered (contention) or
            // too many nodes failed for a majority ever to answer (unavailable).
            // Contention is decided without a node that timed out last time and
            // has not answered since: after a split vote with one node frozen,
            // waiting for it would cost every contender the whole node timeout
            // and then fail the attempt all the same. Unavailability is only
            // declared once every node has answered or failed.
            let answered = granted + held;
            let pending = ballots.iter().filter(|b| b.is_none()).count();
            let contended = granted + self.pending(&ballots) < quorum && answered >= quorum;
            let unavailable = answered + pending < quorum;
            if granted >= quorum || contended || unavailable {
                break;
            }
        }

        if granted >= quorum && crate::clock::now() < valid_at {
            let grants: Vec<(usize, u64)> = ballots
                .iter()
                .enumerate()
                .filter_map(|(i, b)| match b {
                    Some(Ok(Ballot::Granted(f))) => Some((i, *f)),
                    _ => None,
                })
                .collect();
            let fence = grants.iter().map(|(_, f)| *f).max().unwrap_or(0);
            let settled = self
                .settle_fence(key, token, &grants, fence, valid_until)
                .await;
            if settled && crate::clock::now() < valid_at {
                undo.armed = false;
                self.set_holding(
                    key,
                    token,
                    Some(Holding {
                        fence,
                        valid_until: valid_at,
                    }),
                );
                if ballots.iter().any(Option::is_none) {
                    tokio::spawn(
                        self.clone()
                            .follow_late_grants((key.to_string(), token.clone()), votes_rx),
                    );
                }
                return Ok(AcquireReply::Acquired {
                    fence: Fence::new(fence),
                    valid_until: valid_at,
                });
            }
        }

        // Lost, split, too slow or too few nodes: undo every vote — also on nodes
        // that timed out or have not answered yet. The undo requests are on every
        // connection before this call returns, behind this attempt's acquire
        // requests and ahead of the caller's next attempt (which in any case
        // carries a fresh owner token), so an undo can only ever remove this
        // attempt's grant. Then wait
        // for the nodes that answered to confirm (they are quick), so a caller
        // that sees `Held` leaves no key behind on a responsive node.
        undo.armed = false;
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        launch(self.undo_tasks(key, token, Some(done_tx))).await;
        let answered: Vec<usize> = ballots
            .iter()
            .enumerate()
            .filter(|(_, b)| matches!(b, Some(Ok(_))))
            .map(|(i, _)| i)
            .collect();
        let mut undone: Vec<Option<bool>> = vec![None; n];
        let cleanup_deadline = Instant::now() + self.inner.options.node_timeout;
        while answered.iter().any(|i| undone[*i].is_none()) {
            match timeout_at(cleanup_deadline, done_rx.recv()).await {
                Ok(Some((i, released))) => undone[i] = Some(released),
                Ok(None) | Err(_) => break,
            }
        }
        let late: Vec<usize> = (0..n).filter(|i| ballots[*i].is_none()).collect();
        if !late.is_empty() {
            let late_deadline = node_deadline + self.inner.options.node_timeout;
            tokio::spawn(self.clone().undo_late_votes(
                (key.to_string(), token.clone()),
                late,
                (votes_rx, done_rx, undone),
                late_deadline,
            ));
        }

        let votes = self.votes(&ballots, |b| match b {
            Ballot::Granted(_) => NodeOutcome::Granted,
            Ballot::Held(ttl_left) => NodeOutcome::Held {
                ttl_left: *ttl_left,
            },
        });
        if answered.len() < quorum {
            return Err(self.unavailable("acquire", key, votes));
        }
        let held: Vec<Duration> = ballots
            .iter()
            .filter_map(|b| match b {
                Some(Ok(Ballot::Held(t))) => Some(t.unwrap_or(ttl)),
                _ => None,
            })
            .collect();
        let ttl_left = if held.len() >= quorum {
            self.held_ttl(granted, held)
        } else {
            Some(self.retry_delay())
        };
        tracing::debug!(key, votes = %super::list_votes(&votes), "quorum acquire refused");
        Ok(AcquireReply::Held { ttl_left })
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        let n = self.inner.nodes.len();
        let quorum = self.inner.quorum;
        let sent = Instant::now();
        let valid_until = self.validity_end(sent, ttl);
        // The holder's deadline, on the clock that counts suspended time.
        let valid_at = crate::clock::now() + ttl.saturating_sub(self.inner.options.drift.of(ttl));
        let deadline = (sent + self.inner.options.node_timeout).min(valid_until);
        // A free node is taken only while the lease is still valid by the last
        // confirmed deadline: then a majority holds our token, nobody else can
        // have held the lease since, and taking a free node gives the lease back
        // its margin (a lease won on exactly a majority would otherwise die
        // with the first of its nodes that freezes). After the deadline a free
        // node may mean the lease expired and changed hands: never revive it.
        let holding = self.holding(key, token);
        let may_take = holding.is_some_and(|h| crate::clock::now() < h.valid_until);
        let fence = holding.map_or(0, |h| h.fence);
        let replies = {
            let (owned_key, owned_token) = (key.to_string(), token.clone());
            self.gather(
                ("extend", key),
                deadline,
                move |node| {
                    let (key, token) = (owned_key.clone(), owned_token.clone());
                    async move {
                        node.extend_or_take(&key, &token, ttl, fence, may_take)
                            .await
                    }
                },
                |replies| {
                    let of = |want: Renewal| {
                        replies
                            .iter()
                            .filter(|r| matches!(r, Some(Ok(got)) if *got == want))
                            .count()
                    };
                    let (extended, taken) = (of(Renewal::Extended), of(Renewal::Taken));
                    let ours = extended + taken;
                    let answered = ours + of(Renewal::NotOurs);
                    let pending = replies.iter().filter(|r| r.is_none()).count();
                    // As for acquire: a node that timed out last time is not
                    // waited for once a majority answered.
                    let won = ours >= quorum && extended > 0;
                    let lost = ours + self.pending(replies) < quorum && answered >= quorum;
                    won || lost || answered + pending < quorum
                },
            )
            .await
        };
        let state = |i: usize| match &replies[i] {
            Some(Ok(r)) => Some(*r),
            _ => None,
        };
        let taken: Vec<usize> = (0..n)
            .filter(|i| state(*i) == Some(Renewal::Taken))
            .collect();
        let extended = (0..n)
            .filter(|i| state(*i) == Some(Renewal::Extended))
            .count();
        let not_ours = (0..n)
            .filter(|i| state(*i) == Some(Renewal::NotOurs))
            .count();
        let votes = self.votes(&replies, |r| match r {
            Renewal::Extended | Renewal::Taken => NodeOutcome::Granted,
            Renewal::NotOurs => NodeOutcome::NotHeld,
        });
        if extended > 0 && extended + taken.len() >= quorum && crate::clock::now() < valid_at {
            if let Some(h) = holding {
                self.set_holding(
                    key,
                    token,
                    Some(Holding {
                        valid_until: valid_at,
                        ..h
                    }),
                );
            }
            if !taken.is_empty() {
                tracing::debug!(key, taken = taken.len(), "quorum extend took free nodes");
            }
            return Ok(ExtendReply::Extended {
                valid_until: valid_at,
            });
        }
        // No node still held our token, yet a majority was free: the lease
        // expired everywhere (or the nodes lost it). Taking them would revive
        // it, so the takes are undone and the lease is reported lost.
        let vanished = extended == 0 && taken.len() >= quorum;
        if not_ours > n - quorum || vanished {
            self.set_holding(key, token, None);
            for i in taken {
                let (node, key, token) =
                    (self.inner.nodes[i].clone(), key.to_string(), token.clone());
                tokio::spawn(async move {
                    if let Err(e) = node.undo(&key, &token).await {
                        tracing::debug!(key, node = %node.name(), error = %e, "undoing an extend's take failed; the TTL will free the key");
                    }
                });
            }
            return Ok(ExtendReply::NotHeld);
        }
        // Not decided (too many nodes failed or answered too late): an error, so
        // the watchdog tries again until the local deadline. Nodes taken stay
        // ours (they were taken within the validity) and are renewed next time.
        Err(self.unavailable("extend", key, votes))
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.set_holding(key, token, None);
        let quorum = self.inner.quorum;
        let deadline = Instant::now() + self.inner.options.node_timeout;
        let replies = {
            let (owned_key, owned_token) = (key.to_string(), token.clone());
            self.gather(
                ("release", key),
                deadline,
                move |node| {
                    let (key, token) = (owned_key.clone(), owned_token.clone());
                    async move { QuorumNode::release(&node, &key, &token).await }
                },
                // Every node is asked; once a majority has answered and one of
                // them released, the rest finish in the background.
                |replies| {
                    let answered = replies.iter().filter(|r| matches!(r, Some(Ok(_)))).count();
                    let released = replies
                        .iter()
                        .filter(|r| matches!(r, Some(Ok(ReleaseOutcome::Released))))
                        .count();
                    answered >= quorum && released > 0
                },
            )
            .await
        };
        let votes = self.votes(&replies, |r| match r {
            ReleaseOutcome::Released => NodeOutcome::Granted,
            _ => NodeOutcome::NotHeld,
        });
        if count(&votes, |o| *o == NodeOutcome::Granted) > 0 {
            return Ok(ReleaseOutcome::Released);
        }
        if count(&votes, NodeOutcome::answered) >= quorum {
            return Ok(ReleaseOutcome::NotHeld);
        }
        Err(self.unavailable("release", key, votes))
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let quorum = self.inner.quorum;
        let deadline = Instant::now() + self.inner.options.node_timeout;
        let replies = {
            let owned_key = key.to_string();
            self.gather(
                ("status", key),
                deadline,
                move |node| {
                    let key = owned_key.clone();
                    async move { QuorumNode::status(&node, &key).await }
                },
                |_| false,
            )
            .await
        };
        let statuses: Vec<&LeaseStatus> = replies.iter().flatten().flatten().collect();
        if statuses.len() < quorum {
            let votes = self.votes(&replies, |_| NodeOutcome::Granted);
            return Err(self.unavailable("status", key, votes));
        }
        // Held while a majority holds it; it stays held until the quorum-th
        // longest TTL runs out.
        let mut ttls: Vec<Duration> = statuses
            .iter()
            .filter(|s| s.held)
            .map(|s| s.ttl_left.unwrap_or(Duration::MAX))
            .collect();
        ttls.sort_unstable_by(|a, b| b.cmp(a));
        let held = ttls.len() >= quorum;
        let ttl_left = if held {
            ttls.get(quorum - 1)
                .copied()
                .filter(|t| *t != Duration::MAX)
        } else {
            None
        };
        Ok(LeaseStatus {
            held,
            ttl_left,
            fence: statuses.iter().filter_map(|s| s.fence).max(),
            storage_key: format!(
                "{} on {} nodes",
                self.inner.nodes[0].storage_key(key),
                self.inner.nodes.len()
            ),
        })
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        // Subscribe on every node at once (bounded by the node timeout) and merge
        // the notifications: a release is published on every node it reaches.
        let deadline = Instant::now() + self.inner.options.node_timeout;
        let (merged_tx, merged_rx) = watch::channel(0u64);
        let merged_tx = Arc::new(merged_tx);
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
        for (i, node) in self.inner.nodes.iter().enumerate() {
            let (node, key) = (node.clone(), key.to_string());
            let (merged_tx, ready_tx) = (Arc::clone(&merged_tx), ready_tx.clone());
            tokio::spawn(async move {
                let mut watch = QuorumNode::watch_releases(&node, &key).await;
                let _ = ready_tx.send((i, watch.is_push()));
                drop(ready_tx);
                if !watch.is_push() {
                    return;
                }
                while !merged_tx.is_closed() {
                    if watch.wait(WATCH_POLL).await {
                        merged_tx.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
            });
        }
        drop(ready_tx);
        // Wait for every node that is answering; a node that timed out last
        // time (frozen) is not waited for once a majority is subscribed — its
        // subscription goes on in the background. Waiting for it would keep a
        // waiter from its next attempt for the whole node timeout, while the
        // lease may already be free.
        let mut push = false;
        let mut ready: Vec<Option<bool>> = vec![None; self.inner.nodes.len()];
        while let Ok(Some((i, is_push))) = timeout_at(deadline, ready_rx.recv()).await {
            push |= is_push;
            ready[i] = Some(is_push);
            let subscribed = ready.iter().flatten().count();
            if subscribed >= self.inner.quorum && self.pending(&ready) == 0 {
                break;
            }
        }
        if push {
            ReleaseWatch::from_channel(merged_rx, Some(Box::new(merged_tx)))
        } else {
            ReleaseWatch::polling()
        }
    }

    fn describe(&self) -> String {
        format!("quorum({})", self.inner.names.join(", "))
    }
}
