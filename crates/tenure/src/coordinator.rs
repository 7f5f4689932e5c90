//! The entry point: one handle per store.

use std::any::Any;
use std::sync::Arc;

mod builder;

pub use builder::CoordinatorBuilder;

use crate::election::Election;
use crate::error::{Error, Result};
use crate::gate::{GateKind, GateStatus, GateStore};
use crate::key::validate_key;
use crate::lease::{Lease, LeaseSet, LeaseStatus, LeaseStore, ReleaseOutcome};
use crate::limit::store::LimitStore;
use crate::limit::{Algorithm, Limiter, Quota};
use crate::memory::{MemoryGates, MemoryLimits, MemoryRecords, MemoryStore};
use crate::once::Once;
#[cfg(feature = "quorum")]
use crate::quorum::QuorumStore;
use crate::record::RecordStore;
#[cfg(feature = "redis")]
use crate::redis::{RedisLimits, RedisStore};
use crate::rwlease::RwLease;
use crate::semaphore::Semaphore;
#[cfg(feature = "sqlite")]
use crate::sqlite::{SqliteOptions, SqliteStore};
use crate::url::redact;
use std::num::NonZeroU32;

/// A handle on one coordination store. Cheap to clone (an `Arc` inside).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// let tenure = tenure::Coordinator::connect("memory:").await?;
/// let status = tenure.status("orders:42").await?;
/// assert!(!status.held);
/// assert!(tenure::Coordinator::connect("ftp://nope").await.is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Coordinator {
    backend: Arc<dyn LeaseStore>,
    limits: Arc<dyn LimitStore>,
    /// Where elections and run-once operations keep their records (none for
    /// a custom lease store unless given).
    records: Option<Arc<dyn RecordStore>>,
    /// Where semaphores and read-write leases keep their gates (none on a
    /// quorum).
    semaphores: Option<Arc<dyn GateStore>>,
    /// The Redis store behind the leases, for the fenced resource on it.
    #[cfg(feature = "redis")]
    redis: Option<RedisStore>,
}

