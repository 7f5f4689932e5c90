//! The Redis limit store: one script call per request, on the server's clock.

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use rand::Rng;
use redis::{Script, Value};

use super::conn::RedisConn;
use super::function::{Args, FunctionUse, Library};
use super::lease::RedisStore;
use super::options::RedisOptions;
use crate::error::{Error, Result};
use crate::limit::store::{LimitRequest, LimitStore, check_request};
use crate::limit::{Algorithm, Decision, Mode, Policy, Timestamp};

/// Every algorithm's part, after the shared helpers.
macro_rules! algorithms {
    () => {
        concat!(
            include_str!("scripts/limit_gcra.lua"),
            include_str!("scripts/limit_token_bucket.lua"),
            include_str!("scripts/limit_sliding_log.lua"),
            include_str!("scripts/limit_sliding_window.lua"),
            include_str!("scripts/limit_fixed_window.lua"),
        )
    };
}

/// The limiter as one Redis 7 function library with every algorithm: its
/// helpers are defined once, at load, not on every call.
static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let body = concat!(
        include_str!("scripts/limit_prelude.lua"),
        algorithms!(),
        include_str!("scripts/limit_apply.lua"),
    );
    Library::new("tenure_limit", body, "apply")
});

/// The same code as an `EVALSHA` script, for servers without functions: the
/// shared helpers, the given algorithm parts, the part that applies a request.
macro_rules! limit_script {
    ($($part:expr),+) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/limit_prelude.lua"),
                $($part,)+
                include_str!("scripts/limit_apply.lua"),
                "return apply(KEYS, ARGV)\n",
            ))
        })
    };
}

/// The script of every algorithm, for limiters that combine policies of
/// different algorithms.
static APPLY_ANY: LazyLock<Script> = limit_script!(algorithms!());
// One script per algorithm, for limiters whose policies all use it (the
// common case): a script's whole text runs on every call, so the parts of the
// other algorithms would only cost time.
static APPLY_GCRA: LazyLock<Script> = limit_script!(include_str!("scripts/limit_gcra.lua"));
static APPLY_TOKEN_BUCKET: LazyLock<Script> =
    limit_script!(include_str!("scripts/limit_token_bucket.lua"));
static APPLY_SLIDING_LOG: LazyLock<Script> =
    limit_script!(include_str!("scripts/limit_sliding_log.lua"));
static APPLY_SLIDING_WINDOW: LazyLock<Script> =
    limit_script!(include_str!("scripts/limit_sliding_window.lua"));
static APPLY_FIXED_WINDOW: LazyLock<Script> =
    limit_script!(include_str!("scripts/limit_fixed_window.lua"));

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

