//! The boundary between the middleware and a rate limiter.
//!
//! The middleware asks a [`RateLimitStore`] one question per request — "may
//! `key` spend `cost` units now?" — and turns the [`Verdict`] into headers or a
//! `429`. warden's `Limiter` implements the trait (Redis, SQLite or in-process);
//! anything else that can answer the question can too.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed, sendable future, as returned by [`RateLimitStore::check`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The answer of a limiter for one request: the same for every algorithm.
///
/// ```
/// use std::time::Duration;
/// use warden_http::Verdict;
///
/// let v = Verdict::allowed(60, 59, Duration::from_secs(1));
/// assert!(v.allowed && v.retry_after.is_none());
/// let r = Verdict::refused(60, Duration::from_secs(41), Duration::from_secs(2));
/// assert_eq!((r.allowed, r.remaining), (false, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The quota: units per window (or the burst size of a bucket).
    pub limit: u64,
    /// Units left after this request.
    pub remaining: u64,
    /// Time until the key is back to its full quota.
    pub reset_after: Duration,
    /// For a refusal: how long until the same request would be admitted.
    pub retry_after: Option<Duration>,
}

impl Verdict {
    /// An admission with `remaining` units left of `limit`.
    pub const fn allowed(limit: u64, remaining: u64, reset_after: Duration) -> Self {
        Verdict {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: None,
        }
    }

    /// A refusal: nothing left, retry after `retry_after`.
    pub const fn refused(limit: u64, reset_after: Duration, retry_after: Duration) -> Self {
        Verdict {
            allowed: false,
            limit,
            remaining: 0,
            reset_after,
            retry_after: Some(retry_after),
        }
    }
}

/// The quota a store enforces, advertised in the `RateLimit-Policy` header.
///
/// ```
/// use std::time::Duration;
/// let p = warden_http::QuotaPolicy { limit: 60, window: Duration::from_secs(60) };
/// assert_eq!(p.limit, 60);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaPolicy {
    /// Units allowed per window.
    pub limit: u64,
    /// The window length.
    pub window: Duration,
}

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The store is down, slow or failing: the middleware applies its
    /// [`FailurePolicy`](crate::FailurePolicy).
    Unavailable(String),
    /// The key derived from the request is unusable (too long, control
    /// characters): the client gets `400`, never a free pass.
    InvalidKey(String),
    /// The limiter itself is misconfigured (e.g. a cost above the burst): `500`.
    Misconfigured(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(m) => write!(f, "rate-limit store unavailable: {m}"),
            StoreError::InvalidKey(m) => write!(f, "unusable rate-limit key: {m}"),
            StoreError::Misconfigured(m) => write!(f, "rate limiter misconfigured: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// A rate limiter the middleware can ask.
///
/// Implementations return a `'static` future (clone a cheap handle into it), so
/// the middleware can bound it with its time budget and drop it when the budget
/// runs out. Dropping the future must be harmless.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use warden_http::{BoxFuture, QuotaPolicy, RateLimitStore, StoreError, Verdict};
///
/// /// Allows `limit` requests per key, ever (a toy, for illustration).
/// #[derive(Default)]
/// struct Counter { used: Arc<Mutex<std::collections::HashMap<String, u64>>> }
///
/// impl RateLimitStore for Counter {
///     fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Verdict, StoreError>> {
///         let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
///         let n = used.entry(key.to_owned()).or_default();
///         let v = if *n + u64::from(cost) <= 3 {
///             *n += u64::from(cost);
///             Verdict::allowed(3, 3 - *n, Duration::from_secs(60))
///         } else {
///             Verdict::refused(3, Duration::from_secs(60), Duration::from_secs(60))
///         };
///         Box::pin(async move { Ok(v) })
///     }
///     fn policy(&self) -> Option<QuotaPolicy> {
///         Some(QuotaPolicy { limit: 3, window: Duration::from_secs(60) })
///     }
/// }
/// # let _ = Counter::default();
/// ```
pub trait RateLimitStore: Send + Sync + 'static {
    /// Spends `cost` units of `key`'s quota if they are available.
    fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Verdict, StoreError>>;

    /// The quota advertised in `RateLimit-Policy`; `None` leaves the header out.
    fn policy(&self) -> Option<QuotaPolicy>;
}

impl<T: RateLimitStore + ?Sized> RateLimitStore for std::sync::Arc<T> {
    fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Verdict, StoreError>> {
        (**self).check(key, cost)
    }

    fn policy(&self) -> Option<QuotaPolicy> {
        (**self).policy()
    }
}