impl Coordinator {
    /// Connects to the store named by `url`:
    ///
    /// - `memory:` — in this process only;
    /// - `redis://host:port[/db]` or `rediss://…` — one Redis master (checked with
    ///   `PING` and its `maxmemory-policy` before returning, see
    ///   [`RedisOptions::allow_eviction`](crate::redis::RedisOptions::allow_eviction)), for leases and rate limits alike.
    ///   Credentials go in the user-info part, `redis://user:password@host`
    ///   (percent-encode `@ / ? # %` in the password); a `?password=` query
    ///   parameter is refused. Passwords are redacted wherever a URL is shown;
    /// - `redis+cluster://[user:password@]host:port,host:port…` (or
    ///   `rediss+cluster://…`) — a Redis Cluster, reached through the seed nodes
    ///   listed, for leases, fences and rate limits alike; see
    ///   [`redis`](crate::redis#redis-cluster);
    /// - `redis+sentinel://[user:password@]sentinel:26379,…/MASTER[/DB]` (or
    ///   `rediss+sentinel://…`) — the master that Redis Sentinel names, found
    ///   again after a failover; see [`redis`](crate::redis#redis-sentinel);
    /// - several Redis URLs separated by commas — a quorum of independent masters,
    ///   as [`connect_quorum`](Self::connect_quorum). A comma separates URLs only
    ///   where the next URL's scheme (`redis://`, `rediss://`) follows it, so
    ///   commas inside a password are kept (see
    ///   [`split_redis_urls`](crate::redis::split_redis_urls));
    /// - `sqlite:PATH` (or `sqlite://PATH`) — a SQLite file shared by the
    ///   processes of this host, created if missing (its directory must exist);
    /// - `etcd://[user[:password]@]host:2379[,host:2379…]` (`etcds://` for
    ///   TLS, with the system's trusted roots) — an etcd cluster
    ///   (feature `etcd`), checked with a read before returning, for
    ///   leases, elections, semaphores and run-once; rate limits on it are
    ///   refused with an error naming Redis and SQLite (see `tenure::etcd`).
    ///   The password is never shown.
    ///
    /// Each store is a cargo feature (`redis`, `quorum`, `tls` for
    /// `rediss://`, `sqlite`, `etcd`); a URL whose store this build left out
    /// is an [`Error::Config`] naming the feature to turn on.
    ///
    /// Every capability of the store comes with the handle: rate limits,
    /// election and run-once records, semaphores and (on Redis) the fenced
    /// resource, each kept in the store. To set the store's options (a TLS CA,
    /// a key prefix, time budgets, `require_replicas`, …) use
    /// [`builder`](Self::builder): same URL, same capabilities.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// A handle on the store named by `url` (as [`connect`](Self::connect)
    /// reads it) with that store's options; see [`CoordinatorBuilder`].
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use tenure::redis::RedisOptions;
    ///
    /// let tenure = tenure::Coordinator::builder("rediss://cache.internal:6380")
    ///     .redis_options(RedisOptions::default().ca_file("/etc/ssl/internal-ca.pem"))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> CoordinatorBuilder {
        CoordinatorBuilder::new(url.into())
    }

    /// Leases over a quorum of independent Redis masters (Redlock), with default
    /// [`QuorumOptions`](crate::quorum::QuorumOptions): succeeds when a majority of the nodes answers `PING`, so
    /// a minority may be down at start. Use 3 or 5 nodes. See
    /// [`quorum`](crate::quorum) for the protocol and its assumptions, and
    /// [`builder`](Self::builder) with
    /// [`quorum_options`](CoordinatorBuilder::quorum_options) for other
    /// settings. Needs the cargo feature `quorum` (on by default).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// let tenure = tenure::Coordinator::connect_quorum([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])
    /// .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "quorum")]
    pub async fn connect_quorum<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let backend = QuorumStore::connect(urls, crate::quorum::QuorumOptions::default()).await?;
        Ok(Self::with_backend(backend))
    }

    /// An etcd cluster (`etcd://` or `etcds://`, see [`etcd`](crate::etcd))
    /// with `options` (TLS certificates, time budgets, prefix): leases,
    /// elections, semaphores and run-once records in etcd, rate limits
    /// refused with an error naming Redis and SQLite.
    #[cfg(feature = "etcd")]
    pub async fn connect_etcd(url: &str, options: crate::etcd::EtcdOptions) -> Result<Self> {
        Self::builder(url).etcd_options(options).connect().await
    }

    /// A SQLite file shared by the processes of this host (see
    /// [`SqliteStore`]), with default options, for leases and rate limits.
    /// Needs the cargo feature `sqlite` (on by default).
    #[cfg(feature = "sqlite")]
    pub async fn sqlite(path: impl Into<std::path::PathBuf>) -> Result<Self> {
        let backend = SqliteStore::open(path, SqliteOptions::default()).await?;
        Ok(Self::with_backend(backend))
    }

    /// An in-process store.
    pub fn memory() -> Self {
        Self::with_backend(MemoryStore::new())
    }

    /// A handle on a lease store built by hand. A store of tenure's
    /// ([`MemoryStore`], `RedisStore`, `SqliteStore`, `QuorumStore`,
    /// `EtcdStore`) brings every capability it has, as
    /// [`connect`](Self::connect) would: rate limits, records and semaphores
    /// in the same store (on a quorum, limits and semaphores are refused
    /// with [`Error::Unsupported`] naming the alternatives). A store of your
    /// own gets limits in this process and no records or semaphores until
    /// given with [`with_limits`](Self::with_limits),
    /// [`with_records`](Self::with_records) and
    /// [`with_semaphores`](Self::with_semaphores).
    pub fn with_backend(backend: impl LeaseStore) -> Self {
        let wired = Wired::of(&backend);
        Coordinator {
            backend: Arc::new(backend),
            limits: wired
                .limits
                .unwrap_or_else(|| Arc::new(MemoryLimits::new())),
            records: wired.records,
            semaphores: wired.semaphores,
            #[cfg(feature = "redis")]
            redis: wired.redis,
        }
    }

    /// The fenced resource on this handle's Redis store
    /// ([`RedisFencedStore`](crate::redis::RedisFencedStore)), sharing its
    /// connection, prefix and options. On another store it is
    /// [`Error::Unsupported`]: fence a SQL row instead (see
    /// [`fence`](crate::fence)), or connect a `RedisFencedStore` of its own.
    ///
    /// ```no_run
    /// # async fn demo() -> tenure::Result<()> {
    /// use tenure::fence::FencedWrite;
    ///
    /// let tenure = tenure::Coordinator::connect("redis://127.0.0.1:6379").await?;
    /// let balances = tenure.fenced_store()?;
    /// let written = tenure
    ///     .lease("acct:1")
    ///     .with(|fence| async move { balances.write("acct:1", fence, "150").await })
    ///     .await?;
    /// assert_eq!(written, FencedWrite::Applied);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "redis")]
    pub fn fenced_store(&self) -> Result<crate::redis::RedisFencedStore> {
        match &self.redis {
            Some(redis) => Ok(crate::redis::RedisFencedStore::from_backend(redis)),
            None => Err(Error::Unsupported {
                store: self.backend.describe(),
                what: "a Redis fenced resource",
                instead: "connect to one Redis master (redis://), a cluster or Sentinel, \
                          or fence a SQL row (see tenure::fence)"
                    .into(),
            }),
        }
    }

    /// This handle with election and run-once records kept in `records`
    /// (connecting by URL sets it to the same store as the leases).
    #[must_use]
    pub fn with_records(mut self, records: impl RecordStore) -> Self {
        self.records = Some(Arc::new(records));
        self
    }

    /// This handle with semaphore permits and read-write leases kept in
    /// `store` (connecting by URL sets it to the leases' store, except on a
    /// quorum).
    #[must_use]
    pub fn with_semaphores(mut self, store: impl GateStore) -> Self {
        self.semaphores = Some(Arc::new(store));
        self
    }

    /// An expiring semaphore on `key` with `permits` holders at most; see
    /// [`semaphore`](crate::semaphore). Fails on a store without semaphores
    /// (a quorum), naming the alternative.
    pub fn semaphore(&self, key: impl Into<String>, permits: NonZeroU32) -> Result<Semaphore> {
        Ok(Semaphore::new(
            self.gates(GateKind::Semaphore)?,
            key.into(),
            permits,
        ))
    }

    /// A read-write lease on `key`: many readers or one writer; see
    /// [`rwlease`](crate::rwlease). Fails on a store without them (a
    /// quorum), naming the alternative.
    pub fn rw_lease(&self, key: impl Into<String>) -> Result<RwLease> {
        Ok(RwLease::new(self.gates(GateKind::ReadWrite)?, key.into()))
    }

    /// The store of semaphores and read-write leases, or the error that
    /// names an alternative where there is none (a quorum).
    fn gates(&self, kind: GateKind) -> Result<Arc<dyn GateStore>> {
        self.semaphores.clone().ok_or_else(|| {
            let (what, instead) = match kind {
                GateKind::Semaphore => (
                    "semaphores",
                    "permit counts; use one Redis master, SQLite or etcd",
                ),
                GateKind::ReadWrite => (
                    "read-write leases",
                    "shared grants; use one Redis master, a Redis Cluster, SQLite or etcd",
                ),
            };
            Error::Unsupported {
                store: self.backend.describe(),
                what,
                instead: format!(
                    "a quorum of masters would need its own majority protocol for {instead}"
                ),
            }
        })
    }

    /// The semaphores with permits held now whose key starts with `prefix`,
    /// in key order, with their holders and waiters. Fails where the store
    /// cannot list (a Redis Cluster, a quorum).
    pub async fn list_semaphores(&self, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        let kind = GateKind::Semaphore;
        self.gates(kind)?.list(kind, prefix).await
    }

    /// The read-write leases held now whose key starts with `prefix`, in key
    /// order, with their readers or writer. Fails where the store cannot
    /// list (a Redis Cluster, a quorum).
    pub async fn list_rw_leases(&self, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        let kind = GateKind::ReadWrite;
        self.gates(kind)?.list(kind, prefix).await
    }

    /// A run-once operation on `key`; see [`once`](crate::once).
    pub fn once(&self, key: impl Into<String>) -> Once {
        Once::new(Arc::clone(&self.backend), self.records.clone(), key.into())
    }

    /// A leader election on `key`; see [`election`](crate::election).
    pub fn election(&self, key: impl Into<String>) -> Election {
        Election::new(Arc::clone(&self.backend), self.records.clone(), key.into())
    }

    /// This handle with rate-limit state kept in `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: impl LimitStore) -> Self {
        self.limits = Arc::new(limits);
        self
    }

    /// A rate limiter on this handle's store; see [`Limiter`]. Limits live in
    /// Redis (one master, a cluster, Sentinel), in the SQLite file, or in this
    /// process for `memory:`, unless set with
    /// [`with_limits`](Self::with_limits). On a quorum of masters and on etcd
    /// every check fails ([`Error::Unsupported`], [`Error::Config`]) naming
    /// where limits belong: limits counted per process would let each
    /// process admit the whole rate. An explicit per-process limiter is
    /// [`Limiter::new`] with [`MemoryLimits`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::NonZeroU32;
    /// use tenure::limit::{Algorithm, Quota};
    ///
    /// let tenure = tenure::Coordinator::memory();
    /// let limiter = tenure.limiter(Quota::per_minute(NonZeroU32::new(60).unwrap()), Algorithm::Gcra);
    /// let d = limiter.check("ip:203.0.113.7").await?;
    /// assert!(d.allowed && d.remaining == 59);
    /// # Ok(()) }
    /// ```
    pub fn limiter(&self, quota: Quota, algorithm: Algorithm) -> Limiter {
        Limiter::on(Arc::clone(&self.limits), quota, algorithm)
    }

    /// The rate-limit store behind this handle.
    pub fn limits(&self) -> &Arc<dyn LimitStore> {
        &self.limits
    }

    /// Describes a lease on `key`; nothing is sent until it is acquired.
    pub fn lease(&self, key: impl Into<String>) -> Lease {
        Lease::new(Arc::clone(&self.backend), key.into())
    }

    /// Describes leases on several keys taken together, all or none
    /// (duplicates count once): [`acquire`](LeaseSet::acquire) returns only
    /// when every key is held, and nobody keeps part of the set after a
    /// refusal, an error or a dropped future. The keys are taken one by one in
    /// byte order, so callers asking for overlapping sets in any order cannot
    /// deadlock; each key keeps its own fence, renewal and waiting line, so it
    /// works on every store, and on a Redis Cluster across slots.
    pub fn lease_all<I, K>(&self, keys: I) -> LeaseSet
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        LeaseSet::new(&self.backend, keys.into_iter().map(Into::into).collect())
    }

    /// Releases the lease on `key` whoever holds it: an operator's
    /// break-glass for a holder that hangs while renewing. The store's next
    /// fence is greater than the old holder's, so a fenced resource refuses
    /// its writes; the old holder's guard learns of the loss at its next
    /// renewal (its lost signal fires), not before — until then its work goes
    /// on. Waiters are woken as by an ordinary release. `NotHeld` when the
    /// lease was free, or changed hands between the read and the release
    /// (nothing is released then). Quorums and stores that cannot read the
    /// holder's token refuse with [`Error::Config`].
    pub async fn force_release(&self, key: &str) -> Result<ReleaseOutcome> {
        validate_key(key)?;
        match self.backend.holder_token(key).await? {
            Some(token) => self.backend.release(key, &token).await,
            None => Ok(ReleaseOutcome::NotHeld),
        }
    }

    /// Waits for the clean-up still running in the background — the undos of
    /// acquires dropped in flight or failed with an unknown fate (a timeout,
    /// a broken connection), the releases of guards dropped without
    /// [`release`](crate::LeaseGuard::release), a quorum's undos of late
    /// votes and takes, releases asked again, etcd leases revoked after a
    /// failed or refused step, a dropped Redis release watch's marker taken
    /// out of its line — to end (each ends by itself within the TTL
    /// of what it cleans up, and an undo within a minute). Call it before a
    /// short-lived process exits: leaving `main` drops those tasks, and what
    /// they were to delete then stays in the store for a TTL. The undos and
    /// releases waited for are the process's, every handle's. The handle
    /// stays usable. With nothing in the background it returns at once.
    pub async fn close(&self) {
        crate::lease::cleanup::wait().await;
        self.backend.close().await;
    }

    /// Reads whether `key` is held, its TTL and last fence, who holds it (when
    /// the holder [recorded it](Lease::record_holder)) and how many wait,
    /// without changing it.
    pub async fn status(&self, key: &str) -> Result<LeaseStatus> {
        validate_key(key)?;
        self.backend.status(key).await
    }

    /// The leases held now whose key starts with `prefix` (`""` for all), in
    /// key order, each with its status. Redis scans its key space (`SCAN`,
    /// several round trips for many keys), SQLite and etcd read a range, the
    /// memory store its map; a quorum and a Redis Cluster cannot list and answer
    /// [`Error::Config`].
    pub async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseStatus)>> {
        if prefix.chars().any(char::is_control) {
            return Err(Error::InvalidKey {
                key: prefix.chars().take(64).collect(),
                reason: "a prefix must not contain control characters".into(),
            });
        }
        self.backend.list(prefix).await
    }

    /// The store of election and run-once records behind this handle, if any.
    pub fn records(&self) -> Option<&Arc<dyn RecordStore>> {
        self.records.as_ref()
    }

    /// The backend behind this handle.
    pub fn backend(&self) -> &Arc<dyn LeaseStore> {
        &self.backend
    }
}

