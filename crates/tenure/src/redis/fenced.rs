//! A fenced resource in Redis: [`RedisFencedStore`], a hash per resource
//! (named by [`keys`](super::keys)) written by one compare-and-set script.

use std::sync::LazyLock;

use redis::Script;

use super::conn::RedisConn;
use super::keys::Keys;
use super::options::RedisOptions;
use crate::error::{Error, Result};
use crate::fence::{Fence, FenceStamp, FencedWrite};
use crate::key::validate_key;

static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fenced_write.lua")));

/// Fences above this are not exact in Lua's doubles.
const MAX_EXACT_FENCE: u64 = 1 << 53;

/// Values in Redis that only accept writes with increasing fencing tokens.
///
/// Each resource is a hash `{prefix}resource:{name}` with the fields `fence` (the
/// last accepted token), `acquisition` (the id of the acquisition that wrote
/// it, if it named one) and `value`. One script compares and writes
/// atomically: a write is applied when its fence is **greater** than the
/// stored one, or **equal with the same acquisition id** (the same holder: a
/// retry is safe); otherwise it is rejected. Pass
/// [`LeaseGuard::stamp`](crate::LeaseGuard::stamp) to make retries idempotent;
/// a bare [`Fence`] names no acquisition, so its retry is rejected.
///
/// The resource is one key, so it needs no hash tag in a Redis Cluster. Like the
/// lease keys it must not be evicted: [`connect`](Self::connect) refuses a server
/// whose `maxmemory-policy` may evict (see [`RedisOptions::allow_eviction`]).
///
/// ```no_run
/// # async fn demo(guard: tenure::LeaseGuard) -> tenure::Result<()> {
/// use tenure::fence::FencedWrite;
/// use tenure::redis::RedisFencedStore;
///
/// let store = RedisFencedStore::connect("redis://127.0.0.1:6379").await?;
/// match store.write("balance:42", guard.stamp(), "100").await? {
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
    keys: Keys,
}

impl RedisFencedStore {
    /// Connects to `url` with default [`RedisOptions`]: the prefix
    /// [`DEFAULT_PREFIX`](crate::redis::DEFAULT_PREFIX) (the one leases use) and a refusal of servers whose
    /// `maxmemory-policy` may evict keys — an evicted resource would forget its
    /// last fence and accept a stale holder's write.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to `url` with the prefix, time budgets and eviction policy check
    /// of `options` (replica acknowledgements do not apply to the store).
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self> {
        let conn = RedisConn::connect_checked(url, &options, options.allow_eviction).await?;
        Ok(Self::with_conn(conn, options.prefix))
    }

    /// The fenced resource on the connection, prefix and options of a lease
    /// store (its eviction policy was checked when it connected); what
    /// [`Coordinator::fenced_store`](crate::Coordinator::fenced_store) returns.
    pub fn from_backend(backend: &super::RedisStore) -> Self {
        Self::with_conn(backend.conn().clone(), backend.prefix())
    }

    /// Uses an existing connection, as it is (no policy check), e.g. the one of a
    /// lease store.
    pub(crate) fn with_conn(conn: RedisConn, prefix: impl Into<String>) -> Self {
        RedisFencedStore {
            conn,
            keys: Keys::new(prefix.into()),
        }
    }

    /// The Redis key of a resource.
    pub fn storage_key(&self, resource: &str) -> String {
        self.keys.resource(resource)
    }

    /// Stores `value` if the stamp's fence is newer than the last accepted
    /// one, or equal to it from the same acquisition (the same holder writing
    /// again, e.g. a retry after a lost reply).
    pub async fn write(
        &self,
        resource: &str,
        stamp: impl Into<FenceStamp>,
        value: impl AsRef<[u8]>,
    ) -> Result<FencedWrite> {
        validate_key(resource)?;
        let stamp = stamp.into();
        let fence = stamp.fence();
        let acquisition = stamp.acquisition().map(|a| a.to_string());
        if fence.get() == 0 || fence.get() > MAX_EXACT_FENCE {
            return Err(Error::invalid(
                "fence",
                format!("{fence} is outside 1..=2^53, the exact range of the store"),
            ));
        }
        let key = self.storage_key(resource);
        let mut script = FENCED_WRITE.key(&key);
        script
            .arg(fence.get())
            .arg(value.as_ref())
            .arg(acquisition.as_deref().unwrap_or(""));
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
