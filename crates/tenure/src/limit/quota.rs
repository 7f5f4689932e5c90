//! What a limiter allows ([`Quota`]) and how it counts ([`Algorithm`]).

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

/// A rate: `limit` units per `period`, with an optional burst size.
///
/// The burst is the capacity of the token bucket and of GCRA: how many units may
/// be taken at once after a quiet spell. It defaults to `limit`. The window
/// algorithms (fixed window, sliding window, sliding log) count at most `limit`
/// units per window and ignore the burst.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use tenure::limit::Quota;
///
/// const SIXTY: NonZeroU32 = NonZeroU32::new(60).unwrap();
/// const TEN: NonZeroU32 = NonZeroU32::new(10).unwrap();
/// let q = Quota::per_minute(SIXTY).burst(TEN); // one per second, 10 at once
/// assert_eq!(q.period(), Duration::from_secs(60));
/// assert_eq!(q.burst_size().get(), 10);
///
/// assert!(Quota::new(0, Duration::from_secs(1)).is_err()); // zero rate
/// assert!(Quota::new(5, Duration::ZERO).is_err());         // zero window
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub struct Quota {
    limit: NonZeroU32,
    period: Duration,
    burst: Option<NonZeroU32>,
}

impl Quota {
    const fn with_period(limit: NonZeroU32, period: Duration) -> Self {
        Quota {
            limit,
            period,
            burst: None,
        }
    }

    /// `limit` units per second.
    pub const fn per_second(limit: NonZeroU32) -> Self {
        Self::with_period(limit, Duration::from_secs(1))
    }

    /// `limit` units per minute.
    pub const fn per_minute(limit: NonZeroU32) -> Self {
        Self::with_period(limit, Duration::from_secs(60))
    }

    /// `limit` units per hour.
    pub const fn per_hour(limit: NonZeroU32) -> Self {
        Self::with_period(limit, Duration::from_secs(3600))
    }

    /// `limit` units per day (86 400 s; windows are aligned to the Unix epoch, so a
    /// day window starts at 00:00 UTC).
    pub const fn per_day(limit: NonZeroU32) -> Self {
        Self::with_period(limit, Duration::from_secs(86_400))
    }

    /// `limit` units per `period`, from plain numbers (e.g. configuration).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero limit or a zero period. Rates that
    /// are too fine or spans that are too long are refused when the quota is used
    /// (see [`Policy::new`](super::Policy::new)).
    pub fn new(limit: u32, period: Duration) -> Result<Self> {
        let limit = NonZeroU32::new(limit)
            .ok_or_else(|| Error::invalid("rate", "the limit must be at least 1 per period"))?;
        if period.is_zero() {
            return Err(Error::invalid(
                "window",
                "the period must be longer than zero",
            ));
        }
        Ok(Self::with_period(limit, period))
    }

    /// Sets the burst size (bucket capacity) of GCRA and the token bucket.
    pub const fn burst(mut self, burst: NonZeroU32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Units allowed per period.
    pub const fn limit(&self) -> NonZeroU32 {
        self.limit
    }

    /// The period (window length).
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The burst size: the one set with [`burst`](Self::burst), else the limit.
    pub const fn burst_size(&self) -> NonZeroU32 {
        match self.burst {
            Some(b) => b,
            None => self.limit,
        }
    }
}

/// How a limiter counts. All algorithms share one [`Decision`](super::Decision);
/// see the [module docs](super) for what each guarantees and costs.
///
/// ```
/// use tenure::limit::Algorithm;
/// let a: Algorithm = "sliding-log".parse()?;
/// assert_eq!(a, Algorithm::SlidingLog);
/// assert_eq!(a.to_string(), "sliding-log");
/// assert!("leaky".parse::<Algorithm>().is_err());
/// # Ok::<(), tenure::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm: one timestamp per key, smooth rate with bursts.
    Gcra,
    /// Token bucket: tokens and a refill time per key; same behaviour as GCRA.
    TokenBucket,
    /// Sliding log: one entry per admitted unit; exact in every window.
    SlidingLog,
    /// Sliding window counter: two counters, weighted; approximate, tiny.
    SlidingWindow,
    /// Fixed window: one counter per aligned window; up to 2× across a boundary.
    FixedWindow,
}

impl Algorithm {
    /// Every algorithm, in a stable order.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
    ];

    /// The name used by [`FromStr`], [`Display`](fmt::Display) and storage keys.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::SlidingWindow => "sliding-window",
            Algorithm::FixedWindow => "fixed-window",
        }
    }

    /// The number the Lua script dispatches on.
    pub(crate) const fn code(self) -> u8 {
        match self {
            Algorithm::Gcra => 1,
            Algorithm::TokenBucket => 2,
            Algorithm::SlidingLog => 3,
            Algorithm::SlidingWindow => 4,
            Algorithm::FixedWindow => 5,
        }
    }

    /// Whether the [burst](Quota::burst) is the capacity (GCRA, token bucket), as
    /// opposed to the per-window limit.
    pub const fn uses_burst(self) -> bool {
        matches!(self, Algorithm::Gcra | Algorithm::TokenBucket)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "algorithm",
                    format!(
                        "{s:?} is not one of gcra, token-bucket, sliding-log, sliding-window, fixed-window"
                    ),
                )
            })
    }
}
