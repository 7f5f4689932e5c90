//! Leases on one Redis master: [`RedisStore`] and its [`LeaseStore`] impl.
//!
//! The store runs one script per operation (`scripts/lease_*.lua`); the key
//! names come from [`keys`](super::keys), the settings from
//! [`options`](super::options), release notifications from
//! [`subscriber`](super::subscriber). What a quorum needs from one node is in
//! [`node`](super::node).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;
use tokio::sync::OnceCell;

use super::conn::RedisConn;
use super::counter::CounterScripts;
use super::holder;
use super::keys::suffix::{FENCE, LEASE, QUEUE, RELEASED};
use super::keys::{Keys, from_millis, millis};
use super::options::{RedisOptions, ReplicaAcks};
use super::publish::Publish;
use super::subscriber::Subscriber;
use crate::error::{Error, Result};
use crate::fence::{Fence, FloorUnit};
use crate::lease::{
    AcquireReply, ExtendReply, HolderInfo, LeaseStatus, LeaseStore, QueuePlace, ReleaseOutcome,
    ReleaseWatch, valid_until,
};
use crate::token::OwnerToken;

/// A lease script that uses the waiting line: the shared helpers
/// (`scripts/lease_settings.lua`, `scripts/lease_line_basics.lua`,
/// `scripts/lease_fence.lua`, `scripts/lease_line.lua`), then its body.
macro_rules! line_script {
    ($body:literal) => {
        concat!(
            include_str!("scripts/lease_settings.lua"),
            include_str!("scripts/lease_line_basics.lua"),
            include_str!("scripts/lease_fence.lua"),
            include_str!("scripts/lease_line.lua"),
            include_str!(concat!("scripts/", $body))
        )
    };
}
pub(super) use line_script;

/// The acquire: its fast path first, before the helpers are defined (see
/// `scripts/lease_acquire_fast.lua`), then any other grant.
pub(super) const ACQUIRE_LUA: &str = concat!(
    include_str!("scripts/lease_settings.lua"),
    include_str!("scripts/lease_acquire_fast.lua"),
    include_str!("scripts/lease_fence.lua"),
    include_str!("scripts/lease_holder.lua"),
    include_str!("scripts/lease_acquire.lua")
);
const EXTEND_LUA: &str = include_str!("scripts/lease_extend.lua");
/// The release: its uncontended part first, before anything is defined
/// (see `scripts/lease_release.lua`), then the common hand-off to a waiter
/// before the helpers are (`scripts/lease_handoff.lua`), then any other.
pub(super) const RELEASE_LUA: &str = concat!(
    include_str!("scripts/lease_release.lua"),
    include_str!("scripts/lease_settings.lua"),
    include_str!("scripts/lease_line_basics.lua"),
    include_str!("scripts/lease_handoff.lua"),
    include_str!("scripts/lease_fence.lua"),
    include_str!("scripts/lease_line.lua"),
    "return release_to_next(KEYS, ARGV[2], false, first, floor, replaced)\n"
);
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));

/// Leases on one Redis master: one script call per operation.
///
/// Storage layout for a lease named `orders:42` with the default prefix:
///
/// | key | type | content |
/// |---|---|---|
/// | `tenure:{orders:42}` | string, with TTL | the holder's owner token |
/// | `tenure:{orders:42}:fence` | string, with the [fence retention](RedisOptions::fence_retention) | the last fence handed out |
/// | `tenure:{orders:42}:queue` | list, with TTL | the waiting line |
/// | `tenure:{orders:42}:holder` | hash, with the lease's TTL | who holds it, only when the lease [records it](crate::Lease::record_holder) |
///
/// The keys share the hash tag `{orders:42}`, so they live in one slot of a
/// Redis Cluster (the layout is ready for one; tenure has no cluster client
/// yet). A key starting with `}` or `\` gets a `\` in front inside the braces
/// (`}x` → `tenure:{\}x}`), since `{}` would be an empty hash tag and split the
/// keys across slots; every other key is used as it is. A prefix should not
/// contain `{}` for the same reason.
///
/// The lease key's value is a plain random string, the convention
/// of most Redis lock clients, so a lock taken by another client on the same key
/// excludes tenure and vice versa. Waiters stand in the waiting line and a
/// release hands the lease to the first live one, publishing its token, the
/// fence and its place in line on `tenure:{orders:42}:released`, which
/// waiters subscribe to (RESP3 pub/sub): a contended lease changes hands in
/// FIFO order without polling, waking one waiter per hand-off, which claims
/// the lease with one script. The line's entries and costs are described in
/// `docs/redis.md`.
///
/// A fence is never below the server's clock (`TIME`), so the counter can
/// expire: it lives for the [fence retention](RedisOptions::fence_retention)
/// after its last grant, and a fence taken after that starts from the clock,
/// above every fence handed out before.
#[derive(Debug, Clone)]
pub struct RedisStore {
    conn: RedisConn,
    keys: Keys,
    subscriber: Arc<OnceCell<Subscriber>>,
    replicas: Option<ReplicaAcks>,
    /// As a quorum node, the scripts known to be loaded on the server: see
    /// [`quorum_scripts`](Self::quorum_scripts). `None` off a quorum.
    loaded: Option<Arc<LoadedScripts>>,
    /// The scripts that write fence counters, with this store's retention.
    counters: Arc<CounterScripts>,
    /// How the scripts publish release notifications (and the subscriber
    /// listens).
    publish: Publish,
}

