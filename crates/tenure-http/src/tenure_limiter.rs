//! [`RateLimiter`] for tenure's [`Limiter`].

use std::time::Duration;

use tenure::Error;
use tenure::limit::Limiter;

use crate::limiter::{BoxFuture, Decision, LimiterError, QuotaPolicy, RateLimiter};

/// Sorts tenure's errors into what the middleware does with them: a bad key
/// is the client's (`400`), bad limiter settings are ours (`500`), everything
/// else about the store (unreachable, timeout, unusable stored data) falls to
/// the failure policy. Out of line: the error path only.
#[cold]
#[inline(never)]
fn classify(e: Error) -> LimiterError {
    match e {
        Error::InvalidKey { .. } => LimiterError::InvalidKey(e.to_string()),
        Error::InvalidArgument { .. }
        | Error::Config { .. }
        | Error::CostExceedsCapacity { .. } => LimiterError::Misconfigured(e.to_string()),
        _ => LimiterError::Unavailable(e.to_string()),
    }
}

/// tenure's limiter — on Redis, SQLite or in-process memory — as the
/// middleware's store. `RateLimit-Policy` advertises the first policy of a
/// compound limiter.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::num::NonZeroU32;
/// use tenure::limit::{Algorithm, Quota};
/// use tenure_http::RateLimiter;
///
/// let limiter = tenure::Coordinator::memory()
///     .limiter(Quota::per_minute(NonZeroU32::new(2).unwrap()), Algorithm::SlidingLog);
/// assert_eq!(limiter.policy().unwrap().limit, 2);
/// assert!(RateLimiter::check(&limiter, "ip:192.0.2.1", 1).await.unwrap().allowed);
/// # }
/// ```
impl RateLimiter for Limiter {
    fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>> {
        let limiter = self.clone();
        let key = key.to_owned();
        Box::pin(async move { limiter.check_n(&key, cost).await.map_err(classify) })
    }

    /// [`Limiter::check_local`]: an in-process limiter decides at once.
    fn check_now(&self, key: &str, cost: u32) -> Option<Result<Decision, LimiterError>> {
        match self.check_local(key, cost)? {
            Ok(decision) => Some(Ok(decision)),
            Err(e) => Some(Err(classify(e))),
        }
    }

    fn policy(&self) -> Option<QuotaPolicy> {
        let first = self.policies().ok()?.first()?.quota();
        Some(QuotaPolicy {
            limit: u64::from(first.limit().get()),
            window: first.period().max(Duration::from_secs(1)),
        })
    }

    /// [`Limiter::shadow`]: counted as `would_refuse` by tenure's telemetry.
    fn shadowed(&self) -> Option<Box<dyn RateLimiter>> {
        Some(Box::new(self.clone().shadow(true)))
    }

    /// [`Limiter::refund`]: never above a policy's capacity.
    fn refund(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>> {
        let limiter = self.clone();
        let key = key.to_owned();
        Box::pin(async move { limiter.refund(&key, cost).await.map_err(classify) })
    }
}
