//! Leases on one Redis master.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo, PushKind, Script};
use tokio::sync::{OnceCell, watch};

use super::conn::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, RedisConn};
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::key::hash_tag;
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStatus, LeaseStore, ReleaseOutcome, ReleaseWatch, valid_until,
};
use crate::token::OwnerToken;

const ACQUIRE_LUA: &str = include_str!("scripts/lease_acquire.lua");
const EXTEND_LUA: &str = include_str!("scripts/lease_extend.lua");
const RELEASE_LUA: &str = include_str!("scripts/lease_release.lua");
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "warden:";

/// Settings of a [`RedisStore`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisOptions {
    /// Prefix of every key warden writes (default [`DEFAULT_PREFIX`]).
    pub prefix: String,
    /// Time budget of one call, reconnection included (default 2 s).
    pub timeout: Duration,
    /// Time budget of one TCP connect (default 1 s).
    pub connect_timeout: Duration,
    /// Replica acknowledgements required after acquire and extend (default none);
    /// see [`require_replicas`](Self::require_replicas).
    pub replicas: Option<ReplicaAcks>,
    /// Connect to a server whose `maxmemory-policy` may evict keys (default
    /// `false`); see [`allow_eviction`](Self::allow_eviction).
    pub allow_eviction: bool,
}

impl RedisOptions {
    /// The write and its `WAIT` share one reply, which must arrive within the
    /// per-call timeout: a `WAIT` as long as that could never succeed.
    fn check_replica_wait(&self) -> Result<()> {
        match self.replicas {
            Some(acks) if acks.timeout >= self.timeout => Err(Error::invalid(
                "require_replicas",
                format!(
                    "the replica wait ({:?}) must be shorter than the per-call timeout ({:?}): \
                     the write and its WAIT are answered together within that timeout",
                    acks.timeout, self.timeout
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// How many replicas must acknowledge a lease write, and how long the master waits
/// for them (`WAIT numreplicas timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAcks {
    /// Replicas that must have the write.
    pub replicas: NonZeroU32,
    /// How long the master may wait for them.
    pub timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            replicas: None,
            allow_eviction: false,
        }
    }
}

impl RedisOptions {
    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the per-call time budget.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the connect time budget.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Accepts a server whose `maxmemory-policy` is `allkeys-*` or `volatile-*`.
    ///
    /// By default [`RedisStore::connect`] and
    /// [`RedisFencedStore::connect`](crate::redis::RedisFencedStore::connect) read
    /// `CONFIG GET maxmemory-policy` and refuse such a server: when memory runs
    /// full it may evict a lease key (a second holder gets in while the first
    /// still holds it) and the fence counter (fences start over at 1, so a stale
    /// holder's token looks new). `noeviction` is the requirement. With this set,
    /// the connection is made and a warning is logged instead. Where `CONFIG` is
    /// disabled or denied (many managed services), the policy cannot be read and
    /// the check is skipped: make sure of `noeviction` yourself.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Requires `replicas` replicas to acknowledge every acquire and extend
    /// (`WAIT replicas timeout`, sent in one pipeline with the write so it
    /// always refers to that write). When fewer acknowledge within `timeout`,
    /// the call fails with [`Error::ReplicasUnacknowledged`]: after an acquire
    /// the lease is released again; after an extend the key is kept, because
    /// the guard still counts on its last confirmed deadline (releasing would
    /// let a second holder in while the first believes it holds). `timeout`
    /// must be shorter than the per-call [`timeout`](Self::timeout) (connecting
    /// refuses it otherwise): the write and its `WAIT` are answered together
    /// within that budget.
    ///
    /// This **narrows but does not close** the failover window: Redis replication
    /// stays asynchronous, `WAIT` only reports how far it got, and a failover can
    /// still promote a replica that missed the write (or one that acknowledged it
    /// but then restarted without persistence). Use a quorum of independent
    /// masters plus fencing when a double grant must be ruled out. While a `WAIT`
    /// blocks, other calls of the same handle queue behind it on its connection.
    pub fn require_replicas(mut self, replicas: NonZeroU32, timeout: Duration) -> Self {
        self.replicas = Some(ReplicaAcks { replicas, timeout });
        self
    }
}

/// Leases on one Redis master: one script call per operation.
///
/// Storage layout for a lease named `orders:42` with the default prefix:
///
/// | key | type | content |
/// |---|---|---|
/// | `warden:{orders:42}` | string, with TTL | the holder's owner token |
/// | `warden:{orders:42}:fence` | string, no TTL | the last fence handed out |
///
/// Both keys share the hash tag `{orders:42}`, so they live in one slot of a
/// Redis Cluster (the layout is ready for one; warden has no cluster client
/// yet). A key starting with `}` or `\` gets a `\` in front inside the braces
/// (`}x` → `warden:{\}x}`), since `{}` would be an empty hash tag and split the
/// keys across slots; every other key is used as it is. A prefix should not
/// contain `{}` for the same reason.
///
/// The lease key's value is a plain random string, the convention
/// of most Redis lock clients, so a lock taken by another client on the same key
/// excludes warden and vice versa. Releases are published on
/// `warden:{orders:42}:released`, which waiters subscribe to (RESP3 pub/sub) so a
/// contended lease changes hands without polling.
///
/// The fence counter has no TTL on purpose: if it expired, fences would start over
/// and a stale holder's token could look new again.
#[derive(Debug, Clone)]
pub struct RedisStore {
    conn: RedisConn,
    prefix: Arc<str>,
    subscriber: Arc<OnceCell<Subscriber>>,
    replicas: Option<ReplicaAcks>,
    /// Send scripts with `EVAL` instead of `EVALSHA`: see
    /// [`inline_scripts`](Self::inline_scripts).
    inline_scripts: bool,
}

impl RedisStore {
    /// Connects to `url` (`redis://` or `rediss://`) and checks it answers.
    ///
    /// Also reads the server's `maxmemory-policy` and refuses one that may evict
    /// keys unless [`RedisOptions::allow_eviction`] is set.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        options.check_replica_wait()?;
        let conn = RedisConn::connect(url, options.timeout, options.connect_timeout).await?;
        conn.check_eviction_policy(options.allow_eviction).await?;
        Ok(Self::with_conn(conn, options))
    }

    /// Prepares a backend for `url` without connecting; the first call connects.
    /// Nothing is checked before that call, so the `maxmemory-policy` check of
    /// [`connect`](Self::connect) is not made: a quorum node should run with
    /// `maxmemory-policy noeviction` too.
    pub fn lazy(url: &str, options: RedisOptions) -> Result<Self> {
        options.check_replica_wait()?;
        let conn = RedisConn::lazy(url, options.timeout, options.connect_timeout)?;
        Ok(Self::with_conn(conn, options))
    }

    fn with_conn(conn: RedisConn, options: RedisOptions) -> Self {
        RedisStore {
            conn,
            prefix: options.prefix.into(),
            subscriber: Arc::new(OnceCell::new()),
            replicas: options.replicas,
            inline_scripts: false,
        }
    }

    /// Sends every script with `EVAL` (the script's text) instead of `EVALSHA`.
    /// A quorum needs it: a `NOSCRIPT` answer makes redis-rs load the script and
    /// send the call again *later*, which can reorder it behind requests made
    /// after it — an undo could then run before the vote it undoes (a later
    /// attempt is safe either way: it carries a fresh owner token). `EVAL` is one
    /// self-contained request, so requests reach a node in the order they were
    /// made.
    pub(crate) fn inline_scripts(mut self) -> Self {
        self.inline_scripts = true;
        self
    }

    /// Runs a lease script by `EVALSHA` (with NOSCRIPT recovery) or, with
    /// [`inline_scripts`](Self::inline_scripts), by `EVAL`.
    pub(crate) async fn run_script<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        (script, source): (&Script, &str),
        keys: &[String],
        args: &[String],
    ) -> Result<T> {
        let key = keys.first().map_or("", String::as_str);
        if self.inline_scripts {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(source).arg(keys.len()).arg(keys).arg(args);
            return self
                .conn
                .call(
                    op,
                    key,
                    |mut c| async move { cmd.query_async(&mut c).await },
                )
                .await;
        }
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(a);
        }
        self.conn.script(op, key, &invocation).await
    }

