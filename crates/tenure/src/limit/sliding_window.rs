//! Sliding window counter: the count of the current aligned window plus the
//! previous window's count weighted by how much of it the sliding window still
//! covers (the approach Cloudflare described).
//!
//! Estimate at `elapsed` µs into the current window:
//! `previous × ((period − elapsed) / period) + current`; a request of `cost` is
//! admitted when `floor(limit − estimate) ≥ cost`. The weighting is computed in
//! IEEE doubles with the same operations in Rust and Lua, so both give the same
//! bits.
//!
//! Choose it for "about `limit` per sliding period" with constant memory (three
//! integers). It is an **approximation**: it assumes the previous window's
//! requests were spread evenly. It never admits more than `limit` within one
//! aligned window, and over any sliding period it admits at most about
//! `limit` (bursty traffic at the end of a window can let a sliding period see
//! somewhat more). Use the [sliding log](super::sliding_log) when it must be exact.

use super::decision::{Mode, Timestamp};
use super::policy::Policy;
use super::step::{Eval, RawStep, Step, align};

/// Sliding window counter state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindowState {
    /// Start of the current window (µs on the store's clock).
    pub start: u64,
    /// Units admitted in the current window.
    pub current: u64,
    /// Units admitted in the window before it.
    pub previous: u64,
}

/// Units available at `elapsed` µs into a window, given the counts.
fn available(capacity: u64, period: u64, previous: u64, current: u64, elapsed: u64) -> u64 {
    let weight = (period - elapsed) as f64 / period as f64;
    let estimate = previous as f64 * weight + current as f64;
    let left = (capacity as f64 - estimate).floor();
    if left <= 0.0 { 0 } else { left as u64 }
}

/// The first `elapsed` in `[from, period]` at which `cost` units are available,
/// or `None` when not within this window.
fn first_fit(policy: &Policy, previous: u64, current: u64, cost: u64, from: u64) -> Option<u64> {
    let (capacity, period) = (policy.capacity(), policy.period_micros());
    if current + cost > capacity {
        return None;
    }
    let room = capacity - current - cost;
    // Solve previous × (period − e) / period ≤ room for e, then step over the
    // rounding of the division (at most a few µs).
    let mut e = if previous == 0 {
        0.0
    } else {
        (period as f64 - room as f64 * period as f64 / previous as f64).ceil()
    };
    if e < from as f64 {
        e = from as f64;
    }
    let e = e as u64;
    (e..e + 4)
        .take_while(|&e| e < period)
        .find(|&e| available(capacity, period, previous, current, e) >= cost)
}

/// The counts `(current, previous)` of the window starting at `start`: the
/// stored ones when the stored window began in it (the same window, or a
/// shorter one of an earlier quota — counts are kept across a quota change),
/// the stored current count as the previous one when it is the window before.
fn counted(state: Option<&SlidingWindowState>, start: u64, period: u64) -> (u64, u64) {
    match state {
        Some(s) if s.start >= start => (s.current, s.previous),
        Some(s) if s.start + period == start => (0, s.current),
        _ => (0, 0),
    }
}

/// The state after giving back `cost` units at `now`: from the current
/// window's count first, then the previous one's (never below zero); `None`
/// when there is nothing to change.
pub fn refund(
    policy: &Policy,
    state: Option<&SlidingWindowState>,
    now: Timestamp,
    cost: u32,
) -> Option<SlidingWindowState> {
    let (_, start, _) = align(policy, Some(state?.start), now);
    let (current, previous) = counted(state, start, policy.period_micros());
    let cost = u64::from(cost);
    let from_current = current.min(cost);
    let from_previous = previous.min(cost - from_current);
    Some(SlidingWindowState {
        start,
        current: current - from_current,
        previous: previous - from_previous,
    })
}

/// One sliding window counter step. Pure.
///
/// ```
/// use std::num::NonZeroU32;
/// use tenure::limit::{sliding_window, Algorithm, Mode, Policy, Quota, Timestamp};
///
/// let p = Policy::new(Quota::per_second(NonZeroU32::new(10).unwrap()), Algorithm::SlidingWindow)?;
/// let s = sliding_window::step(&p, None, Timestamp::from_micros(1_000_000), 10, Mode::Consume)
///     .next.unwrap().state;
/// // a quarter into the next window, 75 % of the previous 10 still count:
/// let d = sliding_window::step(&p, Some(&s), Timestamp::from_micros(2_250_000), 1, Mode::Peek).decision;
/// assert_eq!(d.remaining, 2);
/// # Ok::<(), tenure::Error>(())
/// ```
#[inline]
pub fn step(
    policy: &Policy,
    state: Option<&SlidingWindowState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Step<SlidingWindowState> {
    step_raw(policy, state, now, cost, mode).into()
}

/// [`step`] with the TTL left in microseconds (the in-process store's path).
#[inline]
pub(crate) fn step_raw(
    policy: &Policy,
    state: Option<&SlidingWindowState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> RawStep<SlidingWindowState> {
    let cost = u64::from(cost);
    let period = policy.period_micros();
    let capacity = policy.capacity();
    let (now, start, skew_us) = align(policy, state.map(|s| s.start), now);
    let (current, previous) = counted(state, start, period);
    let elapsed = now - start;
    let to_end = period - elapsed;
    let retry_us = match first_fit(policy, previous, current, cost, elapsed) {
        Some(e) => e.max(elapsed + 1) - elapsed,
        // In the next window the current count becomes the previous one.
        None => to_end + first_fit(policy, current, 0, cost, 0).unwrap_or(period),
    };
    let reset = |current: u64| {
        if current > 0 {
            to_end + period
        } else if previous > 0 {
            to_end
        } else {
            0
        }
    };
    Eval {
        available: available(capacity, period, previous, current, elapsed),
        retry_us,
        reset_us: reset(current),
        reset_consumed_us: reset(current + cost),
        skew_us,
    }
    .finish(policy, cost, mode, || {
        let next = SlidingWindowState {
            start,
            current: current + cost,
            previous,
        };
        (next, to_end + period)
    })
}
