//! The boundary between the middleware and a rate limiter.
//!
//! The middleware asks a [`RateLimiter`] one question per request — "may
//! `key` spend `cost` units now?" — and turns the answer, tenure's
//! [`Decision`], into headers or a `429`. tenure's `Limiter` implements the
//! trait (Redis, SQLite or in-process); anything else that can answer the
//! question can too, building its answers with [`Decision::allowed`] and
//! [`Decision::refused`].
//!
//! Names: this is a *limiter* (it decides), not a store (tenure's `LimitStore`
//! keeps limiter state and is one level below: a `Limiter` runs over a
//! `LimitStore`, and the middleware runs over a `RateLimiter`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use tenure::limit::Decision;

/// A boxed, sendable future, as returned by [`RateLimiter::check`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The quota a limiter enforces, advertised in the `RateLimit-Policy` header.
///
/// ```
/// use std::time::Duration;
/// let p = tenure_http::QuotaPolicy { limit: 60, window: Duration::from_secs(60) };
/// assert_eq!(p.limit, 60);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaPolicy {
    /// Units allowed per window.
    pub limit: u64,
    /// The window length.
    pub window: Duration,
}

/// Why a limiter could not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimiterError {
    /// The store behind the limiter is down, slow or failing: the middleware applies its
    /// [`FailurePolicy`](crate::FailurePolicy).
    Unavailable(String),
    /// The key derived from the request is unusable (too long, control
    /// characters): the client gets `400`, never a free pass.
    InvalidKey(String),
    /// The limiter itself is misconfigured (e.g. a cost above the burst): `500`.
    Misconfigured(String),
}

impl fmt::Display for LimiterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimiterError::Unavailable(m) => write!(f, "rate-limit store unavailable: {m}"),
            LimiterError::InvalidKey(m) => write!(f, "unusable rate-limit key: {m}"),
            LimiterError::Misconfigured(m) => write!(f, "rate limiter misconfigured: {m}"),
        }
    }
}

impl std::error::Error for LimiterError {}

/// A rate limiter the middleware can ask.
///
/// Implementations return a `'static` future (clone a cheap handle into it), so
/// the middleware can bound it with its time budget and drop it when the budget
/// runs out. Dropping the future must be harmless.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use tenure_http::{BoxFuture, QuotaPolicy, RateLimiter, LimiterError, Decision};
///
/// /// Allows `limit` requests per key, ever (a toy, for illustration).
/// #[derive(Default)]
/// struct Counter { used: Arc<Mutex<std::collections::HashMap<String, u64>>> }
///
/// impl RateLimiter for Counter {
///     fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>> {
///         let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
///         let n = used.entry(key.to_owned()).or_default();
///         let v = if *n + u64::from(cost) <= 3 {
///             *n += u64::from(cost);
///             Decision::allowed(3, 3 - *n, Duration::from_secs(60))
///         } else {
///             Decision::refused(3, Duration::from_secs(60), Duration::from_secs(60))
///         };
///         Box::pin(async move { Ok(v) })
///     }
///     fn policy(&self) -> Option<QuotaPolicy> {
///         Some(QuotaPolicy { limit: 3, window: Duration::from_secs(60) })
///     }
/// }
/// # let _ = Counter::default();
/// ```
pub trait RateLimiter: Send + Sync + 'static {
    /// Spends `cost` units of `key`'s quota if they are available.
    fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>>;

    /// The answer of [`check`](Self::check) at once, for a limiter that can
    /// decide without waiting (in process, nobody watching): the middleware
    /// then needs no future for it. `None`, the default, means "call
    /// `check`".
    fn check_now(&self, key: &str, cost: u32) -> Option<Result<Decision, LimiterError>> {
        let _ = (key, cost);
        None
    }

    /// The quota advertised in `RateLimit-Policy`; `None` leaves the header out.
    fn policy(&self) -> Option<QuotaPolicy>;

    /// This limiter in shadow mode, for [`RateLimitLayer::shadow`](crate::RateLimitLayer::shadow):
    /// one that decides, consumes and counts as this one does but answers a
    /// refusal as an admission with `would_refuse` set. `None` (the default)
    /// lets the middleware turn refusals into admissions itself.
    fn shadowed(&self) -> Option<Box<dyn RateLimiter>> {
        None
    }

    /// Gives `cost` units of `key` back, for a cost known after the response
    /// ([`RateLimitLayer::cost_after`](crate::RateLimitLayer::cost_after)).
    /// The default cannot: [`LimiterError::Misconfigured`].
    fn refund(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>> {
        let _ = (key, cost);
        Box::pin(async {
            Err(LimiterError::Misconfigured(
                "this limiter cannot refund".into(),
            ))
        })
    }
}

impl<T: RateLimiter + ?Sized> RateLimiter for std::sync::Arc<T> {
    fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>> {
        (**self).check(key, cost)
    }

    fn check_now(&self, key: &str, cost: u32) -> Option<Result<Decision, LimiterError>> {
        (**self).check_now(key, cost)
    }

    fn policy(&self) -> Option<QuotaPolicy> {
        (**self).policy()
    }

    fn shadowed(&self) -> Option<Box<dyn RateLimiter>> {
        (**self).shadowed()
    }

    fn refund(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>> {
        (**self).refund(key, cost)
    }
}