    /// The connection, shared with other Redis-based parts of warden.
    pub(crate) fn conn(&self) -> &RedisConn {
        &self.conn
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key that holds the lease `key`.
    /// See the layout table on [`RedisStore`].
    pub fn lease_key(&self, key: &str) -> String {
        format!("{}{{{}}}", self.prefix, hash_tag(key))
    }

    pub(crate) fn fence_key(&self, key: &str) -> String {
        format!("{}:fence", self.lease_key(key))
    }

    fn release_channel(&self, key: &str) -> String {
        format!("{}:released", self.lease_key(key))
    }

    /// Deletes `key` if it holds `token`, like [`release`](LeaseStore::release),
    /// without waking waiters: undoes one node's vote of a quorum acquisition that
    /// failed (waking every waiter there would only make the next vote split too).
    pub(crate) async fn release_quietly(
        &self,
        key: &str,
        token: &OwnerToken,
    ) -> Result<ReleaseOutcome> {
        let channel = format!("{}:undone", self.lease_key(key));
        self.release_on(key, token, channel).await
    }

    async fn release_on(
        &self,
        key: &str,
        token: &OwnerToken,
        channel: String,
    ) -> Result<ReleaseOutcome> {
        let released: i64 = self
            .run_script(
                "release",
                (&RELEASE, RELEASE_LUA),
                &[self.lease_key(key)],
                &[token.as_str().to_string(), channel],
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
    async fn run_write<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        script: (&Script, &str),
        keys: &[String],
        args: &[String],
    ) -> Result<(T, Option<ReplicaReply>)> {
        let Some(acks) = self.replicas else {
            return Ok((self.run_script(op, script, keys, args).await?, None));
        };
        let key = keys.first().map_or("", String::as_str);
        // WAIT 0 would block forever: wait at least 1 ms.
        let wait_ms = millis(acks.timeout).max(1);
        let needed = acks.replicas.get();
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(script.1)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
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

    fn unacknowledged(&self, op: &'static str, key: &str, acks: ReplicaReply) -> Error {
        Error::ReplicasUnacknowledged {
            backend: self.describe(),
            op,
            key: key.to_string(),
            needed: acks.needed,
            acked: acks.acked,
            waited: acks.waited,
        }
    }

    /// The release subscriber, opened on first contention. A failed open is not
    /// cached: the next waiter tries again, and meanwhile waiters poll.
    async fn subscriber(&self) -> Option<&Subscriber> {
        self.subscriber
            .get_or_try_init(|| async { Subscriber::open(&self.conn).await.ok_or(()) })
            .await
            .ok()
    }
}

/// What `WAIT` answered after a lease write.
#[derive(Debug, Clone, Copy)]
struct ReplicaReply {
    needed: u32,
    acked: u32,
    waited: Duration,
}

impl ReplicaReply {
    fn enough(self) -> bool {
        self.acked >= self.needed
    }
}

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<AcquireReply> {
        let start = crate::clock::now();
        let keys = [self.lease_key(key), self.fence_key(key)];
        let args = [token.as_str().to_string(), millis(ttl).to_string()];
        let written = self
            .run_write("acquire", (&ACQUIRE, ACQUIRE_LUA), &keys, &args)
            .await;
        let ((won, value), acks): ((i64, i64), _) = match written {
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
        if won != 1 {
            return Ok(AcquireReply::Held {
                ttl_left: u64::try_from(value).ok().map(Duration::from_millis),
            });
        }
        let fence = u64::try_from(value).map_err(|_| Error::WrongType {
            key: self.fence_key(key),
            detail: format!("fence counter is {value}"),
        })?;
        if let Some(acks) = acks.filter(|a| !a.enough()) {
            if let Err(e) = self.release(key, token).await {
                tracing::warn!(key, error = %e, "release after missing replica acknowledgements failed; the TTL will free the key");
            }
            return Err(self.unacknowledged("acquire", key, acks));
        }
        Ok(AcquireReply::Acquired {
            fence: Fence::new(fence),
            valid_until: valid_until(start, ttl),
        })
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        let start = crate::clock::now();
        let (extended, acks): (i64, _) = self
            .run_write(
                "extend",
                (&EXTEND, EXTEND_LUA),
                &[self.lease_key(key)],
                &[token.as_str().to_string(), millis(ttl).to_string()],
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
        self.release_on(key, token, self.release_channel(key)).await
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let lease_key = self.lease_key(key);
        let fence_key = self.fence_key(key);
        let (kind, pttl, fence): (String, i64, Option<String>) = self
            .conn
            .call("status", &lease_key, |mut c| {
                let (lease_key, fence_key) = (lease_key.clone(), fence_key.clone());
                async move {
                    redis::pipe()
                        .cmd("TYPE")
                        .arg(&lease_key)
                        .pttl(&lease_key)
                        .get(&fence_key)
                        .query_async(&mut c)
                        .await
                }
            })
            .await?;
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
                key: fence_key.clone(),
                detail: format!("fence counter is {s:?}, not an integer"),
            })?)),
        };
        Ok(LeaseStatus {
            held: pttl != -2,
            ttl_left: u64::try_from(pttl).ok().map(Duration::from_millis),
            fence,
            storage_key: lease_key,
        })
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        match self.subscriber().await {
            Some(sub) => sub.watch(self.release_channel(key)).await,
            None => ReleaseWatch::polling(),
        }
    }

    fn describe(&self) -> String {
        self.conn.display().to_string()
    }
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").finish_non_exhaustive()
    }
}

