//! The one place where durations become integers for storage: whole
//! milliseconds or microseconds, saturating instead of wrapping or failing,
//! as `u64` (Redis arguments, limiter arithmetic) or `i64` (SQLite columns).
//!
//! Every store converts through these helpers, so a huge TTL means "as long as
//! the integer can say" the same way everywhere. Crate-private: use these
//! rather than writing `u64::try_from(d.as_millis())` in a store (the Redis
//! store's own `millis` is the same conversion and can move here).

use std::time::Duration;

/// The longest any wait, timeout or polling interval lasts: a longer one a
/// user passes (up to `Duration::MAX`) means this much, so that no deadline
/// computed from it overflows a clock. The same bound as the longest TTL.
pub(crate) const LONGEST: Duration = crate::lease::MAX_TTL;

/// `d`, at most [`LONGEST`].
pub(crate) fn capped(d: Duration) -> Duration {
    d.min(LONGEST)
}

/// Whole milliseconds of `d`, saturating at `u64::MAX`.
#[allow(dead_code)] // for the Redis store's lease TTLs, which still convert locally
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whole microseconds of `d`, saturating at `u64::MAX`. In `u64` arithmetic
/// rather than through `as_micros`' `u128`: the in-process limiter converts
/// its clock with it on every decision.
#[inline]
pub(crate) fn micros(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(u64::from(d.subsec_micros())))
        .unwrap_or(u64::MAX)
}

/// Whole milliseconds of `d` as a SQL integer, saturating at `i64::MAX`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn millis_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Whole microseconds of `d` as a SQL integer, saturating at `i64::MAX`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn micros_i64(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// An unsigned count (e.g. microseconds of a timestamp) as a SQL integer,
/// saturating at `i64::MAX`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate_instead_of_wrapping() {
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(micros(Duration::MAX), u64::MAX);
        assert_eq!(millis_i64(Duration::MAX), i64::MAX);
        assert_eq!(micros_i64(Duration::MAX), i64::MAX);
        assert_eq!(to_i64(u64::MAX), i64::MAX);
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(micros_i64(Duration::from_nanos(2_500)), 2);
    }

    #[test]
    fn micros_agrees_with_the_u128_conversion_at_the_edges() {
        let edge = u64::MAX / 1_000_000;
        for d in [
            Duration::ZERO,
            Duration::from_nanos(999),
            Duration::new(1, 999_999_999),
            Duration::new(edge, 551_615_000),
            Duration::new(edge, 551_615_999),
            Duration::new(edge, 551_616_000),
            Duration::new(edge + 1, 0),
            Duration::MAX,
        ] {
            let wide = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
            assert_eq!(micros(d), wide, "{d:?}");
        }
    }
}
