//! One constructor for every store: a URL plus that store's options.

#[cfg(feature = "etcd")]
use crate::etcd::{EtcdOptions, EtcdStore};
#[cfg(feature = "quorum")]
use crate::quorum::{QuorumOptions, QuorumStore};
#[cfg(feature = "redis")]
use crate::redis::{RedisOptions, RedisStore};
#[cfg(feature = "sqlite")]
use crate::sqlite::{SqliteOptions, SqliteStore};

use super::{Coordinator, compiled_out};
use crate::error::{Error, Result};
use crate::url::redact;

/// A [`Coordinator`] about to connect: the URL of
/// [`Coordinator::connect`] plus the options of the store it names. Every
/// capability of that store comes with the handle, options or not.
///
/// Options for another store than the URL's are refused with
/// [`Error::Config`] rather than ignored (a TLS CA meant for Redis must not
/// quietly do nothing on etcd).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct CoordinatorBuilder {
    url: String,
    #[cfg(feature = "redis")]
    redis: Option<RedisOptions>,
    #[cfg(feature = "quorum")]
    quorum: Option<QuorumOptions>,
    #[cfg(feature = "sqlite")]
    sqlite: Option<SqliteOptions>,
    #[cfg(feature = "etcd")]
    etcd: Option<EtcdOptions>,
}

/// The store a URL names, by its scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Memory,
    Redis,
    Quorum,
    Sqlite,
    Etcd,
}

impl CoordinatorBuilder {
    pub(super) fn new(url: String) -> Self {
        CoordinatorBuilder {
            url,
            #[cfg(feature = "redis")]
            redis: None,
            #[cfg(feature = "quorum")]
            quorum: None,
            #[cfg(feature = "sqlite")]
            sqlite: None,
            #[cfg(feature = "etcd")]
            etcd: None,
        }
    }

    /// Options of one Redis master, a cluster or Sentinel (`redis://`,
    /// `rediss://`, `redis+cluster://`, `redis+sentinel://`).
    #[cfg(feature = "redis")]
    pub fn redis_options(mut self, options: RedisOptions) -> Self {
        self.redis = Some(options);
        self
    }

    /// Options of a quorum of Redis masters (several comma-separated
    /// `redis://` URLs).
    #[cfg(feature = "quorum")]
    pub fn quorum_options(mut self, options: QuorumOptions) -> Self {
        self.quorum = Some(options);
        self
    }

    /// Options of the SQLite store (`sqlite:PATH`).
    #[cfg(feature = "sqlite")]
    pub fn sqlite_options(mut self, options: SqliteOptions) -> Self {
        self.sqlite = Some(options);
        self
    }

    /// Options of the etcd store (`etcd://`, `etcds://`).
    #[cfg(feature = "etcd")]
    pub fn etcd_options(mut self, options: EtcdOptions) -> Self {
        self.etcd = Some(options);
        self
    }

    /// Connects, checking the store as [`Coordinator::connect`] does.
    pub async fn connect(self) -> Result<Coordinator> {
        let kind = self.kind()?;
        self.check_options(kind)?;
        match kind {
            Kind::Memory => Ok(Coordinator::memory()),
            #[cfg(feature = "redis")]
            Kind::Redis => {
                let store = RedisStore::connect(&self.url, self.redis.unwrap_or_default()).await?;
                Ok(Coordinator::with_backend(store))
            }
            #[cfg(feature = "quorum")]
            Kind::Quorum => {
                let urls = crate::redis::split_redis_urls(&self.url);
                let store = QuorumStore::connect(urls, self.quorum.unwrap_or_default()).await?;
                Ok(Coordinator::with_backend(store))
            }
            #[cfg(feature = "sqlite")]
            Kind::Sqlite => {
                let path = super::sqlite_path(&self.url)?;
                let store = SqliteStore::open(path, self.sqlite.unwrap_or_default()).await?;
                Ok(Coordinator::with_backend(store))
            }
            #[cfg(feature = "etcd")]
            Kind::Etcd => {
                let store = EtcdStore::connect(&self.url, self.etcd.unwrap_or_default()).await?;
                Ok(Coordinator::with_backend(store))
            }
            // `kind` refused the stores this build left out already.
            #[allow(unreachable_patterns)]
            _ => Err(Error::Config {
                url: redact(&self.url),
                reason: "this build of tenure has no support for this store".into(),
            }),
        }
    }

