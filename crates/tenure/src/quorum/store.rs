//! [`QuorumStore`], the quorum's [`LeaseStore`]: the public handle over Redis
//! nodes, and [`Quorum`], the node-generic core it wraps (the nodes, the
//! quorum size, which nodes stopped answering, and the leases this handle
//! holds). The operations live in `ballot.rs` (acquire) and `ops.rs` (extend,
//! release, status, release watch), all over the fan-out in `gather.rs`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::dedup;
use super::gather::{Call, count_ok};
use super::node::QuorumNode;
use super::options::QuorumOptions;
use crate::error::{Error, NodeOutcome, Result};
use crate::lease::{
    AcquireReply, ExtendReply, HolderInfo, LeaseStatus, LeaseStore, ReleaseOutcome, ReleaseWatch,
};
use crate::redis::{RedisOptions, RedisStore};
use crate::token::OwnerToken;
use crate::url::redact;

/// How long a request to one node may run at most (the node timeout, when
/// longer): the connection's own budget, past the quorum's decision.
const NODE_REQUEST_BUDGET: Duration = Duration::from_secs(2);

/// Leases over N independent Redis masters (Redlock); see the [module
/// docs](crate::quorum) for the protocol and the fencing argument.
///
/// Each node stores exactly what a [`RedisStore`] stores (`tenure:{key}` with
/// the owner token, `tenure:{key}:fence`), so any node can be inspected with
/// `redis-cli` like a single-node lease. Cheap to clone.
#[derive(Debug, Clone)]
pub struct QuorumStore {
    core: Quorum<RedisStore>,
}

/// The quorum over any [`QuorumNode`]s. Cheap to clone.
#[derive(Debug)]
pub(crate) struct Quorum<N> {
    inner: Arc<Inner<N>>,
}

impl<N> Clone for Quorum<N> {
    fn clone(&self) -> Self {
        Quorum {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Inner<N> {
    nodes: Vec<N>,
    names: Vec<String>,
    quorum: usize,
    options: QuorumOptions,
    /// Per node: its last request timed out and it has not answered since. A
    /// decision does not wait for such a node once the others have answered —
    /// it is still asked every time, and its first answer clears the flag.
    unresponsive: Vec<AtomicBool>,
    /// The leases this handle holds: the fence and the end of the validity
    /// last confirmed. Extend takes free nodes only for a lease still valid
    /// here, so it never revives an expired one.
    holdings: Mutex<Holdings>,
    /// The follow-ups running in the background (undos, repeated releases,
    /// requests finished after a decision), so that
    /// [`close`](Quorum::close) can wait for them.
    tasks: tokio_util::task::TaskTracker,
}

/// The leases a handle holds, by (key, owner token), looked up without
/// copying either; entries whose validity has passed are pruned whenever the
/// map has doubled since the last pruning.
#[derive(Debug, Default)]
struct Holdings {
    map: hashbrown::HashMap<(Box<str>, Box<str>), Holding, std::hash::RandomState>,
    prune_at: usize,
}

/// A borrowed (key, owner token): hashes like the map's owned pair.
#[derive(Hash)]
struct HoldingId<'a>(&'a str, &'a str);

impl hashbrown::Equivalent<(Box<str>, Box<str>)> for HoldingId<'_> {
    fn equivalent(&self, (key, token): &(Box<str>, Box<str>)) -> bool {
        self.0 == &**key && self.1 == &**token
    }
}

/// What this handle knows about a lease it won.
#[derive(Debug, Clone, Copy)]
pub(super) struct Holding {
    pub fence: u64,
    /// On the clock that counts suspended time, like the guard's deadline: a
    /// host that slept past it must not take nodes for a lease that expired.
    pub valid_until: crate::clock::Moment,
}

/// The deadlines of one acquire or extend, taken when its requests go out.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadlines {
    /// The end of the validity, TTL minus drift (monotonic).
    pub valid_until: Instant,
    /// The holder's deadline, on the clock that counts suspended time.
    pub valid_at: crate::clock::Moment,
    /// Each node's answer must arrive by then: the node timeout, never past the
    /// validity.
    pub node: Instant,
}

impl<N: QuorumNode> Quorum<N> {
    /// The deadlines of an operation for `ttl` sent now.
    pub(super) fn deadlines(&self, ttl: Duration) -> Deadlines {
        let sent = Instant::now();
        let validity = self.options().drift.validity(ttl);
        let valid_until = sent + validity;
        Deadlines {
            valid_until,
            valid_at: crate::clock::now() + validity,
            node: (sent + self.options().node_timeout).min(valid_until),
        }
    }