/// One RESP3 connection subscribed to the release channels of the keys being
/// waited on; messages are fanned out to `watch` channels.
struct Subscriber {
    manager: ConnectionManager,
    senders: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
    // Serialises SUBSCRIBE/UNSUBSCRIBE so an unsubscribe of an idle channel can
    // never overtake a new subscribe of the same channel.
    changes: tokio::sync::Mutex<()>,
    timeout: Duration,
}

impl Subscriber {
    async fn open(conn: &RedisConn) -> Option<Subscriber> {
        let info = conn.client().get_connection_info().clone();
        let redis_settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(redis_settings);
        let client = redis::Client::open(info).ok()?;
        let senders: Arc<Mutex<HashMap<String, watch::Sender<u64>>>> = Arc::default();
        let dispatch = Arc::clone(&senders);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(conn.connect_timeout()))
            .set_response_timeout(Some(conn.timeout()))
            .set_number_of_retries(1)
            .set_automatic_resubscription()
            .set_push_sender(move |push: PushInfo| {
                let senders = dispatch.lock().unwrap_or_else(|e| e.into_inner());
                match push.kind {
                    PushKind::Message => {
                        let channel = match push.data.first() {
                            Some(redis::Value::BulkString(c)) => std::str::from_utf8(c).ok(),
                            _ => None,
                        };
                        if let Some(tx) = channel.and_then(|c| senders.get(c)) {
                            tx.send_modify(|n| *n = n.wrapping_add(1));
                        }
                    }
                    // A release may have been missed while disconnected: wake
                    // every waiter so it tries again.
                    PushKind::Disconnection => {
                        for tx in senders.values() {
                            tx.send_modify(|n| *n = n.wrapping_add(1));
                        }
                    }
                    _ => {}
                }
                Ok::<(), redis::aio::SendError>(())
            });
        let manager = tokio::time::timeout(
            conn.timeout(),
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .ok()?
        .map_err(|e| tracing::debug!(error = %e, "release notifications unavailable; polling"))
        .ok()?;
        Some(Subscriber {
            manager,
            senders,
            changes: tokio::sync::Mutex::new(()),
            timeout: conn.timeout(),
        })
    }