/// The capabilities a known lease store brings to its handle.
#[derive(Default)]
struct Wired {
    limits: Option<Arc<dyn LimitStore>>,
    records: Option<Arc<dyn RecordStore>>,
    semaphores: Option<Arc<dyn GateStore>>,
    #[cfg(feature = "redis")]
    redis: Option<RedisStore>,
}

impl Wired {
    /// What `backend` brings, when it is one of tenure's stores.
    // `..Wired::default()` fills the `redis` field, which builds without the
    // `redis` feature do not have.
    #[cfg_attr(not(feature = "redis"), allow(clippy::needless_update))]
    fn of(backend: &dyn Any) -> Self {
        if backend.is::<MemoryStore>() {
            return Wired {
                records: Some(Arc::new(MemoryRecords::new())),
                semaphores: Some(Arc::new(MemoryGates::new())),
                ..Wired::default()
            };
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = backend.downcast_ref::<RedisStore>() {
            return Wired {
                limits: Some(Arc::new(RedisLimits::from_backend(redis))),
                records: Some(Arc::new(redis.clone())),
                semaphores: Some(Arc::new(redis.clone())),
                redis: Some(redis.clone()),
            };
        }
        #[cfg(feature = "sqlite")]
        if let Some(sqlite) = backend.downcast_ref::<SqliteStore>() {
            return Wired {
                limits: Some(Arc::new(sqlite.clone())),
                records: Some(Arc::new(sqlite.clone())),
                semaphores: Some(Arc::new(sqlite.clone())),
                ..Wired::default()
            };
        }
        #[cfg(feature = "quorum")]
        if let Some(quorum) = backend.downcast_ref::<QuorumStore>() {
            return Wired {
                limits: Some(Arc::new(crate::quorum::QuorumLimits {
                    nodes: quorum.describe(),
                })),
                ..Wired::default()
            };
        }
        #[cfg(feature = "etcd")]
        if let Some(etcd) = backend.downcast_ref::<crate::etcd::EtcdStore>() {
            return Wired {
                limits: Some(Arc::new(crate::etcd::EtcdLimits {
                    endpoints: etcd.describe(),
                })),
                records: Some(Arc::new(etcd.clone())),
                semaphores: Some(Arc::new(etcd.clone())),
                ..Wired::default()
            };
        }
        Wired::default()
    }
}

/// The error for a URL whose store this build of tenure left out.
pub(crate) fn compiled_out(url: &str, store: &str, feature: &str) -> Error {
    Error::Config {
        url: redact(url),
        reason: format!(
            "this build of tenure has no {store} support; turn on its cargo feature `{feature}`"
        ),
    }
}

/// The path of a `sqlite:PATH` or `sqlite://PATH` URL.
#[cfg(feature = "sqlite")]
fn sqlite_path(url: &str) -> Result<&str> {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.is_empty() {
        return Err(Error::Config {
            url: url.to_string(),
            reason: "no path; expected sqlite:PATH, e.g. sqlite:/var/lib/app/tenure.db".into(),
        });
    }
    Ok(path)
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A forced release frees a lease its caller does not hold: the next fence
    /// is greater, and the old guard's next renewal finds the lease gone.
    #[tokio::test]
    async fn force_release_takes_the_lease_from_its_holder() {
        use crate::lease::ExtendOutcome;
        let dir = tempfile::tempdir().unwrap();
        let sqlite = Coordinator::sqlite(dir.path().join("t.db")).await.unwrap();
        for c in [Coordinator::memory(), sqlite] {
            assert_eq!(c.force_release("k").await.unwrap(), ReleaseOutcome::NotHeld);
            let old = c.lease("k").try_acquire().await.unwrap().expect("free");
            assert_eq!(
                c.force_release("k").await.unwrap(),
                ReleaseOutcome::Released
            );
            let new = c.lease("k").try_acquire().await.unwrap();
            let new = new.expect("acquired after the forced release");
            assert!(new.fence() > old.fence());
            assert!(matches!(
                old.extend().await.unwrap(),
                ExtendOutcome::NotHeld
            ));
            assert!(c.force_release("").await.is_err());
        }
    }

    /// The CLI asks stores whether they coordinate across processes instead of
    /// comparing descriptions: the memory store does not, SQLite does.
    #[tokio::test]
    async fn only_in_process_stores_are_not_shared() {
        let memory = Coordinator::connect("memory:").await.unwrap();
        assert!(!memory.backend().is_shared());
        assert!(!memory.limits().is_shared());
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("w.db").display());
        let sqlite = Coordinator::connect(&url).await.unwrap();
        assert!(sqlite.backend().is_shared());
        assert!(sqlite.limits().is_shared());
    }
}

