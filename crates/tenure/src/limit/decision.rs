//! The one result type of every limiter, and the instants it is computed at.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::duration::micros;

/// An instant on a limit store's clock, in whole microseconds.
///
/// Redis stores use the server's `TIME` (microseconds since the Unix epoch); the
/// in-process store uses a monotonic clock that starts at the wall-clock time of
/// its creation. Microseconds since 1970 stay below 2^53 until the year 2255, so
/// they are exact in Lua's doubles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The instant `micros` microseconds after the clock's origin.
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros)
    }

    /// Microseconds since the clock's origin.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// The wall clock now (microseconds since the Unix epoch).
    pub fn now_wall() -> Self {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(micros(since))
    }

    /// This instant plus `d` (saturating).
    #[must_use]
    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(micros(d)))
    }
}

/// Whether a request takes units, only looks, gives units back or books them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// Take the units when allowed.
    Consume,
    /// Compute the decision without changing anything.
    Peek,
    /// Give `cost` units back (never beyond the capacity). The decision is
    /// what a peek of one unit sees afterwards.
    Refund,
    /// Take the units now if allowed, else book them at the first instant
    /// they are, if that is at most this long from now. An admitted decision
    /// then carries the wait in `retry_after` (see
    /// [`Limiter::reserve`](super::Limiter::reserve)).
    Reserve(Duration),
}

/// The answer of a limiter. Being refused is a decision with `allowed == false`,
/// never an error.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::num::NonZeroU32;
/// use tenure::limit::{Algorithm, Quota};
///
/// let limiter = tenure::Coordinator::memory()
///     .limiter(Quota::per_minute(NonZeroU32::new(2).unwrap()), Algorithm::SlidingLog);
/// let d = limiter.check("user:7").await?;
/// assert!(d.allowed);
/// assert_eq!((d.limit, d.remaining), (2, 1));
/// limiter.check("user:7").await?;
/// let refused = limiter.check("user:7").await?;
/// assert!(!refused.allowed);
/// let wait = refused.retry_after.expect("a refusal says when to retry");
/// assert!(wait.as_secs() <= 60);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub struct Decision {
    /// Whether the request is admitted (its units were taken, unless peeking).
    pub allowed: bool,
    /// The capacity: the burst size (GCRA, token bucket) or units per window.
    pub limit: u64,
    /// Units still available after this request (for a peek or a refusal: now).
    pub remaining: u64,
    /// Time until the key is back to its full, untouched state (`0` when it is).
    pub reset_after: Duration,
    /// For a refusal: how long until the same request would be admitted, if no
    /// other request came in between. `None` when allowed.
    pub retry_after: Option<Duration>,
}

impl Decision {
    /// An admission with `remaining` units left of `limit`: for limiters
    /// outside tenure that answer in its terms (tenure-http's `RateLimiter`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tenure::limit::Decision;
    ///
    /// let d = Decision::allowed(60, 59, Duration::from_secs(1));
    /// assert!(d.allowed && d.retry_after.is_none());
    /// let r = Decision::refused(60, Duration::from_secs(41), Duration::from_secs(2));
    /// assert_eq!((r.allowed, r.remaining), (false, 0));
    /// ```
    pub const fn allowed(limit: u64, remaining: u64, reset_after: Duration) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: None,
        }
    }

    /// A refusal with nothing left: the same request is admitted after
    /// `retry_after`, the key is back to its full quota after `reset_after`.
    pub const fn refused(limit: u64, reset_after: Duration, retry_after: Duration) -> Self {
        Decision {
            allowed: false,
            limit,
            remaining: 0,
            reset_after,
            retry_after: Some(retry_after),
        }
    }

    /// A decision from raw microsecond values.
    pub(crate) fn from_parts(
        allowed: bool,
        limit: u64,
        remaining: u64,
        reset_us: u64,
        retry_us: Option<u64>,
    ) -> Self {
        Decision {
            allowed,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_us),
            retry_after: retry_us.map(Duration::from_micros),
        }
    }

    /// Combines the decisions of the policies of a compound limiter into the one
    /// the caller sees: when all allow, the one with the fewest units left; when
    /// some refuse, the refusal with the longest wait.
    pub fn combine(decisions: &[Decision]) -> Option<Decision> {
        let refusals = decisions.iter().filter(|d| !d.allowed);
        let worst_refusal = refusals.max_by_key(|d| (d.retry_after, d.reset_after));
        worst_refusal
            .or_else(|| {
                decisions
                    .iter()
                    .min_by_key(|d| (d.remaining, std::cmp::Reverse(d.reset_after)))
            })
            .copied()
    }
}
