//! Sliding log: one timestamp per admitted unit; a request is admitted when the
//! units logged in the last `period` plus its cost stay within `limit`.
//!
//! The usual sorted-set recipe has three bugs this one avoids: members that are
//! the millisecond timestamp collapse requests within one millisecond into one
//! member and under-count them (members here are `timestamp:nonce:index`, unique
//! per request and unit); adding refused requests too keeps a client over the
//! limit blocked forever while it retries (they are recorded only when
//! [asked for](super::Policy::record_rejected), and then the log is capped at
//! `limit` entries); and four commands in a pipeline are not atomic (here they
//! are one step).
//!
//! Choose it when the limit must hold exactly in **every** window of length
//! `period` (a test checks every window of a long random run). It costs one
//! entry per unit (measured in the README: tens of bytes each), so keep limits
//! small (it refuses more than [`MAX_LOG_CAPACITY`](super::MAX_LOG_CAPACITY)).

use super::decision::{Mode, Timestamp};
use super::policy::Policy;
use super::step::{Eval, RawStep, Step};

/// Sliding log state: the timestamps of logged units, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SlidingLogState {
    /// One timestamp (µs on the store's clock) per unit, sorted.
    pub entries: Vec<u64>,
}

/// The state after giving back `cost` units at `now`: the newest `cost`
/// entries of the window go (entries booked ahead first); `None` when there
/// is nothing to change.
pub fn refund(
    policy: &Policy,
    state: Option<&SlidingLogState>,
    now: Timestamp,
    cost: u32,
) -> Option<SlidingLogState> {
    let (now, period) = (now.as_micros(), policy.period_micros());
    let entries = &state?.entries;
    let live = &entries[entries.partition_point(|&ts| ts + period <= now)..];
    let keep = live
        .len()
        .saturating_sub(usize::try_from(cost).unwrap_or(usize::MAX));
    Some(SlidingLogState {
        entries: live[..keep].to_vec(),
    })
}

/// One sliding log step. Pure.
///
/// ```
/// use std::num::NonZeroU32;
/// use tenure::limit::{sliding_log, Algorithm, Mode, Policy, Quota, Timestamp};
///
/// let p = Policy::new(Quota::per_second(NonZeroU32::new(2).unwrap()), Algorithm::SlidingLog)?;
/// let s = sliding_log::step(&p, None, Timestamp::from_micros(10_000_000), 2, Mode::Consume)
///     .next.unwrap().state;
/// let d = sliding_log::step(&p, Some(&s), Timestamp::from_micros(10_999_999), 1, Mode::Consume).decision;
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after.unwrap().as_micros(), 1); // the first entry leaves at 11 s
/// # Ok::<(), tenure::Error>(())
/// ```
#[inline]
pub fn step(
    policy: &Policy,
    state: Option<&SlidingLogState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Step<SlidingLogState> {
    step_raw(policy, state, now, cost, mode).into()
}

/// [`step`] with the TTL left in microseconds (the in-process store's path).
#[inline]
pub(crate) fn step_raw(
    policy: &Policy,
    state: Option<&SlidingLogState>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> RawStep<SlidingLogState> {
    let cost = u64::from(cost);
    let now = now.as_micros();
    let (period, capacity) = (policy.period_micros(), policy.capacity());
    let entries: &[u64] = state.map_or(&[], |s| &s.entries);
    // Entries at or before `now - period` have left the window.
    let live = &entries[entries.partition_point(|&ts| ts + period <= now)..];
    let count = live.len() as u64;
    let available = capacity - count.min(capacity);
    // To admit `cost`, the oldest `count + cost - capacity` entries must leave.
    let retry_us = (count + cost)
        .checked_sub(capacity + 1)
        .and_then(|i| live.get(usize::try_from(i).unwrap_or(usize::MAX)))
        .map_or(0, |&ts| ts + period - now);
    let until_empty = |newest: Option<u64>| newest.map_or(0, |ts| ts + period - now);
    let newest = live.last().copied();
    Eval {
        available,
        retry_us,
        reset_us: until_empty(newest),
        reset_consumed_us: until_empty(Some(newest.map_or(now, |n| n.max(now)))),
        skew_us: 0,
    }
    .finish(policy, cost, mode, || {
        let mut next = live.to_vec();
        let at = next.partition_point(|&ts| ts <= now);
        let added = usize::try_from(cost).unwrap_or(0);
        next.splice(at..at, std::iter::repeat_n(now, added));
        // Recorded refusals may overfill the log; the newest `capacity` entries
        // decide every future request, so the rest can go.
        let excess = next
            .len()
            .saturating_sub(usize::try_from(capacity).unwrap_or(usize::MAX));
        next.drain(..excess);
        let ttl = until_empty(next.last().copied());
        (SlidingLogState { entries: next }, ttl)
    })
}
