//! A quota and an algorithm, checked and turned into the integers the
//! algorithms compute with.

use std::time::Duration;

use super::quota::{Algorithm, Quota};
use crate::duration::micros;
use crate::error::{Error, Result};

/// The longest span a policy may cover (window, or burst × interval):
/// 2^50 µs, about 35 years. Together with Unix-epoch microseconds this keeps
/// every number the Lua scripts compute below 2^53, where doubles are exact.
pub const MAX_SPAN: Duration = Duration::from_micros(1 << 50);

/// The largest limit a sliding log accepts: it stores one entry per unit.
pub const MAX_LOG_CAPACITY: u64 = 1_000_000;

/// One rate policy of a limiter: a [`Quota`] counted by an [`Algorithm`], with
/// the derived integers every execution (Rust and Lua) uses.
///
/// ```
/// use std::num::NonZeroU32;
/// use tenure::limit::{Algorithm, Policy, Quota};
///
/// let p = Policy::new(Quota::per_second(NonZeroU32::new(4).unwrap()), Algorithm::Gcra)?;
/// assert_eq!(p.capacity(), 4);
/// assert_eq!(p.interval_micros(), 250_000);
/// // more than one unit per microsecond cannot be represented:
/// let fine = Quota::per_second(NonZeroU32::new(2_000_000).unwrap());
/// assert!(Policy::new(fine, Algorithm::Gcra).is_err());
/// # Ok::<(), tenure::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    quota: Quota,
    algorithm: Algorithm,
    capacity: u64,
    period_us: u64,
    interval_us: u64,
    record_rejected: bool,
    slot: u32,
}

impl Policy {
    /// Checks `quota` for `algorithm`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the period is shorter than one microsecond
    /// per unit (the emission interval would round to zero), when GCRA's or the
    /// token bucket's interval rounded up to a microsecond would slow the rate
    /// by more than [`MAX_ROUNDING_PERCENT`], when the window or
    /// the burst span exceeds [`MAX_SPAN`], or when a sliding log would hold more
    /// than [`MAX_LOG_CAPACITY`] entries.
    pub fn new(quota: Quota, algorithm: Algorithm) -> Result<Self> {
        let period_us = micros(quota.period());
        let limit = u64::from(quota.limit().get());
        if period_us < limit {
            return Err(Error::invalid(
                "rate",
                format!(
                    "{limit} per {:?} is finer than one unit per microsecond",
                    quota.period()
                ),
            ));
        }
        let max_span = micros(MAX_SPAN);
        if period_us > max_span {
            return Err(Error::invalid(
                "window",
                format!(
                    "{:?} is longer than the maximum {MAX_SPAN:?}",
                    quota.period()
                ),
            ));
        }
        // Rounded up, so rounding never admits more than the quota.
        let interval_us = period_us.div_ceil(limit);
        let capacity = if algorithm.uses_burst() {
            check_rounding(quota, period_us, limit, interval_us)?;
            u64::from(quota.burst_size().get())
        } else {
            limit
        };
        if capacity.saturating_mul(interval_us) > max_span {
            return Err(Error::invalid(
                "burst",
                format!(
                    "a burst of {capacity} at {interval_us} µs per unit spans more than {MAX_SPAN:?}"
                ),
            ));
        }
        if algorithm == Algorithm::SlidingLog && capacity > MAX_LOG_CAPACITY {
            return Err(Error::invalid(
                "rate",
                format!(
                    "a sliding log stores one entry per unit; {capacity} is more than {MAX_LOG_CAPACITY}"
                ),
            ));
        }
        Ok(Policy {
            quota,
            algorithm,
            capacity,
            period_us,
            interval_us,
            record_rejected: false,
            slot: 0,
        })
    }

    /// Records refused requests too (sliding log only; ignored by the others).
    /// A client that keeps hammering then stays refused until it slows down,
    /// instead of getting one request through per freed slot. The log keeps at
    /// most `capacity` entries, so memory stays bounded.
    #[must_use]
    pub fn record_rejected(mut self, on: bool) -> Self {
        self.record_rejected = on && self.algorithm == Algorithm::SlidingLog;
        self
    }

    /// Sets which state of the key this policy counts in: the `n`-th policy of
    /// its algorithm in a compound limiter (from 0; [`Limiter`](super::Limiter)
    /// numbers them in the order they are added). Two policies of one request
    /// must differ in algorithm or slot.
    #[must_use]
    pub fn slot(mut self, n: u32) -> Self {
        self.slot = n;
        self
    }

