//! The Redis limit store: one script call per request, on the server's clock.

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use rand::Rng;
use redis::Script;

use super::conn::RedisConn;
use super::lease::RedisStore;
use super::options::RedisOptions;
use crate::error::{Error, Result};
use crate::limit::store::{LimitRequest, LimitStore};
use crate::limit::{Algorithm, Decision, Mode, Policy, Timestamp};

/// A rate-limit script: the shared helpers, the given algorithm parts, then
/// the part that applies a request to all of a limiter's policies.
macro_rules! limit_script {
    ($($part:literal),+) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/limit_prelude.lua"),
                $(include_str!($part),)+
                include_str!("scripts/limit_apply.lua"),
            ))
        })
    };
}

/// The script of every algorithm, for limiters that combine policies of
/// different algorithms.
static APPLY_ANY: LazyLock<Script> = limit_script!(
    "scripts/limit_gcra.lua",
    "scripts/limit_token_bucket.lua",
    "scripts/limit_sliding_log.lua",
    "scripts/limit_sliding_window.lua",
    "scripts/limit_fixed_window.lua"
);
// One script per algorithm, for limiters whose policies all use it (the
// common case): a script's whole text runs on every call, so the parts of the
// other algorithms would only cost time.
static APPLY_GCRA: LazyLock<Script> = limit_script!("scripts/limit_gcra.lua");
static APPLY_TOKEN_BUCKET: LazyLock<Script> = limit_script!("scripts/limit_token_bucket.lua");
static APPLY_SLIDING_LOG: LazyLock<Script> = limit_script!("scripts/limit_sliding_log.lua");
static APPLY_SLIDING_WINDOW: LazyLock<Script> = limit_script!("scripts/limit_sliding_window.lua");
static APPLY_FIXED_WINDOW: LazyLock<Script> = limit_script!("scripts/limit_fixed_window.lua");

/// The smallest script that has every algorithm of `policies`.
fn script_for(policies: &[Policy]) -> &'static Script {
    let Some(first) = policies.first().map(Policy::algorithm) else {
        return &APPLY_ANY;
    };
    if policies.iter().any(|p| p.algorithm() != first) {
        return &APPLY_ANY;
    }
    match first {
        Algorithm::Gcra => &APPLY_GCRA,
        Algorithm::TokenBucket => &APPLY_TOKEN_BUCKET,
        Algorithm::SlidingLog => &APPLY_SLIDING_LOG,
        Algorithm::SlidingWindow => &APPLY_SLIDING_WINDOW,
        Algorithm::FixedWindow => &APPLY_FIXED_WINDOW,
    }
}

/// Limiter state in one Redis master: each request is one `EVALSHA` of a
/// script that reads the server's clock (`TIME`), so clients with skewed
/// clocks cannot change a decision.
///
/// Storage per policy and key (default prefix `warden:`), e.g. for GCRA at
/// 60 per minute with a burst of 10 on key `ip:203.0.113.7`:
/// `warden:{ip:203.0.113.7}:limit:gcra:60/60000000:10`.
///
/// | algorithm | type | content |
/// |---|---|---|
/// | GCRA | string | theoretical arrival time, µs |
/// | token bucket | hash | `tokens`, `last` (µs) |
/// | sliding log | sorted set | one member `µs:nonce:i` per unit, scored by µs |
/// | sliding window | hash | `start` (µs), `current`, `previous` |
/// | fixed window | hash | `start` (µs), `count` |
///
/// Every key has a TTL after which its state would read as fresh. A key
/// holding another type or values warden did not write is reported as
/// [`Error::WrongType`], never reset or ignored.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> warden::Result<()> {
/// use std::num::NonZeroU32;
/// use warden::limit::{Algorithm, Quota};
///
/// // `Warden::connect` with a redis:// URL keeps limits in that Redis.
/// let warden = warden::Warden::connect("redis://127.0.0.1:6379").await?;
/// let limiter = warden.limiter(Quota::per_second(NonZeroU32::new(100).unwrap()), Algorithm::Gcra);
/// let d = limiter.check("tenant:42").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisLimits {
    conn: RedisConn,
    prefix: Arc<str>,
}

impl RedisLimits {
    /// Connects to `url` (`redis://` or `rediss://`) and checks it answers.
    ///
    /// # Errors
    /// Bad URL, unreachable server, timeout.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        let conn = RedisConn::connect(url, &options).await?;
        Ok(Self::with_conn(conn, &options.prefix))
    }

    /// Uses an existing connection and key prefix.
    pub(crate) fn with_conn(conn: RedisConn, prefix: &str) -> Self {
        RedisLimits {
            conn,
            prefix: prefix.into(),
        }
    }

    /// Shares the connection and prefix of a lease backend.
    pub fn from_backend(backend: &RedisStore) -> Self {
        Self::with_conn(backend.conn().clone(), backend.prefix())
    }

    /// The connection.
    pub fn conn(&self) -> &RedisConn {
        &self.conn
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

#[async_trait]
impl LimitStore for RedisLimits {
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        let keys: Vec<String> = request
            .policies
            .iter()
            .map(|p| p.storage_key(&self.prefix, request.key))
            .collect();
        let first = keys.first().cloned().unwrap_or_default();
        let mut invocation = script_for(request.policies).prepare_invoke();
        for key in &keys {
            invocation.key(key);
        }
        let nonce: u64 = rand::rng().random();
        invocation
            .arg(
                request
                    .now
                    .map_or(String::new(), |t| t.as_micros().to_string()),
            )
            .arg(request.cost)
            .arg(if request.mode == Mode::Peek { "1" } else { "0" })
            .arg(format!("{nonce:016x}"));
        for p in request.policies {
            invocation
                .arg(p.algorithm().code())
                .arg(p.capacity())
                .arg(p.period_micros())
                .arg(p.interval_micros())
                .arg(if p.records_rejected() { "1" } else { "0" });
        }
        let raw: Vec<Vec<i64>> = self.conn.script("limit", &first, &invocation).await?;
        let malformed = |detail: String| Error::Backend {
            backend: self.conn.display().to_string(),
            op: "limit",
            key: first.clone(),
            cause: detail.into(),
        };
        if raw.len() != keys.len() {
            return Err(malformed(format!(
                "{} decisions for {} policies",
                raw.len(),
                keys.len()
            )));
        }
        raw.into_iter()
            .map(|d| match d.as_slice() {
                &[allowed, limit, remaining, reset, retry]
                    if allowed >= 0 && limit >= 0 && remaining >= 0 && reset >= 0 =>
                {
                    Ok(Decision::from_parts(
                        allowed == 1,
                        limit.unsigned_abs(),
                        remaining.unsigned_abs(),
                        reset.unsigned_abs(),
                        u64::try_from(retry).ok(),
                    ))
                }
                other => Err(malformed(format!("malformed decision {other:?}"))),
            })
            .collect()
    }

    async fn now(&self) -> Result<Timestamp> {
        let (secs, micros): (u64, u64) = self
            .conn
            .call("time", "", |mut c| async move {
                redis::cmd("TIME").query_async(&mut c).await
            })
            .await?;
        Ok(Timestamp::from_micros(
            secs.saturating_mul(1_000_000).saturating_add(micros),
        ))
    }

    fn describe(&self) -> String {
        self.conn.display().to_string()
    }
}
