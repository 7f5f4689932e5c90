//! A fenced resource in Redis.

use std::sync::LazyLock;

use redis::Script;

use super::Fence;
use crate::error::{Error, Result};
use crate::key::validate_key;
use crate::redis_conn::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, RedisConn};

static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/fenced_write.lua")));

/// Fences above this are not exact in Lua's doubles.
const MAX_EXACT_FENCE: u64 = 1 << 53;

/// The result of a fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite {
    /// The token was newer than any accepted before: the value was stored.
    Applied,
    /// A write with this or a newer token was accepted before: nothing changed.
    Rejected {
        /// The token of the last accepted write.
        current: Fence,
    },
}

/// Values in Redis that only accept writes with increasing fencing tokens.
///
/// Each resource is a hash `{prefix}resource:{name}` with the fields `fence` (the
/// last accepted token) and `value`. One script compares and writes atomically.
///
/// ```no_run
/// # async fn demo(guard: warden::LeaseGuard) -> warden::Result<()> {
/// use warden::fence::{FencedWrite, RedisFencedStore};
///
/// let store = RedisFencedStore::connect("redis://127.0.0.1:6379").await?;
/// match store.write("balance:42", guard.fence(), "100").await? {
///     FencedWrite::Applied => {}
///     FencedWrite::Rejected { current } => {
///         // A newer holder (fence `current`) wrote first: our lease is gone.
///     }
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisFencedStore {
    conn: RedisConn,
    prefix: String,
}

impl RedisFencedStore {
    /// Connects to `url` with the default prefix `warden:`.
    pub async fn connect(url: &str) -> Result<Self> {
        let conn = RedisConn::connect(url, DEFAULT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT).await?;
        Ok(Self::with_conn(conn, "warden:"))
    }

    /// Uses an existing connection (e.g. [`RedisBackend::conn`](crate::backend::RedisBackend::conn)).
    pub fn with_conn(conn: RedisConn, prefix: impl Into<String>) -> Self {
        RedisFencedStore {
            conn,
            prefix: prefix.into(),
        }
    }

    /// The Redis key of a resource.
    pub fn storage_key(&self, resource: &str) -> String {
        format!("{}resource:{resource}", self.prefix)
    }

    /// Stores `value` if `fence` is greater than the last accepted token.
    pub async fn write(
        &self,
        resource: &str,
        fence: Fence,
        value: impl AsRef<[u8]>,
    ) -> Result<FencedWrite> {
        validate_key(resource)?;
        if fence.get() == 0 || fence.get() > MAX_EXACT_FENCE {
            return Err(Error::invalid(
                "fence",
                format!("{fence} is outside 1..=2^53, the exact range of the store"),
            ));
        }
        let key = self.storage_key(resource);
        let mut script = FENCED_WRITE.key(&key);
        script.arg(fence.get()).arg(value.as_ref());
        let (applied, current): (i64, u64) =
            self.conn.script("fenced write", &key, &script).await?;
        Ok(if applied == 1 {
            FencedWrite::Applied
        } else {
            FencedWrite::Rejected {
                current: Fence::new(current),
            }
        })
    }

    /// Reads the last accepted token and value.
    pub async fn read(&self, resource: &str) -> Result<Option<(Fence, Vec<u8>)>> {
        validate_key(resource)?;
        let key = self.storage_key(resource);
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = self
            .conn
            .call("fenced read", &key, |mut c| {
                let key = &key;
                async move {
                    redis::cmd("HMGET")
                        .arg(key)
                        .arg("fence")
                        .arg("value")
                        .query_async(&mut c)
                        .await
                }
            })
            .await?;
        Ok(fence.zip(value).map(|(f, v)| (Fence::new(f), v)))
    }
}