    /// This policy with another quota, counting in the same state: the
    /// per-call quota of [`Limiter::check_with`](super::Limiter::check_with).
    ///
    /// # Errors
    /// As [`Policy::new`].
    pub fn with_quota(&self, quota: Quota) -> Result<Self> {
        Ok(Policy::new(quota, self.algorithm)?
            .record_rejected(self.record_rejected)
            .slot(self.slot))
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Units that can be taken at once: the burst (GCRA, token bucket) or the
    /// per-window limit.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The period in microseconds.
    pub fn period_micros(&self) -> u64 {
        self.period_us
    }

    /// Microseconds per unit (the emission interval), rounded up.
    pub fn interval_micros(&self) -> u64 {
        self.interval_us
    }

    /// Whether refused requests are recorded (see [`record_rejected`](Self::record_rejected)).
    pub fn records_rejected(&self) -> bool {
        self.record_rejected
    }

    /// The slot (see [`slot`](Self::slot)).
    pub fn slot_index(&self) -> u32 {
        self.slot
    }

    /// What tells this policy's state apart from another policy's of the same
    /// user key: exactly the parts [`storage_key`](Self::storage_key) names.
    pub(crate) fn tag(&self) -> PolicyTag {
        PolicyTag {
            algorithm: self.algorithm,
            slot: self.slot,
        }
    }

    /// The storage key of this policy for the user key `key`, e.g.
    /// `tenure:{ip:203.0.113.7}:limit:gcra` (slot 0) or
    /// `tenure:{ip:203.0.113.7}:limit:gcra:1` (slot 1).
    ///
    /// All policies of one user key share the hash tag `{key}`, so a compound
    /// limiter's keys live in one Redis Cluster slot; a key starting with `}`
    /// or `\` gets a `\` in front inside the braces, as lease keys do (`{}`
    /// would be an empty hash tag and scatter the policies). The quota is
    /// **not** part of the name: a key keeps its state when its quota changes,
    /// and the algorithms convert it (see `docs/limiters.md`).
    pub fn storage_key(&self, prefix: &str, key: &str) -> String {
        let tag = crate::key::hash_tag(key);
        match self.slot {
            0 => format!("{prefix}{{{tag}}}:limit:{}", self.algorithm),
            n => format!("{prefix}{{{tag}}}:limit:{}:{n}", self.algorithm),
        }
    }
}

/// The most that rounding the emission interval up to a whole microsecond may
/// slow a GCRA or token-bucket rate, in percent.
pub const MAX_ROUNDING_PERCENT: u64 = 1;

/// Refuses a quota whose emission interval, rounded up to a microsecond,
/// would admit more than [`MAX_ROUNDING_PERCENT`] fewer units per period than
/// the quota says (600 000 per second: 2 µs per unit, 500 000 a second).
fn check_rounding(quota: Quota, period_us: u64, limit: u64, interval_us: u64) -> Result<()> {
    let slower_by = interval_us * limit - period_us;
    if slower_by.saturating_mul(100) <= period_us.saturating_mul(MAX_ROUNDING_PERCENT) {
        return Ok(());
    }
    Err(Error::invalid(
        "rate",
        format!(
            "{limit} per {:?} needs {:.2} µs per unit; counted in whole microseconds \
             ({interval_us} µs) it would admit only {} per {:?}: use a window algorithm \
             (fixed-window, sliding-window, sliding-log), or a rate whose interval is a whole \
             number of microseconds",
            quota.period(),
            period_us as f64 / limit as f64,
            period_us / interval_us,
            quota.period(),
        ),
    ))
}

/// The identity of a policy's state, for in-process tables that index by
/// policy and user key instead of a formatted storage key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PolicyTag {
    algorithm: Algorithm,
    slot: u32,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn quota(limit: u32, period: Duration) -> Quota {
        Quota::new(limit, period).unwrap()
    }

    #[test]
    fn a_rate_that_rounding_would_slow_by_more_than_a_percent_is_refused() {
        let day = Duration::from_secs(86_400);
        for (limit, period) in [
            (600_000, Duration::from_secs(1)),
            (999_999, Duration::from_secs(1)),
            (150, Duration::from_millis(1)),
            (u32::MAX, day),
        ] {
            for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
                let e = Policy::new(quota(limit, period), algorithm).unwrap_err();
                assert!(
                    matches!(e, Error::InvalidArgument { what: "rate", .. }),
                    "{limit}/{period:?} {algorithm}: {e}"
                );
                assert!(e.to_string().contains("window algorithm"), "{e}");
            }
            // Window algorithms count units, not intervals: nothing rounds.
            for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
                Policy::new(quota(limit, period), algorithm).unwrap();
            }
        }
    }

    #[test]
    fn rates_whose_rounding_costs_at_most_a_percent_are_kept() {
        for (limit, period, interval) in [
            (1_000_000, Duration::from_secs(1), 1),
            (3, Duration::from_secs(1), 333_334),
            (10_000, Duration::from_secs(1), 100),
            (9_950, Duration::from_secs(1), 101),
        ] {
            let p = Policy::new(quota(limit, period), Algorithm::Gcra).unwrap();
            assert_eq!(p.interval_micros(), interval, "{limit}/{period:?}");
        }
    }
}