impl RedisStore {
    /// Connects to `url` (`redis://` or `rediss://`) and checks it answers.
    ///
    /// Also reads the server's `maxmemory-policy` and refuses one that may evict
    /// keys unless [`RedisOptions::allow_eviction`] is set.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        options.check_replica_wait()?;
        options.check_fence_retention()?;
        let conn = RedisConn::connect_checked(url, &options, options.allow_eviction).await?;
        let publish = Publish::detect(&conn).await;
        Ok(Self::with_conn(conn, options, publish))
    }

    /// Prepares a backend for `url` without connecting; the first call connects.
    /// Nothing is checked before that call, so the `maxmemory-policy` check of
    /// [`connect`](Self::connect) is not made: a quorum node should run with
    /// `maxmemory-policy noeviction` too. Release notifications are published
    /// plainly (`PUBLISH`), even on a Redis Cluster, where
    /// [`connect`](Self::connect) shards them.
    pub fn lazy(url: &str, options: RedisOptions) -> Result<Self> {
        options.check_replica_wait()?;
        options.check_fence_retention()?;
        let conn = RedisConn::lazy(url, &options)?;
        Ok(Self::with_conn(conn, options, Publish::Plain))
    }

    fn with_conn(conn: RedisConn, options: RedisOptions, publish: Publish) -> Self {
        RedisStore {
            conn,
            keys: Keys::new(options.prefix),
            subscriber: Arc::new(OnceCell::new()),
            replicas: options.replicas,
            loaded: None,
            counters: CounterScripts::for_store(
                options.fence_retention,
                FloorUnit::Micros,
                publish,
            ),
            publish,
        }
    }

    /// Runs every script as a quorum node must: never sent again after a
    /// `NOSCRIPT`. redis-rs's load-and-retry sends the call again *later*,
    /// which can reorder it behind requests made after it — an undo could then
    /// run before the vote it undoes (a later attempt is safe either way: it
    /// carries a fresh owner token). So a script this store has not seen
    /// loaded goes as `SCRIPT LOAD` and `EVALSHA` in one pipeline (one
    /// request, in order), later calls by `EVALSHA` alone, and a `NOSCRIPT`
    /// (the server restarted or flushed its scripts) fails that one call,
    /// which the server did not run, and forgets the script so the next call
    /// loads it again.
    ///
    /// Its fences are floored in whole seconds, so the nodes agree on them
    /// (see `fence::floor`).
    #[cfg(feature = "quorum")]
    pub(super) fn quorum_scripts(mut self) -> Self {
        self.loaded = Some(Arc::default());
        self.counters = CounterScripts::for_store(
            self.counters.retention(),
            FloorUnit::WholeSeconds,
            self.publish,
        );
        self
    }

    /// Runs a lease script by `EVALSHA` (with NOSCRIPT recovery) or, as a
    /// quorum node, as [`quorum_scripts`](Self::quorum_scripts) says.
    pub(super) async fn run_script<T: redis::FromRedisValue, K: AsRef<str>>(
        &self,
        op: &'static str,
        script: (&Script, &str),
        keys: &[K],
        args: &[&str],
    ) -> Result<T> {
        let key = keys.first().map_or("", AsRef::as_ref);
        match &self.loaded {
            None => self.conn.eval_sha(op, key, script.0, keys, args).await,
            // Boxed: the single-node path's futures stay small.
            Some(loaded) => {
                let call = super::conn::evalsha(script.0, keys, args);
                Box::pin(self.run_node_script(loaded, op, key, script, call)).await
            }
        }
    }

    /// Sends `call`, the `EVALSHA` of `script`, as a quorum node must (see
    /// [`quorum_scripts`](Self::quorum_scripts)).
    async fn run_node_script<T: redis::FromRedisValue>(
        &self,
        loaded: &LoadedScripts,
        op: &'static str,
        key: &str,
        (script, source): (&Script, &str),
        call: redis::Cmd,
    ) -> Result<T> {
        let hash = script.get_hash();
        if !loaded.has(hash) {
            let mut pipe = redis::pipe();
            pipe.add_command(script_load(source))
                .ignore()
                .add_command(call);
            let (reply,): (T,) = self
                .conn
                .call(
                    op,
                    key,
                    |mut c| async move { pipe.query_async(&mut c).await },
                )
                .await?;
            loaded.add(hash);
            return Ok(reply);
        }
        let reply = self
            .conn
            .call(
                op,
                key,
                |mut c| async move { call.query_async(&mut c).await },
            )
            .await;
        if reply.as_ref().is_err_and(is_noscript) {
            loaded.forget(hash);
        }
        reply
    }

    /// The connection, shared with other Redis-based parts of tenure.
    pub(crate) fn conn(&self) -> &RedisConn {
        &self.conn
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.keys.prefix()
    }

    /// The Redis key that holds the lease `key`.
    /// See the layout table on [`RedisStore`].
    pub fn lease_key(&self, key: &str) -> String {
        self.keys.lease(key)
    }

    /// The key layout of this store.
    pub(super) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The scripts that write fence counters.
    pub(super) fn counters(&self) -> &CounterScripts {
        &self.counters
    }

    /// Releases `key` if it holds `token`: hands it to the first live waiter in
    /// line, or deletes it.
    async fn release_to_next(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let names = self.keys.names(key, [LEASE, FENCE, QUEUE, RELEASED]);
        let [lease, fence, queue, channel] = names.get();
        let released: i64 = self
            .run_script(
                "release",
                self.counters.release.pair(),
                &[lease, fence, queue],
                &[token.as_str(), channel],
            )
            .await?;
        Ok(if released == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// Runs a lease write script and, with [`RedisOptions::require_replicas`],
    /// `WAIT` right behind it **in one pipeline on one connection**: the
    /// acknowledgement always counts the replicas that have *this* write. Were
    /// `WAIT` sent separately, a reconnect in between would put it on a fresh
    /// connection, which has written nothing and is acknowledged at once. If the
    /// connection breaks, both fail together. The script goes by `EVAL` (its
    /// text) so a `NOSCRIPT` cannot split the pair either.
    ///
    /// Returns the script's reply and the number of acknowledging replicas
    /// (`None` without `require_replicas`).
    pub(super) async fn run_write<T: redis::FromRedisValue, K: AsRef<str>>(
        &self,
        op: &'static str,
        script: (&Script, &str),
        keys: &[K],
        args: &[&str],
    ) -> Result<(T, Option<ReplicaReply>)> {
        match self.replicas {
            None => Ok((self.run_script(op, script, keys, args).await?, None)),
            // Boxed: the path without acknowledgements keeps small futures.
            Some(acks) => Box::pin(self.run_acknowledged(op, script, keys, args, acks)).await,
        }
    }

    /// [`run_write`](Self::run_write) with replica acknowledgements.
    async fn run_acknowledged<T: redis::FromRedisValue, K: AsRef<str>>(
        &self,
        op: &'static str,
        script: (&Script, &str),
        keys: &[K],
        args: &[&str],
        acks: ReplicaAcks,
    ) -> Result<(T, Option<ReplicaReply>)> {
        let key = keys.first().map_or("", AsRef::as_ref);
        // WAIT 0 would block forever: wait at least 1 ms.
        let wait_ms = millis(acks.timeout).max(1);
        let needed = acks.replicas.get();
        let mut pipe = redis::pipe();
        pipe.add_command(super::conn::eval(script.1, keys, args))
            .cmd("WAIT")
            .arg(needed)
            .arg(wait_ms);
        let (reply, acked): (T, i64) = self
            .conn
            .call_within(
                op,
                key,
                self.conn.timeout().saturating_add(acks.timeout),
                |mut c| async move { pipe.query_async(&mut c).await },
            )
            .await?;
        Ok((
            reply,
            Some(ReplicaReply {
                needed,
                acked: u32::try_from(acked).unwrap_or(0),
                waited: acks.timeout,
            }),
        ))
    }

    pub(super) fn unacknowledged(&self, op: &'static str, key: &str, acks: ReplicaReply) -> Error {
        Error::ReplicasUnacknowledged {
            backend: self.describe(),
            op,
            key: key.to_string(),
            needed: acks.needed,
            acked: acks.acked,
            waited: acks.waited,
        }
    }

    /// How many processes wait for `key`: the subscribers of its release
    /// channel (`PUBSUB NUMSUB`). Best-effort: `None` when the server refuses
    /// (an ACL user without the command), and on a Redis Cluster.
    async fn waiters(&self, key: &str) -> Option<u64> {
        // On a cluster a node counts only its own subscribers, and waiters
        // subscribe wherever their client connected: no count is right.
        if matches!(self.conn.origin(), super::conn::Origin::Cluster(_)) {
            return None;
        }
        let channel = self.keys.released(key);
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg("NUMSUB").arg(&channel);
        let reply: Result<(String, u64)> = self
            .conn
            .call("status", key, |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await;
        reply.ok().map(|(_, n)| n)
    }

    /// The release subscriber if it is open already (nothing is sent).
    pub(super) fn subscriber_if_open(&self) -> Option<&Subscriber> {
        self.subscriber.get()
    }

    /// Whether a waiter may take a hand-off from its notification alone: not
    /// when grants must be acknowledged by replicas (the hand-off's write
    /// was not; the waiter's claim is).
    pub(super) fn trusts_handoffs(&self) -> bool {
        self.replicas.is_none()
    }

    /// Whether writes wait for replica acknowledgements
    /// ([`RedisOptions::require_replicas`]).
    pub(super) fn acknowledges_writes(&self) -> bool {
        self.replicas.is_some()
    }

    /// The release subscriber, opened on first contention. A failed open is not
    /// cached: the next waiter tries again, and meanwhile waiters poll.
    pub(super) async fn subscriber(&self) -> Option<&Subscriber> {
        self.subscriber
            .get_or_try_init(|| async {
                let opened = Subscriber::open(&self.conn, self.publish).await.ok_or(())?;
                self.start_keeper(Arc::downgrade(&self.subscriber));
                Ok::<_, ()>(opened)
            })
            .await
            .ok()
    }

    /// This store without its subscriber, for a background task that must
    /// not keep the subscriber alive.
    pub(super) fn detached(&self) -> Self {
        RedisStore {
            subscriber: Arc::new(OnceCell::new()),
            ..self.clone()
        }
    }
}

/// The scripts a quorum node has loaded on its server (at most a handful:
/// a list is the cheapest set).
#[derive(Debug, Default)]
pub(super) struct LoadedScripts(std::sync::Mutex<Vec<String>>);

impl LoadedScripts {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn has(&self, hash: &str) -> bool {
        self.lock().iter().any(|h| h == hash)
    }

    fn add(&self, hash: &str) {
        let mut loaded = self.lock();
        if !loaded.iter().any(|h| h == hash) {
            loaded.push(hash.to_string());
        }
    }

    fn forget(&self, hash: &str) {
        self.lock().retain(|h| h != hash);
    }
}

/// `SCRIPT LOAD` of a script's text.
fn script_load(source: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(source);
    cmd
}

/// Whether an error is the server's `NOSCRIPT`.
pub(super) fn is_noscript(e: &Error) -> bool {
    match e {
        Error::Backend { cause, .. } => cause
            .downcast_ref::<redis::RedisError>()
            .is_some_and(super::conn::is_noscript),
        _ => false,
    }
}

/// A script call that may grant a lease: what [`RedisStore::run_grant`] needs
/// to know to undo or report it.
pub(super) struct Grant<'a> {
    pub(super) op: &'static str,
    pub(super) key: &'a str,
    pub(super) token: &'a OwnerToken,
    pub(super) ttl: Duration,
}

impl RedisStore {
    /// Runs a script that may grant `grant.key` to `grant.token` (an acquire,
    /// a waiter's look) and turns its reply — split by `split` into won (1 or
    /// 0), fence or PTTL, and the waiter's place — into an [`AcquireReply`].
    /// The validity counts from when the request was sent. A grant the
    /// replicas did not acknowledge is released again and reported as an
    /// error.
    pub(super) async fn run_grant<T: redis::FromRedisValue, K: AsRef<str>>(
        &self,
        grant: Grant<'_>,
        script: (&Script, &str),
        keys: &[K],
        args: &[&str],
        split: impl FnOnce(T) -> (i64, i64, Option<String>),
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let Grant {
            op,
            key,
            token,
            ttl,
        } = grant;
        let start = crate::clock::now();
        let (reply, acks): (T, _) = match self.run_write(op, script, keys, args).await {
            Ok(reply) => reply,
            Err(e) => {
                // With acknowledgements the failure may have come after the
                // script granted the lease (the pipeline's WAIT): undo it with
                // this attempt's own token. No guard exists yet, so releasing
                // cannot leave anyone believing in it.
                if self.replicas.is_some() {
                    let _ = self.release(key, token).await;
                }
                return Err(e);
            }
        };
        let (won, value, place) = split(reply);
        if won != 1 {
            let ttl_left = from_millis(value);
            return Ok((AcquireReply::Held { ttl_left }, place.map(QueuePlace::new)));
        }
        let fence = u64::try_from(value).map_err(|_| Error::WrongType {
            key: self.keys.fence(key),
            detail: format!("fence counter is {value}"),
        })?;
        if let Some(acks) = acks.filter(|a| !a.enough()) {
            if let Err(e) = self.release(key, token).await {
                tracing::warn!(key, error = %e, "release after missing replica acknowledgements failed; the TTL will free the key");
            }
            return Err(self.unacknowledged(op, key, acks));
        }
        let acquired = AcquireReply::Acquired {
            fence: Fence::new(fence),
            valid_until: valid_until(start, ttl),
        };
        Ok((acquired, None))
    }
}

/// The acquire script's one-integer reply (`scripts/lease_acquire.lua`) as
/// [`RedisStore::run_grant`] takes it: a fence (at least 1) is a grant;
/// anything else is `-2 - pttl` of the holder's key.
fn split_acquired(reply: i64) -> (i64, i64, Option<String>) {
    if reply > 0 {
        (1, reply, None)
    } else {
        (0, (-2i64).saturating_sub(reply), None)
    }
}

/// What `WAIT` answered after a lease write.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReplicaReply {
    needed: u32,
    acked: u32,
    waited: Duration,
}