    /// The store the URL names; a store this build left out is an error
    /// naming its feature.
    fn kind(&self) -> Result<Kind> {
        let url = self.url.as_str();
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        let kind = match scheme {
            "memory" => Kind::Memory,
            "redis" | "rediss" if several_urls(url) => Kind::Quorum,
            "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel"
            | "rediss+sentinel" => Kind::Redis,
            "sqlite" => Kind::Sqlite,
            "etcd" | "etcds" => Kind::Etcd,
            _ => {
                return Err(Error::Config {
                    url: redact(url),
                    reason: "unknown scheme; expected memory:, sqlite:PATH, redis://, rediss://, \
                             redis+cluster://, redis+sentinel:// or etcd://"
                        .into(),
                });
            }
        };
        let left_out = match kind {
            Kind::Memory => None,
            Kind::Redis if !cfg!(feature = "redis") => Some(("Redis", "redis")),
            Kind::Quorum if !cfg!(feature = "redis") => Some(("Redis", "redis")),
            Kind::Quorum if !cfg!(feature = "quorum") => Some(("quorum", "quorum")),
            Kind::Sqlite if !cfg!(feature = "sqlite") => Some(("SQLite", "sqlite")),
            Kind::Etcd if !cfg!(feature = "etcd") => Some(("etcd", "etcd")),
            Kind::Redis | Kind::Quorum if !cfg!(feature = "tls") && uses_tls(url) => {
                Some(("TLS (rediss://)", "tls"))
            }
            _ => None,
        };
        match left_out {
            Some((store, feature)) => Err(compiled_out(url, store, feature)),
            None => Ok(kind),
        }
    }

    /// Refuses options given for another store than the URL's.
    fn check_options(&self, kind: Kind) -> Result<()> {
        let given: [(bool, Kind, &str); 4] = [
            (self.has_redis(), Kind::Redis, "Redis options"),
            (self.has_quorum(), Kind::Quorum, "quorum options"),
            (self.has_sqlite(), Kind::Sqlite, "SQLite options"),
            (self.has_etcd(), Kind::Etcd, "etcd options"),
        ];
        match given.iter().find(|(on, k, _)| *on && *k != kind) {
            Some((_, _, what)) => Err(Error::Config {
                url: redact(&self.url),
                reason: format!("{what} were given, but this URL names another store"),
            }),
            None => Ok(()),
        }
    }

    fn has_redis(&self) -> bool {
        #[cfg(feature = "redis")]
        return self.redis.is_some();
        #[cfg(not(feature = "redis"))]
        false
    }

    fn has_quorum(&self) -> bool {
        #[cfg(feature = "quorum")]
        return self.quorum.is_some();
        #[cfg(not(feature = "quorum"))]
        false
    }

    fn has_sqlite(&self) -> bool {
        #[cfg(feature = "sqlite")]
        return self.sqlite.is_some();
        #[cfg(not(feature = "sqlite"))]
        false
    }

    fn has_etcd(&self) -> bool {
        #[cfg(feature = "etcd")]
        return self.etcd.is_some();
        #[cfg(not(feature = "etcd"))]
        false
    }
}

/// Whether `url` lists several Redis URLs (a quorum).
fn several_urls(url: &str) -> bool {
    #[cfg(feature = "redis")]
    return crate::redis::split_redis_urls(url).len() > 1;
    #[cfg(not(feature = "redis"))]
    {
        let _ = url;
        false
    }
}

/// Whether a Redis URL (or any URL of a list) asks for TLS.
fn uses_tls(url: &str) -> bool {
    #[cfg(feature = "redis")]
    return crate::redis::split_redis_urls(url)
        .iter()
        .any(|u| u.trim_start().starts_with("rediss"));
    #[cfg(not(feature = "redis"))]
    url.trim_start().starts_with("rediss")
}
