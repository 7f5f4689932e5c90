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
use super::step::{Eval, Step};

/// GCRA state: the theoretical arrival time, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GcraState {
    /// When the bucket is full again (µs on the store's clock).
    pub tat: u64,
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
pub fn step(
    policy: &Policy,
    state: Option<&GcraState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Step<GcraState> {
    let now = now.as_micros();
    let cost = u64::from(cost);
    let t = policy.interval_micros();
    let span = policy.capacity() * t;
    let tat = state.map_or(now, |s| s.tat).max(now);
    let backlog = tat - now;
    let need = cost * t;
    Eval {
        available: span.saturating_sub(backlog) / t,
        retry_us: (backlog + need).saturating_sub(span),
        reset_us: backlog,
        reset_consumed_us: backlog + need,
        skew_us: 0,
    }
    .finish(policy, cost, mode, || {
        (GcraState { tat: tat + need }, backlog + need)
    })
}
