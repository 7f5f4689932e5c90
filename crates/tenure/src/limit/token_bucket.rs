//! Token bucket: `burst` tokens, refilled one per interval `T = period / limit`.
//!
//! The state is the token count and the time of the last refill. Refills are
//! counted in whole tokens and the refill time advances by whole intervals, so
//! no fraction of a token is ever lost or invented, and every number is an
//! integer (exact in Redis's Lua).
//!
//! It admits exactly what [GCRA](super::gcra) admits; choose it when you want
//! the state to read as "tokens left" (e.g. to inspect or adjust it by hand).
//! Its state is two integers in a hash instead of one. Like GCRA it does **not**
//! bound requests per calendar window: a full bucket is spent at once.

use super::decision::{Mode, Timestamp};
use super::policy::Policy;
use super::step::{Eval, RawStep, Step, not_before};

/// Token bucket state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucketState {
    /// Tokens in the bucket at `last`.
    pub tokens: u64,
    /// The instant the last whole token was added (µs on the store's clock);
    /// in the future when units are booked ahead (a reservation, or a quota
    /// lowered below what was taken).
    pub last: u64,
    /// The capacity of the quota that wrote it.
    pub capacity: u64,
    /// The interval (µs per token) of the quota that wrote it.
    pub interval: u64,
}

/// `state` under a quota of `capacity` at `t` µs per unit, at `now`: refilled
/// at its own rate, its backlog (the time until full) rescaled to the new rate
/// as GCRA's is — the units taken stay taken — and read back as tokens; a
/// backlog beyond the new capacity is owed, as time before the next token.
fn convert(s: TokenBucketState, now: u64, capacity: u64, t: u64) -> TokenBucketState {
    if s.capacity == capacity && s.interval == t {
        return s;
    }
    let old_t = s.interval.max(1);
    let now = now.max(s.last);
    let added = (now - s.last) / old_t;
    let (tokens, last) = if s.tokens + added >= s.capacity {
        (s.capacity, now)
    } else {
        (s.tokens + added, s.last + added * old_t)
    };
    let mut backlog = (s.capacity - tokens) * old_t - (now - last);
    if s.interval != t && backlog > 0 {
        backlog = super::gcra::rescale(backlog, old_t, t);
    }
    let tokens = capacity.saturating_sub(backlog.div_ceil(t));
    TokenBucketState {
        tokens,
        last: now + backlog - (capacity - tokens) * t,
        capacity,
        interval: t,
    }
}

/// Tokens and last-refill instant at `now` (refilled), and the instant the
/// state is judged at (later than `now` when the clock went back or units are
/// booked ahead).
fn refilled(policy: &Policy, state: Option<&TokenBucketState>, now: Timestamp) -> (u64, u64, u64) {
    let (t, capacity) = (policy.interval_micros(), policy.capacity());
    let s = match state {
        Some(s) => convert(*s, now.as_micros(), capacity, t),
        None => TokenBucketState {
            tokens: capacity,
            last: now.as_micros(),
            capacity,
            interval: t,
        },
    };
    let (now, _) = not_before(Some(s.last), now);
    let added = (now - s.last) / t;
    if s.tokens + added >= capacity {
        (capacity, now, now)
    } else {
        (s.tokens + added, s.last + added * t, now)
    }
}

/// The state after giving back `cost` units at `now`: units booked ahead are
/// given back first (the next refill moves earlier, not before `now`), then
/// tokens are added up to the capacity. `None` when there is nothing to change.
pub fn refund(
    policy: &Policy,
    state: Option<&TokenBucketState>,
    now: Timestamp,
    cost: u32,
) -> Option<TokenBucketState> {
    let (t, capacity) = (policy.interval_micros(), policy.capacity());
    let mut s = convert(*state?, now.as_micros(), capacity, t);
    let mut cost = u64::from(cost);
    let raw = now.as_micros();
    if s.last > raw {
        let back = cost.min((s.last - raw).div_ceil(t));
        s.last -= back * t;
        cost -= back;
    }
    let (tokens, last, now) = refilled(policy, Some(&s), now);
    let tokens = (tokens + cost).min(capacity);
    let last = if tokens == capacity { now } else { last };
    Some(TokenBucketState {
        tokens,
        last,
        capacity,
        interval: t,
    })
}

/// One token bucket step. Pure.
///
/// ```
/// use std::num::NonZeroU32;
/// use tenure::limit::{token_bucket, Algorithm, Mode, Policy, Quota, Timestamp};
///
/// let q = Quota::per_second(NonZeroU32::new(10).unwrap()).burst(NonZeroU32::new(3).unwrap());
/// let p = Policy::new(q, Algorithm::TokenBucket)?;
/// let t0 = Timestamp::from_micros(5_000_000);
/// let s = token_bucket::step(&p, None, t0, 3, Mode::Consume).next.unwrap().state;
/// assert_eq!(s.tokens, 0);
/// // 100 ms later one token is back:
/// let d = token_bucket::step(&p, Some(&s), Timestamp::from_micros(5_100_000), 1, Mode::Peek).decision;
/// assert!(d.allowed);
/// # Ok::<(), tenure::Error>(())
/// ```
#[inline]
pub fn step(
    policy: &Policy,
    state: Option<&TokenBucketState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Step<TokenBucketState> {
    step_raw(policy, state, now, cost, mode).into()
}

/// [`step`] with the TTL left in microseconds (the in-process store's path).
#[inline]
pub(crate) fn step_raw(
    policy: &Policy,
    state: Option<&TokenBucketState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> RawStep<TokenBucketState> {
    let cost = u64::from(cost);
    let t = policy.interval_micros();
    let capacity = policy.capacity();
    let raw = now.as_micros();
    let (tokens, last, now) = refilled(policy, state, now);
    let skew_us = now - raw;
    // Time until full from `left` tokens, counted from `last`.
    let until_full = |left: u64| {
        if left >= capacity {
            0
        } else {
            last + (capacity - left) * t - now
        }
    };
    let retry_us = if cost > tokens {
        last + (cost - tokens) * t - now
    } else {
        0
    };
    Eval {
        available: tokens,
        retry_us,
        reset_us: until_full(tokens),
        reset_consumed_us: until_full(tokens.saturating_sub(cost)),
        skew_us,
    }
    .finish(policy, cost, mode, || {
        let left = tokens - cost;
        let next = TokenBucketState {
            tokens: left,
            last,
            capacity,
            interval: t,
        };
        (next, until_full(left))
    })
}