impl ReplicaReply {
    pub(super) fn enough(self) -> bool {
        self.acked >= self.needed
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        let names = self.keys.names(key, [LEASE, FENCE]);
        let [lease, fence] = names.get();
        let ttl_ms = millis(ttl).to_string();
        let recorded = holder::acquire_args(holder);
        let plain = [token.as_str(), &ttl_ms];
        // The holder hash is a key of the call only when it is written: a
        // key less to name and for the server to read otherwise.
        let (with_holder, holder_key): (Vec<&str>, String);
        let (keys, args): (&[&str], &[&str]) = if recorded.is_empty() {
            (&[lease, fence], &plain)
        } else {
            with_holder = plain
                .into_iter()
                .chain(recorded.iter().map(String::as_str))
                .collect();
            holder_key = self.keys.holder(key);
            (&[lease, fence, &holder_key], &with_holder)
        };
        let script = self.counters.acquire.pair();
        let grant = Grant {
            op: "acquire",
            key,
            token,
            ttl,
        };
        let (reply, _) = self
            .run_grant(grant, script, keys, args, split_acquired)
            .await?;
        Ok(reply)
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        let start = crate::clock::now();
        let (extended, acks): (i64, _) = self
            .run_write(
                "extend",
                (&EXTEND, EXTEND_LUA),
                &[self.keys.lease(key), self.keys.holder(key)],
                &[token.as_str(), &millis(ttl).to_string()],
            )
            .await?;
        if extended != 1 {
            return Ok(ExtendReply::NotHeld);
        }
        // Too few acknowledgements: fail, but keep the key. The guard still
        // holds its last confirmed deadline and retries; deleting the key here
        // would let a second holder in while the guard still reports the lease
        // as held.
        if let Some(acks) = acks.filter(|a| !a.enough()) {
            return Err(self.unacknowledged("extend", key, acks));
        }
        Ok(ExtendReply::Extended {
            valid_until: valid_until(start, ttl),
        })
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.release_to_next(key, token).await
    }