/// Limiter state in one Redis master: each request is one `FCALL` of a
/// function (Redis 7; `EVALSHA` of the same Lua as a script on older servers
/// or where an ACL denies functions) that reads the server's clock (`TIME`),
/// so clients with skewed clocks cannot change a decision.
///
/// The function library (`tenure_limit_<hash of its code>`) is loaded by the
/// first call that finds it missing — after a restart without persistence,
/// a `FUNCTION FLUSH`, on a new cluster master (`FUNCTION LOAD` goes to every
/// master) — as scripts are reloaded on `NOSCRIPT`. Another tenure version
/// loads a library of another name beside it.
///
/// Storage per policy and key (default prefix `tenure:`), e.g. for GCRA on
/// key `ip:203.0.113.7`: `tenure:{ip:203.0.113.7}:limit:gcra` — whatever the
/// quota, which a call may change (see [`Policy::storage_key`]).
///
/// | algorithm | type | content |
/// |---|---|---|
/// | GCRA | string | `tat:interval`: theoretical arrival time and emission interval, µs |
/// | token bucket | hash | `tokens`, `last` (µs), `cap` |
/// | sliding log | sorted set | one member `µs:nonce:i` per unit, scored by µs |
/// | sliding window | hash | `start` (µs), `current`, `previous` |
/// | fixed window | hash | `start` (µs), `count` |
///
/// Every key has a TTL after which its state would read as fresh. A key
/// holding another type or values tenure did not write is reported as
/// [`Error::WrongType`], never reset or ignored.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::num::NonZeroU32;
/// use tenure::limit::{Algorithm, Quota};
///
/// // `Coordinator::connect` with a redis:// URL keeps limits in that Redis.
/// let tenure = tenure::Coordinator::connect("redis://127.0.0.1:6379").await?;
/// let limiter = tenure.limiter(Quota::per_second(NonZeroU32::new(100).unwrap()), Algorithm::Gcra);
/// let d = limiter.check("tenant:42").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisLimits {
    conn: RedisConn,
    prefix: Arc<str>,
    functions: FunctionUse,
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
            functions: FunctionUse::default(),
        }
    }

    /// Shares the connection and prefix of a lease backend.
    pub fn from_backend(backend: &RedisStore) -> Self {
        Self::with_conn(backend.conn().clone(), backend.prefix())
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// Writes a request's arguments (see `limit_apply.lua`) after its keys.
fn write_args(out: &mut impl Args, request: &LimitRequest<'_>) {
    match request.now {
        Some(t) => out.push(t.as_micros()),
        None => out.push(""),
    }
    out.push(request.cost);
    match request.mode {
        Mode::Peek => out.push("1"),
        Mode::Refund => out.push("r"),
        Mode::Reserve(max) => out.push(format!("d{}", crate::duration::micros(max))),
        _ => out.push("0"),
    }
    // Only a sliding log names its entries with the nonce.
    if request
        .policies
        .iter()
        .any(|p| p.algorithm() == Algorithm::SlidingLog)
    {
        let nonce: u64 = rand::rng().random();
        out.push(format!("{nonce:016x}"));
    } else {
        out.push("");
    }
    for p in request.policies {
        out.push(p.algorithm().code());
        out.push(p.capacity());
        out.push(p.period_micros());
        out.push(p.interval_micros());
        out.push(if p.records_rejected() { "1" } else { "0" });
    }
}

/// The decisions in a reply: one `[allowed, limit, remaining, reset, retry]`
/// for one policy, a list of them for several; `None` if it is not that.
fn decisions(reply: &Value, policies: usize) -> Option<Vec<Decision>> {
    let Value::Array(items) = reply else {
        return None;
    };
    if policies == 1 && items.len() == 5 {
        return Some(vec![decision(items)?]);
    }
    if items.len() != policies {
        return None;
    }
    items
        .iter()
        .map(|d| match d {
            Value::Array(parts) => decision(parts),
            _ => None,
        })
        .collect()
}

/// One decision from its five integers.
fn decision(parts: &[Value]) -> Option<Decision> {
    let int = |v: &Value| match v {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let [allowed, limit, remaining, reset, retry] = parts else {
        return None;
    };
    let non_negative = |v: &Value| int(v).and_then(|n| u64::try_from(n).ok());
    let allowed = match int(allowed)? {
        0 => false,
        1 => true,
        _ => return None,
    };
    Some(Decision::from_parts(
        allowed,
        non_negative(limit)?,
        non_negative(remaining)?,
        non_negative(reset)?,
        u64::try_from(int(retry)?).ok(),
    ))
}

#[async_trait]
impl LimitStore for RedisLimits {
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        check_request(request.policies, request.cost, request.mode)?;
        let keys: Vec<String> = request
            .policies
            .iter()
            .map(|p| p.storage_key(&self.prefix, request.key))
            .collect();
        let first = keys.first().map_or("", String::as_str);
        let fcall = || {
            let mut fcall = redis::cmd("FCALL");
            fcall.arg(LIBRARY.name()).arg(keys.len()).arg(&keys);
            write_args(&mut fcall, request);
            fcall
        };
        let fallback = || {
            let mut invocation = script_for(request.policies).prepare_invoke();
            for key in &keys {
                invocation.key(key);
            }
            write_args(&mut invocation, request);
            invocation
        };
        let reply: Value = self
            .conn
            .call("limit", first, |link| {
                self.functions.call(link, &LIBRARY, fcall, fallback)
            })
            .await?;
        decisions(&reply, keys.len()).ok_or_else(|| Error::Backend {
            backend: self.conn.display().to_string(),
            op: "limit",
            key: first.to_string(),
            cause: format!("malformed decisions for {} policies: {reply:?}", keys.len()).into(),
        })
    }

    async fn reset(&self, key: &str, policies: &[Policy]) -> Result<()> {
        let keys: Vec<String> = policies
            .iter()
            .map(|p| p.storage_key(&self.prefix, key))
            .collect();
        let first = keys.first().map_or("", String::as_str);
        // One DEL of keys that share a hash tag: one slot, atomic.
        let _: u64 = self
            .conn
            .call("limit reset", first, |mut c| {
                let keys = keys.clone();
                async move { redis::cmd("DEL").arg(keys).query_async(&mut c).await }
            })
            .await?;
        Ok(())
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

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        crate::telemetry::store_kind(self.conn.display())
    }
}
