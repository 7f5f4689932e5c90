//! Settings of the Redis stores ([`RedisOptions`]) and the replica
//! acknowledgements a lease write may require ([`ReplicaAcks`]).

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use super::conn::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "tenure:";

pub use crate::fence::DEFAULT_FENCE_RETENTION;

/// The longest fence retention accepted: 100 years.
const MAX_FENCE_RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Settings of a [`RedisStore`](super::RedisStore).
#[derive(Debug, Clone)]
#[must_use]
#[non_exhaustive]
pub struct RedisOptions {
    /// Prefix of every key tenure writes (default [`DEFAULT_PREFIX`]).
    pub(crate) prefix: String,
    /// Time budget of one call, reconnection included (default 2 s).
    pub(crate) timeout: Duration,
    /// Time budget of one TCP connect (default 1 s).
    pub(crate) connect_timeout: Duration,
    /// Replica acknowledgements required after acquire and extend (default none);
    /// see [`require_replicas`](Self::require_replicas).
    pub(crate) replicas: Option<ReplicaAcks>,
    /// Connect to a server whose `maxmemory-policy` may evict keys (default
    /// `false`); see [`allow_eviction`](Self::allow_eviction).
    pub(crate) allow_eviction: bool,
    /// Certificates for `rediss://` URLs (default: the system's trusted roots,
    /// no client certificate); see [`ca_file`](Self::ca_file).
    pub(crate) tls: RedisTls,
    /// How long a fence counter outlives its last grant (default
    /// [`DEFAULT_FENCE_RETENTION`]); see [`fence_retention`](Self::fence_retention).
    pub(crate) fence_retention: Duration,
}

/// The certificate files of a `rediss://` connection. Read at connect; an
/// unreadable file is a configuration error naming the file.
///
/// TLS needs tenure's `tls` cargo feature (rustls); without it a `rediss://`
/// URL or any of these files is refused at connect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM file of the certificate authorities that may sign the server's
    /// certificate, instead of the system's trusted roots.
    pub ca_file: Option<PathBuf>,
    /// PEM files of a client certificate and its private key, for servers that
    /// authenticate clients (`tls-auth-clients yes`).
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl RedisTls {
    /// Whether anything differs from the defaults.
    pub(crate) fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.client_cert.is_some()
    }
}

impl RedisOptions {
    /// The write and its `WAIT` share one reply, which must arrive within the
    /// per-call timeout: a `WAIT` as long as that could never succeed.
    pub(super) fn check_replica_wait(&self) -> Result<()> {
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

    /// A fence retention Redis can set as a `PX`: at least a millisecond,
    /// at most 100 years.
    pub(super) fn check_fence_retention(&self) -> Result<()> {
        let r = self.fence_retention;
        if r < Duration::from_millis(1) || r > MAX_FENCE_RETENTION {
            return Err(Error::invalid(
                "fence_retention",
                format!("{r:?} is not between 1 ms and 100 years"),
            ));
        }
        Ok(())
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
            tls: RedisTls::default(),
            fence_retention: DEFAULT_FENCE_RETENTION,
        }
    }
}

impl RedisOptions {
    /// Trusts the certificate authorities in the PEM file `path` (and only
    /// them) for `rediss://` servers. Default: the system's trusted roots.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca_file = Some(path.into());
        self
    }

    /// Presents the client certificate `cert` with its private key `key` (PEM
    /// files) to `rediss://` servers that authenticate clients.
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.client_cert = Some((cert.into(), key.into()));
        self
    }

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
    /// By default [`RedisStore::connect`](super::RedisStore::connect) and
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

    /// Sets how long a lease's fence counter outlives its last grant (default
    /// [`DEFAULT_FENCE_RETENTION`], a day; between 1 ms and 100 years, else
    /// connecting refuses it). Each grant writes the counter with this TTL, so
    /// keys used once (`orders:42`) do not leave a counter behind for good.
    ///
    /// Fences stay increasing after a counter expires: every fence is at least
    /// the server's clock, so the first fence after the expiry starts above
    /// every fence handed out before. While the counter lives, fences also stay
    /// increasing if the server's clock steps back; after it expired, only a
    /// clock that stepped back by more than the time since the last grant could
    /// repeat a fence (see `docs/leases.md`).
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
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
