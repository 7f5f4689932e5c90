//! GCRA, the generic cell rate algorithm (as in redis-cell and go-redis/redis_rate).
//!
//! The state is one timestamp, the *theoretical arrival time* (TAT): when the
//! bucket would be full again if no more requests came. Each unit pushes the TAT
//! one emission interval `T = period / limit` further; a request is admitted when
//! the TAT it would produce is at most `burst × T` ahead of now.
//!
//! Use it by default: the smallest state of all (one integer), a smooth rate, and
//! bursts up to the burst size. It does **not** give "at most `limit` in any
//! calendar window": after a quiet spell a full burst is admitted at once, and
//! then one unit every `T`.

use super::decision::{Mode, Timestamp};
use super::policy::Policy;
use super::step::{Eval, RawStep, Step};

/// GCRA state: the theoretical arrival time, in µs, and the emission interval
/// it was counted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GcraState {
    /// When the bucket is full again (µs on the store's clock).
    pub tat: u64,
    /// The emission interval (µs per unit) of the quota that wrote it.
    pub interval: u64,
}

/// The longest backlog a quota change can leave (2^50 µs, see
/// [`MAX_SPAN`](super::MAX_SPAN)): keeps every stored time below 2^53.
const MAX_BACKLOG: u64 = 1 << 50;

/// The theoretical arrival time of `state` under the interval `t`: a backlog
/// counted at another interval is rescaled (the units taken stay taken, priced
/// at the new rate), rounded up. The arithmetic is in doubles, in the same
/// order as the Lua twin, so both give the same bits.
pub(crate) fn arrival(state: &GcraState, now: u64, t: u64) -> u64 {
    if state.interval == t || state.tat <= now {
        return state.tat;
    }
    now + rescale(state.tat - now, state.interval, t)
}

/// A backlog of `backlog` µs at `old` µs per unit, at `t` µs per unit: the
/// same units, rounded up, at most [`MAX_BACKLOG`].
pub(crate) fn rescale(backlog: u64, old: u64, t: u64) -> u64 {
    let scaled = backlog as f64 * t as f64 / old as f64;
    scaled.ceil().min(MAX_BACKLOG as f64) as u64
}

/// The state after giving back `cost` units at `now` (never beyond a full
/// bucket); `None` when there is nothing to change.
pub fn refund(
    policy: &Policy,
    state: Option<&GcraState>,
    now: Timestamp,
    cost: u32,
) -> Option<GcraState> {
    let (now, t) = (now.as_micros(), policy.interval_micros());
    let tat = arrival(state?, now, t);
    Some(GcraState {
        tat: tat.saturating_sub(u64::from(cost) * t).max(now),
        interval: t,
    })
}

/// The whole intervals left in the span once `backlog` is taken: the
/// capacity when there is no backlog (a key not in debt: most keys, most of
/// the time), without a division, the slowest instruction of a step.
#[inline]
fn available(capacity: u64, span: u64, backlog: u64, t: u64) -> u64 {
    match backlog {
        0 => capacity,
        _ => span.saturating_sub(backlog) / t,
    }
}

/// One GCRA step. Pure: the same inputs always give the same outputs.
///
/// ```
/// use std::num::NonZeroU32;
/// use tenure::limit::{gcra, Algorithm, Mode, Policy, Quota, Timestamp};
///
/// let p = Policy::new(Quota::per_second(NonZeroU32::new(2).unwrap()), Algorithm::Gcra)?;
/// let t0 = Timestamp::from_micros(1_000_000);
/// let a = gcra::step(&p, None, t0, 2, Mode::Consume);  // the whole burst
/// assert!(a.decision.allowed);
/// let state = a.next.expect("consumed").state;
/// let b = gcra::step(&p, Some(&state), t0, 1, Mode::Consume);
/// assert!(!b.decision.allowed);
/// assert_eq!(b.decision.retry_after.unwrap().as_millis(), 500); // one interval
/// # Ok::<(), tenure::Error>(())
/// ```
#[inline]
pub fn step(
    policy: &Policy,
    state: Option<&GcraState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Step<GcraState> {
    step_raw(policy, state, now, cost, mode).into()
}

/// [`step`] with the TTL left in microseconds (the in-process store's path).
#[inline]
pub(crate) fn step_raw(
    policy: &Policy,
    state: Option<&GcraState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> RawStep<GcraState> {
    let now = now.as_micros();
    let cost = u64::from(cost);
    let t = policy.interval_micros();
    let span = policy.capacity() * t;
    let tat = state.map_or(now, |s| arrival(s, now, t)).max(now);
    let backlog = tat - now;
    let need = cost * t;
    Eval {
        available: available(policy.capacity(), span, backlog, t),
        retry_us: (backlog + need).saturating_sub(span),
        reset_us: backlog,
        reset_consumed_us: backlog + need,
        skew_us: 0,
    }
    .finish(policy, cost, mode, || {
        let next = GcraState {
            tat: tat + need,
            interval: t,
        };
        (next, backlog + need)
    })
}