    async fn watch(&self, channel: String) -> ReleaseWatch {
        let _serial = self.changes.lock().await;
        let (rx, subscribe, idle) = {
            let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
            let idle: Vec<String> = senders
                .iter()
                .filter(|(c, tx)| **c != channel && tx.receiver_count() == 0)
                .map(|(c, _)| c.clone())
                .collect();
            for c in &idle {
                senders.remove(c);
            }
            match senders.get(&channel) {
                Some(tx) => (tx.subscribe(), false, idle),
                None => {
                    let (tx, rx) = watch::channel(0);
                    senders.insert(channel.clone(), tx);
                    (rx, true, idle)
                }
            }
        };
        let mut manager = self.manager.clone();
        if !idle.is_empty() {
            let _ = tokio::time::timeout(self.timeout, manager.unsubscribe(&idle)).await;
        }
        if subscribe {
            let ok = matches!(
                tokio::time::timeout(self.timeout, manager.subscribe(&channel)).await,
                Ok(Ok(()))
            );
            if !ok {
                let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
                senders.remove(&channel);
                return ReleaseWatch::polling();
            }
        }
        ReleaseWatch::from_channel(rx, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CRC16/XMODEM of the hash tag, modulo 16384: Redis Cluster's key slot.
    fn slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let hashed = bytes
            .iter()
            .position(|&b| b == b'{')
            .and_then(|open| {
                let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
                (close > 0).then(|| &bytes[open + 1..open + 1 + close])
            })
            .unwrap_or(bytes);
        let mut crc: u16 = 0;
        for &b in hashed {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc % 16384
    }

    #[tokio::test]
    async fn every_key_of_a_lease_shares_one_slot() {
        // Known slots from the Redis Cluster specification.
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        let backend =
            RedisStore::lazy("redis://127.0.0.1:1", RedisOptions::default()).expect("a valid URL");
        for key in [
            "}x",
            "}",
            "}}",
            "{}",
            "{",
            "a}b",
            "}{x}",
            "\\}x",
            "\\",
            "{a}b",
            "orders:42",
        ] {
            let lease = backend.lease_key(key);
            let others = [
                backend.fence_key(key),
                backend.release_channel(key),
                format!("{lease}:undone"),
            ];
            for other in &others {
                assert_eq!(slot(&lease), slot(other), "{key:?}: {lease} vs {other}");
            }
        }
        // One-to-one: escaped keys never collide with a plain key.
        let keys = ["}x", "\\}x", "\\\\}x", "x", "\\x", "\\\\x"];
        let mut seen: Vec<String> = keys.iter().map(|k| backend.lease_key(k)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), keys.len(), "{seen:?}");
        // Plain keys keep the layout existing fence counters live under.
        assert_eq!(backend.lease_key("orders:42"), "warden:{orders:42}");
        assert_eq!(backend.lease_key("}x"), "warden:{\\}x}");
    }
}