    /// A quorum over `nodes` (at least one), named `names` in errors.
    pub(super) fn from_nodes(nodes: Vec<N>, names: Vec<String>, options: QuorumOptions) -> Self {
        let quorum = nodes.len() / 2 + 1;
        let unresponsive = nodes.iter().map(|_| AtomicBool::new(false)).collect();
        Quorum {
            inner: Arc::new(Inner {
                nodes,
                names,
                quorum,
                options,
                unresponsive,
                holdings: Mutex::new(Holdings::default()),
                tasks: tokio_util::task::TaskTracker::new(),
            }),
        }
    }

    /// Runs `follow_up` in the background, tracked for [`close`](Self::close).
    pub(super) fn spawn(&self, follow_up: impl Future<Output = ()> + Send + 'static) {
        self.inner.tasks.spawn(follow_up);
    }

    /// Like [`spawn`](Self::spawn), on `runtime` (from a `Drop`).
    pub(super) fn spawn_on(
        &self,
        follow_up: impl Future<Output = ()> + Send + 'static,
        runtime: &tokio::runtime::Handle,
    ) {
        self.inner.tasks.spawn_on(follow_up, runtime);
    }

    /// Waits until every follow-up running in the background has ended (each
    /// gives up by itself once the keys it cleans up have expired).
    pub(crate) async fn close(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.tasks.reopen();
    }

    pub(super) fn nodes(&self) -> &[N] {
        &self.inner.nodes
    }

    pub(super) fn names(&self) -> &[String] {
        &self.inner.names
    }

    /// How many nodes must agree: N/2+1.
    pub(super) fn quorum(&self) -> usize {
        self.inner.quorum
    }

    pub(super) fn options(&self) -> &QuorumOptions {
        &self.inner.options
    }

    pub(super) fn unresponsive(&self) -> &[AtomicBool] {
        &self.inner.unresponsive
    }

    /// Checks that a majority of the nodes answers.
    pub(super) async fn check_majority(&self) -> Result<()> {
        let deadline = Instant::now() + self.options().node_timeout;
        let quorum = self.quorum();
        let replies = self
            .gather(
                Call::new("connect", "", Some(deadline)),
                |node| async move { node.ping().await },
                |replies| count_ok(replies, |()| true) >= quorum,
            )
            .await;
        if count_ok(&replies, |()| true) < quorum {
            let votes = self.votes(&replies, |()| NodeOutcome::Granted);
            return Err(self.unavailable("connect", "", votes));
        }
        Ok(())
    }

    pub(super) fn holding(&self, key: &str, token: &OwnerToken) -> Option<Holding> {
        let holdings = self
            .inner
            .holdings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        holdings.map.get(&HoldingId(key, token.as_str())).copied()
    }

    /// Moves the end of the validity of a lease this handle still holds;
    /// `false` (and nothing remembered) when it no longer does — released or
    /// lost while the extend was under way.
    pub(super) fn renew_holding(
        &self,
        key: &str,
        token: &OwnerToken,
        valid_until: crate::clock::Moment,
    ) -> bool {
        let mut holdings = self
            .inner
            .holdings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match holdings.map.get_mut(&HoldingId(key, token.as_str())) {
            Some(h) => {
                h.valid_until = valid_until;
                true
            }
            None => false,
        }
    }