    async fn holder_token(&self, key: &str) -> Result<Option<OwnerToken>> {
        let [lease_key, _, _] = self.keys.lease_fence_holder(key);
        let mut pipe = redis::pipe();
        pipe.cmd("TYPE").arg(&lease_key).get(&lease_key);
        let (kind, value): (String, Option<String>) = self
            .conn
            .call("holder_token", &lease_key, |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        if kind != "none" && kind != "string" {
            return Err(Error::WrongType {
                key: lease_key,
                detail: format!("lease key holds a {kind}"),
            });
        }
        Ok(value.map(OwnerToken::from_stored))
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let [lease_key, fence_key, holder_key] = self.keys.lease_fence_holder(key);
        let mut pipe = redis::pipe();
        pipe.cmd("TYPE")
            .arg(&lease_key)
            .pttl(&lease_key)
            .get(&fence_key)
            .cmd("HMGET")
            .arg(&holder_key)
            .arg(&holder::FIELDS)
            .cmd("TIME");
        type Reply = (String, i64, Option<String>, Vec<Option<String>>, (i64, i64));
        let read = self.conn.call("status", &lease_key, |mut c| async move {
            pipe.query_async::<Reply>(&mut c).await
        });
        let (read, waiters) = tokio::join!(read, self.waiters(key));
        let (kind, pttl, fence, recorded, now) = read?;
        // A key of another type is not a lease: reporting it as held would be a
        // guess (acquire refuses it the same way).
        if kind != "none" && kind != "string" {
            return Err(Error::WrongType {
                key: lease_key,
                detail: format!("lease key holds a {kind}"),
            });
        }
        let fence = match fence {
            None => None,
            Some(s) => Some(Fence::new(s.parse().map_err(|_| Error::WrongType {
                key: fence_key,
                detail: format!("fence counter is {s:?}, not an integer"),
            })?)),
        };
        let held = pttl != -2;
        let mut status = LeaseStatus::free(lease_key, fence);
        status.waiters = waiters;
        if held {
            status.held = true;
            status.ttl_left = from_millis(pttl);
            status.holder = holder::read(&recorded, fence, now);
        }
        Ok(status)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseStatus)>> {
        self.list_leases(prefix).await
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        self.watch_channel(key, None, true).await
    }

    async fn wait_turn(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        self.look_in_line(key, token, ttl, holder, place).await
    }

    async fn leave_line(
        &self,
        key: &str,
        token: &OwnerToken,
        place: Option<&QueuePlace>,
    ) -> Result<ReleaseOutcome> {
        self.leave(key, token, place).await
    }

    async fn watch_turn(&self, key: &str, token: &OwnerToken) -> ReleaseWatch {
        self.watch_channel(key, Some(token), false).await
    }

    fn ready_turn_watch(&self, key: &str, token: &OwnerToken) -> Option<ReleaseWatch> {
        self.ready_watch(key, token)
    }

    fn describe(&self) -> String {
        self.conn.display().to_string()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        crate::telemetry::store_kind(self.conn.display())
    }
}

#[cfg(test)]
mod tests {
    use super::split_acquired;

    #[test]
    fn the_acquire_reply_is_a_fence_or_the_holders_ttl() {
        assert_eq!(split_acquired(1_764_673_200_123_000).0, 1);
        assert_eq!(split_acquired(7).1, 7);
        // Held: -2 - pttl; a key without a TTL answers pttl -1.
        assert_eq!(split_acquired(-2 - 2500), (0, 2500, None));
        assert_eq!(split_acquired(-2), (0, 0, None));
        assert_eq!(split_acquired(-1), (0, -1, None));
        assert_eq!(split_acquired(i64::MIN).0, 0);
    }
}