#[cfg(test)]
mod features {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A URL whose store this build left out is refused, before any I/O, with
    /// an error naming the cargo feature (and never the password). Which cases
    /// run depends on the build: `cargo test -p tenure` checks `tls` and
    /// `etcd`; `--no-default-features` checks `redis` and `sqlite` too.
    #[tokio::test]
    async fn a_url_whose_store_is_compiled_out_names_its_feature() {
        let cases = [
            (!cfg!(feature = "redis"), "redis://u:pw-x@h:1", "`redis`"),
            (
                !cfg!(feature = "sqlite"),
                "sqlite:/nonexistent/w.db",
                "`sqlite`",
            ),
            (!cfg!(feature = "etcd"), "etcd://u:pw-x@h:2379", "`etcd`"),
            (
                cfg!(feature = "redis") && !cfg!(feature = "quorum"),
                "redis://h:1,redis://h:2,redis://h:3",
                "`quorum`",
            ),
            (
                cfg!(feature = "redis") && !cfg!(feature = "tls"),
                "rediss://u:pw-x@h:1",
                "`tls`",
            ),
        ];
        for (left_out, url, feature) in cases {
            if !left_out {
                continue;
            }
            let e = Coordinator::connect(url).await.unwrap_err();
            assert!(matches!(e, Error::Config { .. }), "{url}: {e:?}");
            let text = e.to_string();
            assert!(text.contains(feature), "{url}: {text}");
            assert!(!text.contains("pw-x"), "{url}: {text}");
        }
    }
}
