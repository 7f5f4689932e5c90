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
use super::step::{Eval, Step, not_before};

/// Token bucket state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucketState {
    /// Tokens in the bucket at `last`.
    pub tokens: u64,
    /// The instant the last whole token was added (µs on the store's clock).
    pub last: u64,
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
pub fn step(
    policy: &Policy,
    state: Option<&TokenBucketState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Step<TokenBucketState> {
    let cost = u64::from(cost);
    let t = policy.interval_micros();
    let capacity = policy.capacity();
    let fresh = TokenBucketState {
        tokens: capacity,
        last: now.as_micros(),
    };
    let s = state.copied().unwrap_or(fresh);
    let (now, skew_us) = not_before(Some(s.last), now);
    let added = (now - s.last) / t;
    let (tokens, last) = if s.tokens + added >= capacity {
        (capacity, now)
    } else {
        (s.tokens + added, s.last + added * t)
    };
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
        (TokenBucketState { tokens: left, last }, until_full(left))
    })
}