    /// Remembers (or, with `None`, forgets) a lease this handle holds; drops
    /// entries whose validity has passed, so the map only holds live leases
    /// (and no more than twice as many as were live at the last pruning).
    pub(super) fn set_holding(&self, key: &str, token: &OwnerToken, holding: Option<Holding>) {
        let mut holdings = self
            .inner
            .holdings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(h) = holding else {
            holdings.map.remove(&HoldingId(key, token.as_str()));
            return;
        };
        if holdings.map.len() >= holdings.prune_at {
            let now = crate::clock::now();
            holdings.map.retain(|_, h| h.valid_until > now);
            holdings.prune_at = (holdings.map.len() * 2).max(16);
        }
        holdings.map.insert((key.into(), token.as_str().into()), h);
    }

    pub(super) fn describe(&self) -> String {
        format!("quorum({})", self.inner.names.join(", "))
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
        let options = options.capped();
        // The quorum bounds every decision by the node timeout itself; the
        // connection's own budget is longer, so that a request the quorum
        // stopped waiting for is still sent (redis-rs skips a queued request
        // whose caller is gone, which could drop a release and keep the
        // vote queued ahead of it) and ends by this budget at the latest.
        let node_options = RedisOptions::default()
            .prefix(options.prefix.clone())
            .timeout(options.node_timeout.max(NODE_REQUEST_BUDGET))
            .connect_timeout(options.connect_timeout.unwrap_or(options.node_timeout))
            .fence_retention(options.fence_retention);
        let mut nodes = Vec::new();
        let mut names: Vec<String> = Vec::new();
        let mut targets = Vec::new();
        for url in urls {
            let url = url.as_ref().trim();
            let name = redact(url);
            nodes.push(RedisStore::quorum_node(url, node_options.clone())?);
            targets.push((name.clone(), dedup::Target::of(url)));
            names.push(name);
        }
        dedup::check_spelled(&targets)?;
        if nodes.is_empty() {
            return Err(Error::Config {
                url: String::new(),
                reason: "a quorum needs at least one node URL".into(),
            });
        }
        Ok(QuorumStore {
            core: Quorum::from_nodes(nodes, names, options),
        })
    }

    /// Like [`new`](Self::new), then checks that a majority of the nodes answers
    /// `PING` (a minority may be down).
    pub async fn connect<I, S>(urls: I, options: QuorumOptions) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls: Vec<String> = urls
            .into_iter()
            .map(|u| u.as_ref().trim().to_string())
            .collect();
        let store = Self::new(&urls, options)?;
        let targets: Vec<_> = urls
            .iter()
            .map(|u| (redact(u), dedup::Target::of(u)))
            .collect();
        dedup::check_resolved(&targets).await?;
        store.core.check_majority().await?;
        Ok(store)
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.core.nodes().len()
    }

    /// Always `false`: a quorum has at least one node.
    pub fn is_empty(&self) -> bool {
        self.core.nodes().is_empty()
    }

    /// How many nodes must agree: N/2+1.
    pub fn quorum(&self) -> usize {
        self.core.quorum()
    }

    /// The nodes' URLs, without credentials.
    pub fn nodes(&self) -> &[String] {
        self.core.names()
    }

    /// The single-node backends, e.g. to inspect one node in a test.
    pub fn node_backends(&self) -> &[RedisStore] {
        self.core.nodes()
    }
}

#[async_trait]
impl LeaseStore for QuorumStore {
    async fn close(&self) {
        self.core.close().await;
    }

    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        self.core.acquire(key, token, ttl, holder).await
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        self.core.extend(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.core.release(key, token).await
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        self.core.status(key).await
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        self.core.watch_releases(key).await
    }

    fn describe(&self) -> String {
        self.core.describe()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("quorum")
    }
}
