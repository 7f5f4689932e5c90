//! Fixed window: one counter per window aligned to the clock's origin (the Unix
//! epoch on Redis), reset when the window changes.
//!
//! The usual `INCR` then `EXPIRE` (two commands: a crash between them leaves a
//! counter that never expires) is here one script that checks, counts and sets
//! the TTL together, and refused requests are not counted.
//!
//! Choose it for quotas that users read as calendar periods ("1000 per day,
//! resetting at midnight UTC") and for the cheapest possible check. It does
//! **not** bound any sliding window: a client can take `limit` at the end of one
//! window and `limit` again at the start of the next — up to **2 × limit within
//! one period** across a boundary (a test asserts exactly that).

use super::decision::{Mode, Timestamp};
use super::policy::Policy;
use super::step::{Eval, RawStep, Step, align};

/// Fixed window state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindowState {
    /// Start of the window counted (µs on the store's clock).
    pub start: u64,
    /// Units admitted in that window.
    pub count: u64,
}

/// The units counted in the window starting at `start`: the stored count when
/// the stored window began in it (the same window, or a shorter one of an
/// earlier quota — counts are kept across a quota change), else none.
fn counted(state: Option<&FixedWindowState>, start: u64) -> u64 {
    match state {
        Some(s) if s.start >= start => s.count,
        _ => 0,
    }
}

/// The state after giving back `cost` units of the current window at `now`
/// (never below zero); `None` when there is nothing to change.
pub fn refund(
    policy: &Policy,
    state: Option<&FixedWindowState>,
    now: Timestamp,
    cost: u32,
) -> Option<FixedWindowState> {
    let (_, start, _) = align(policy, Some(state?.start), now);
    let count = counted(state, start);
    Some(FixedWindowState {
        start,
        count: count - count.min(u64::from(cost)),
    })
}

/// One fixed window step. Pure.
///
/// ```
/// use std::num::NonZeroU32;
/// use tenure::limit::{fixed_window, Algorithm, Mode, Policy, Quota, Timestamp};
///
/// let p = Policy::new(Quota::per_second(NonZeroU32::new(1).unwrap()), Algorithm::FixedWindow)?;
/// let late = Timestamp::from_micros(1_999_999); // last µs of window [1 s, 2 s)
/// let s = fixed_window::step(&p, None, late, 1, Mode::Consume).next.unwrap().state;
/// let next_window = Timestamp::from_micros(2_000_000);
/// assert!(fixed_window::step(&p, Some(&s), next_window, 1, Mode::Consume).decision.allowed);
/// # Ok::<(), tenure::Error>(())
/// ```
#[inline]
pub fn step(
    policy: &Policy,
    state: Option<&FixedWindowState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Step<FixedWindowState> {
    step_raw(policy, state, now, cost, mode).into()
}

/// [`step`] with the TTL left in microseconds (the in-process store's path).
#[inline]
pub(crate) fn step_raw(
    policy: &Policy,
    state: Option<&FixedWindowState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> RawStep<FixedWindowState> {
    let cost = u64::from(cost);
    let period = policy.period_micros();
    let capacity = policy.capacity();
    let (now, start, skew_us) = align(policy, state.map(|s| s.start), now);
    let count = counted(state, start);
    let end = start + period - now;
    Eval {
        available: capacity - count.min(capacity),
        retry_us: end,
        reset_us: if count > 0 { end } else { 0 },
        reset_consumed_us: end,
        skew_us,
    }
    .finish(policy, cost, mode, || {
        (
            FixedWindowState {
                start,
                count: count + cost,
            },
            end,
        )
    })
}
