//! The store boundary: per-key state, one step of an algorithm, and the atomic
//! application of several policies at once.
//!
//! Every algorithm is a pure function `(state, now, policy, cost, mode) →
//! (decision, next state)`. The in-process store runs these functions under a
//! mutex, a SQL store can run them inside a transaction, and the Redis store runs
//! the same arithmetic in Lua (`scripts/limit_*.lua`); a differential test feeds
//! both the same sequences and compares every decision.

use std::time::Duration;

use super::decision::{Decision, Mode, Timestamp};
use super::policy::Policy;
use super::quota::Algorithm;
use super::{fixed_window, gcra, sliding_log, sliding_window, token_bucket};
use crate::duration::micros;
use crate::error::{Error, Result};

/// The largest integer any stored field may hold: beyond it Lua's doubles are
/// no longer exact, so such a value can only be corruption.
pub const MAX_STORED: u64 = (1 << 53) - 1;

/// The state of one policy for one key. Small and fixed-size except for the
/// sliding log; [`encode`](Self::encode) / [`decode`](Self::decode) round-trip it
/// to bytes for stores that keep blobs (SQLite).
///
/// ```
/// use std::num::NonZeroU32;
/// use tenure::limit::store::{step, State};
/// use tenure::limit::{Algorithm, Mode, Policy, Quota, Timestamp};
///
/// let p = Policy::new(Quota::per_minute(NonZeroU32::new(3).unwrap()), Algorithm::TokenBucket)?;
/// let s = step(&p, "k", None, Timestamp::from_micros(42), 1, Mode::Consume)?
///     .next.expect("consumed").state;
/// assert_eq!(s.to_ints(), vec![2, 42, 3, 20_000_000]); // 2 of 3 tokens left at 42 µs, one per 20 s
/// let blob = s.encode();
/// assert_eq!(State::decode(&blob, "k")?, s);
/// assert!(State::decode(&blob[..5], "k").is_err()); // truncated: an error, not a guess
/// # Ok::<(), tenure::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// See [`gcra`].
    Gcra(gcra::GcraState),
    /// See [`token_bucket`].
    TokenBucket(token_bucket::TokenBucketState),
    /// See [`sliding_log`].
    SlidingLog(sliding_log::SlidingLogState),
    /// See [`sliding_window`].
    SlidingWindow(sliding_window::SlidingWindowState),
    /// See [`fixed_window`].
    FixedWindow(fixed_window::FixedWindowState),
}

impl State {
    /// The algorithm this state belongs to.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            State::Gcra(_) => Algorithm::Gcra,
            State::TokenBucket(_) => Algorithm::TokenBucket,
            State::SlidingLog(_) => Algorithm::SlidingLog,
            State::SlidingWindow(_) => Algorithm::SlidingWindow,
            State::FixedWindow(_) => Algorithm::FixedWindow,
        }
    }

    /// The state as integers (timestamps in µs, counts), in a fixed order per
    /// algorithm: GCRA `[tat, interval]`, token bucket `[tokens, last,
    /// capacity, interval]`, fixed window
    /// `[start, count]`, sliding window `[start, current, previous]`, sliding
    /// log: the entries' timestamps, oldest first.
    pub fn to_ints(&self) -> Vec<u64> {
        match self {
            State::Gcra(s) => vec![s.tat, s.interval],
            State::TokenBucket(s) => vec![s.tokens, s.last, s.capacity, s.interval],
            State::SlidingLog(s) => s.entries.clone(),
            State::SlidingWindow(s) => vec![s.start, s.current, s.previous],
            State::FixedWindow(s) => vec![s.start, s.count],
        }
    }

    /// Rebuilds a state from [`to_ints`](Self::to_ints).
    ///
    /// # Errors
    /// [`Error::WrongType`] (naming `key`) when the number of integers does not
    /// fit the algorithm, a value exceeds [`MAX_STORED`], or log entries are not
    /// sorted.
    pub fn from_ints(algorithm: Algorithm, ints: &[u64], key: &str) -> Result<Self> {
        let corrupt = |detail: String| Error::WrongType {
            key: key.to_string(),
            detail,
        };
        if let Some(v) = ints.iter().find(|v| **v > MAX_STORED) {
            return Err(corrupt(format!("{algorithm} state holds {v}, beyond 2^53")));
        }
        let state = match (algorithm, ints) {
            (Algorithm::Gcra, &[tat, interval]) => State::Gcra(gcra::GcraState { tat, interval }),
            (Algorithm::TokenBucket, &[tokens, last, capacity, interval]) => {
                State::TokenBucket(token_bucket::TokenBucketState {
                    tokens,
                    last,
                    capacity,
                    interval,
                })
            }
            (Algorithm::FixedWindow, &[start, count]) => {
                State::FixedWindow(fixed_window::FixedWindowState { start, count })
            }
            (Algorithm::SlidingWindow, &[start, current, previous]) => {
                State::SlidingWindow(sliding_window::SlidingWindowState {
                    start,
                    current,
                    previous,
                })
            }
            (Algorithm::SlidingLog, entries) => {
                if !entries.is_sorted() {
                    return Err(corrupt("sliding log entries are not sorted".into()));
                }
                State::SlidingLog(sliding_log::SlidingLogState {
                    entries: entries.to_vec(),
                })
            }
            (a, ints) => {
                return Err(corrupt(format!(
                    "{} integers do not make a {a} state",
                    ints.len()
                )));
            }
        };
        Ok(state)
    }

    /// The state as bytes: one algorithm byte, then little-endian `u64`s.
    pub fn encode(&self) -> Vec<u8> {
        let ints = self.to_ints();
        let mut out = Vec::with_capacity(1 + 8 * ints.len());
        out.push(self.algorithm().code());
        for v in ints {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Rebuilds a state from [`encode`](Self::encode)'s bytes.
    ///
    /// # Errors
    /// [`Error::WrongType`] (naming `key`) for bytes that are not such a state.
    pub fn decode(bytes: &[u8], key: &str) -> Result<Self> {
        let corrupt = |detail: &str| Error::WrongType {
            key: key.to_string(),
            detail: detail.to_string(),
        };
        let (&code, rest) = bytes
            .split_first()
            .ok_or_else(|| corrupt("empty limiter state"))?;
        let algorithm = Algorithm::ALL
            .into_iter()
            .find(|a| a.code() == code)
            .ok_or_else(|| corrupt("unknown limiter state tag"))?;
        if rest.len() % 8 != 0 {
            return Err(corrupt("limiter state is not a sequence of u64"));
        }
        let ints: Vec<u64> = rest
            .chunks_exact(8)
            .map(|c| {
                let mut word = [0u8; 8];
                word.copy_from_slice(c);
                u64::from_le_bytes(word)
            })
            .collect();
        Self::from_ints(algorithm, &ints, key)
    }
}

/// A state to store, and for how long it matters: after `ttl` it is equivalent
/// to no state at all, so the store may drop it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Next<S> {
    /// The new state.
    pub state: S,
    /// How long to keep it.
    pub ttl: Duration,
}

/// The outcome of one step of one algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<S> {
    /// The decision for this policy alone.
    pub decision: Decision,
    /// The state to write when the request is committed: the consumed state
    /// when allowed, the recorded state when refused and
    /// [recording](Policy::record_rejected) is on, `None` otherwise and when
    /// peeking.
    pub next: Option<Next<S>>,
}

/// What an algorithm found for a request, before the mode is applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Eval {
    /// Units available now.
    pub available: u64,
    /// Microseconds until `cost` units are available (meaningful when refused).
    pub retry_us: u64,
    /// Microseconds until the untouched state, as things are.
    pub reset_us: u64,
    /// Microseconds until the untouched state, once `cost` units are taken.
    pub reset_consumed_us: u64,
    /// How far the clock went back behind the stored state, which the
    /// algorithm treats as time standing still: every duration above (and
    /// the TTL) is counted from the stored instant, so this much is added to
    /// make it count from the caller's `now`.
    pub skew_us: u64,
}

impl Eval {
    /// Turns the evaluation into a step; `commit` builds the state to store
    /// (as `(state, ttl_us)`) and is called only when something is to be
    /// written. The TTL stays in microseconds ([`RawStep`]): the in-process
    /// store keeps its expiries so, and converts no `Duration` back.
    #[inline]
    pub(crate) fn finish<S>(
        self,
        policy: &Policy,
        cost: u64,
        mode: Mode,
        commit: impl FnOnce() -> (S, u64),
    ) -> RawStep<S> {
        let allowed = cost <= self.available;
        let later = |us: u64| if us == 0 { 0 } else { us + self.skew_us };
        // (Only consuming and peeking steps get here: see `step`.)
        let decision = match (allowed, mode) {
            (true, Mode::Peek) => Decision::from_parts(
                true,
                policy.capacity(),
                self.available,
                later(self.reset_us),
                None,
            ),
            (true, _) => Decision::from_parts(
                true,
                policy.capacity(),
                self.available - cost,
                later(self.reset_consumed_us),
                None,
            ),
            (false, _) => Decision::from_parts(
                false,
                policy.capacity(),
                self.available,
                later(self.reset_us),
                Some(later(self.retry_us).max(1)),
            ),
        };
        let write = mode == Mode::Consume && (allowed || policy.records_rejected());
        let next = write.then(|| {
            let (state, ttl_us) = commit();
            (state, later(ttl_us).max(1))
        });
        RawStep { decision, next }
    }
}

/// A [`Step`] whose next state's TTL is still in microseconds (see
/// [`Eval::finish`]).
#[derive(Debug)]
pub(crate) struct RawStep<S> {
    pub(crate) decision: Decision,
    /// The next state and its TTL in microseconds (at least 1).
    pub(crate) next: Option<(S, u64)>,
}

impl<S> From<RawStep<S>> for Step<S> {
    #[inline]
    fn from(raw: RawStep<S>) -> Self {
        Step {
            decision: raw.decision,
            next: raw.next.map(|(state, ttl_us)| Next {
                state,
                ttl: Duration::from_micros(ttl_us),
            }),
        }
    }
}

/// `now`, unless the clock went back behind `stored` (an instant the state
/// already reached): then time is treated as standing still at `stored`.
/// Returns that instant and how far it is ahead of `now` (the skew).
pub(crate) fn not_before(stored: Option<u64>, now: Timestamp) -> (u64, u64) {
    let raw = now.as_micros();
    let now = raw.max(stored.unwrap_or(0));
    (now, now - raw)
}

/// Like [`not_before`] for a window: also the start of the aligned window.
pub(crate) fn align(policy: &Policy, stored_start: Option<u64>, now: Timestamp) -> (u64, u64, u64) {
    let (now, skew) = not_before(stored_start, now);
    (now, now - now % policy.period_micros(), skew)
}

/// Checks a request's cost against the policies.
///
/// # Errors
/// [`Error::InvalidArgument`] for a zero cost, [`Error::CostExceedsCapacity`]
/// when the cost exceeds the smallest capacity (it could never be admitted).
pub fn check_cost(policies: &[Policy], cost: u32) -> Result<()> {
    check_costs(policies.iter(), cost, Mode::Consume)
}

/// Checks a request's policies and cost for `mode` (a refund may give back
/// more than a capacity: the key is then full).
///
/// # Errors
/// As [`check_cost`]; also [`Error::InvalidArgument`] when two policies share
/// an algorithm and a [slot](Policy::slot).
pub fn check_request(policies: &[Policy], cost: u32, mode: Mode) -> Result<()> {
    check_slots(policies)?;
    check_costs(policies.iter(), cost, mode)
}

/// Two policies of one request never count in the same state.
fn check_slots(policies: &[Policy]) -> Result<()> {
    for (i, p) in policies.iter().enumerate() {
        if policies[..i].iter().any(|q| q.tag() == p.tag()) {
            return Err(Error::invalid(
                "policy",
                format!(
                    "two {} policies share slot {}; number them with Policy::slot",
                    p.algorithm(),
                    p.slot_index()
                ),
            ));
        }
    }
    Ok(())
}

/// [`check_cost`] over borrowed policies.
fn check_costs<'a>(
    policies: impl Iterator<Item = &'a Policy>,
    cost: u32,
    mode: Mode,
) -> Result<()> {
    if cost == 0 {
        return Err(Error::invalid(
            "cost",
            "a request costs at least 1 unit; use peek to look without taking",
        ));
    }
    if mode == Mode::Refund {
        return Ok(());
    }
    if let Some(p) = policies
        .filter(|p| u64::from(cost) > p.capacity())
        .min_by_key(|p| p.capacity())
    {
        return Err(Error::CostExceedsCapacity {
            cost: u64::from(cost),
            capacity: p.capacity(),
        });
    }
    Ok(())
}

/// Runs one step of `policy`'s algorithm on `state` (`None` = no state yet)
/// in any [`Mode`]: a refund gives units back and decides as a peek of one
/// unit afterwards; a reservation books the units at the first instant they
/// fit, when that is at most its delay away (see [`reserve_delay`]).
///
/// # Errors
/// [`Error::WrongType`] (naming `key`) when `state` belongs to another algorithm.
pub fn step(
    policy: &Policy,
    key: &str,
    state: Option<&State>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Result<Step<State>> {
    match mode {
        Mode::Refund => refund(policy, key, state, now, cost),
        Mode::Reserve(max_delay) if books(policy.algorithm()) => {
            let first = step_at(policy, key, state, now, cost, Mode::Consume)?;
            let Some(delay) = reserve_delay(&[first.decision], max_delay) else {
                return Ok(first);
            };
            let later = step_at(
                policy,
                key,
                state,
                later_by(now, delay),
                cost,
                Mode::Consume,
            )?;
            Ok(if later.decision.allowed {
                booked(later, policy, state, now, delay)
            } else {
                first
            })
        }
        Mode::Reserve(_) => step_at(policy, key, state, now, cost, Mode::Consume),
        Mode::Consume | Mode::Peek => step_at(policy, key, state, now, cost, mode),
    }
}

/// [`step`] on a state held in place (an in-process table's entry): the
/// next state, when the request keeps one (see [`keep`]; a lone policy
/// commits when it admits, or refunds), is written over `state`. Answers the
/// decision and, when `state` was replaced, its TTL in microseconds.
///
/// A consume or a peek runs the algorithm's own step on its own state type,
/// without wrapping a [`State`] in and out and with the TTL kept in
/// microseconds ([`Eval::finish`]): the common check of a held key.
///
/// # Errors
/// As [`step`].
#[inline]
pub(crate) fn step_in_place(
    policy: &Policy,
    key: &str,
    state: &mut State,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Result<(Decision, Option<u64>)> {
    /// Writes a step's next state over `held` when it is to be kept.
    #[inline]
    fn put<S>(
        step: RawStep<S>,
        policy: &Policy,
        mode: Mode,
        held: &mut S,
    ) -> (Decision, Option<u64>) {
        let decision = step.decision;
        let commit = decision.allowed || mode == Mode::Refund;
        let ttl = keep(step.next, policy, commit).map(|(next, ttl_us)| {
            *held = next;
            ttl_us
        });
        (decision, ttl)
    }
    macro_rules! dispatch {
        ($($alg:ident => $module:ident),*) => {
            match (policy.algorithm(), &mut *state) {
                $((Algorithm::$alg, State::$alg(s)) => {
                    let stepped = $module::step_raw(policy, Some(&*s), now, cost, mode);
                    return Ok(put(stepped, policy, mode, s));
                })*
                _ => {}
            }
        };
    }
    if matches!(mode, Mode::Consume | Mode::Peek) {
        dispatch!(
            Gcra => gcra,
            TokenBucket => token_bucket,
            SlidingLog => sliding_log,
            SlidingWindow => sliding_window,
            FixedWindow => fixed_window
        );
    }
    let stepped = step(policy, key, Some(&*state), now, cost, mode)?;
    let raw = RawStep {
        decision: stepped.decision,
        next: stepped.next.map(|n| (n.state, micros(n.ttl))),
    };
    Ok(put(raw, policy, mode, state))
}

/// Whether `algorithm` can book units ahead. GCRA and the token bucket book
/// a slot (the arrival time, the next refill, move ahead) and the sliding log
/// logs the units at the booked instant; the window counters cannot: a count
/// moved into the next window would read as that window to a request made
/// now, which would then pass before its time. A reservation under a window
/// policy is a plain check.
pub(crate) fn books(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::Gcra | Algorithm::TokenBucket | Algorithm::SlidingLog
    )
}

/// The delay (µs) a reservation waits, given the decisions of taking its units
/// now: `None` when they are all admitted (nothing to wait for) or the longest
/// wait exceeds `max_delay`.
pub fn reserve_delay(now: &[Decision], max_delay: std::time::Duration) -> Option<u64> {
    let waits = now.iter().filter(|d| !d.allowed);
    let delay = waits.filter_map(|d| d.retry_after).max()?;
    (delay <= max_delay).then(|| crate::duration::micros(delay))
}

fn later_by(now: Timestamp, delay_us: u64) -> Timestamp {
    Timestamp::from_micros(now.as_micros() + delay_us)
}

/// A step taken `delay_us` ahead of `now` on `state`, seen from now:
/// admitted, after that wait.
fn booked(
    mut step: Step<State>,
    policy: &Policy,
    state: Option<&State>,
    now: Timestamp,
    delay_us: u64,
) -> Step<State> {
    let delay = Duration::from_micros(delay_us);
    step.decision.reset_after += delay;
    step.decision.retry_after = Some(delay);
    if let Some(next) = &mut step.next {
        next.ttl += delay;
        if let (Some(State::SlidingLog(old)), State::SlidingLog(new)) = (state, &mut next.state) {
            keep_logged(policy, old, now, &mut new.entries);
        }
    }
    step
}

/// A log stepped ahead dropped the entries that left the window by then;
/// those still in the window now are put back (the newest `capacity` of all
/// decide every later request, so older ones still go).
fn keep_logged(
    policy: &Policy,
    old: &sliding_log::SlidingLogState,
    now: Timestamp,
    entries: &mut Vec<u64>,
) {
    let (now, period) = (now.as_micros(), policy.period_micros());
    let first = entries.first().copied().unwrap_or(u64::MAX);
    let mut merged: Vec<u64> = old
        .entries
        .iter()
        .copied()
        .filter(|&ts| ts + period > now && ts < first)
        .collect();
    merged.append(entries);
    let excess = merged
        .len()
        .saturating_sub(usize::try_from(policy.capacity()).unwrap_or(usize::MAX));
    merged.drain(..excess);
    *entries = merged;
}

/// Gives `cost` units back and decides like a peek of one unit afterwards.
fn refund(
    policy: &Policy,
    key: &str,
    state: Option<&State>,
    now: Timestamp,
    cost: u32,
) -> Result<Step<State>> {
    macro_rules! dispatch {
        ($($alg:ident => $module:ident),*) => {
            match (policy.algorithm(), state) {
                (_, None) => None,
                $((Algorithm::$alg, Some(State::$alg(s))) => {
                    $module::refund(policy, Some(s), now, cost).map(State::$alg)
                })*
                (_, Some(found)) => return Err(mismatch(policy, key, found)),
            }
        };
    }
    let next = dispatch!(
        Gcra => gcra,
        TokenBucket => token_bucket,
        SlidingLog => sliding_log,
        SlidingWindow => sliding_window,
        FixedWindow => fixed_window
    );
    let decision = step_at(policy, key, next.as_ref(), now, 1, Mode::Peek)?.decision;
    let ttl = decision.reset_after.max(Duration::from_micros(1));
    Ok(Step {
        decision,
        next: next.map(|state| Next { state, ttl }),
    })
}

fn mismatch(policy: &Policy, key: &str, found: &State) -> Error {
    Error::WrongType {
        key: key.to_string(),
        detail: format!(
            "holds {} state, the policy is {}",
            found.algorithm(),
            policy.algorithm()
        ),
    }
}

/// One step of the algorithm, consuming or peeking.
fn step_at(
    policy: &Policy,
    key: &str,
    state: Option<&State>,
    now: Timestamp,
    cost: u32,
    mode: Mode,
) -> Result<Step<State>> {
    fn lift<S>(s: Step<S>, wrap: fn(S) -> State) -> Step<State> {
        Step {
            decision: s.decision,
            next: s.next.map(|n| Next {
                state: wrap(n.state),
                ttl: n.ttl,
            }),
        }
    }
    // Each arm: the policy's algorithm with no state or a state of its own.
    macro_rules! dispatch {
        ($($alg:ident => $module:ident),*) => {
            match (policy.algorithm(), state) {
                $((Algorithm::$alg, None) => lift($module::step(policy, None, now, cost, mode), State::$alg),
                (Algorithm::$alg, Some(State::$alg(s))) => {
                    lift($module::step(policy, Some(s), now, cost, mode), State::$alg)
                })*
                (_, Some(found)) => return Err(mismatch(policy, key, found)),
            }
        };
    }
    Ok(dispatch!(
        Gcra => gcra,
        TokenBucket => token_bucket,
        SlidingLog => sliding_log,
        SlidingWindow => sliding_window,
        FixedWindow => fixed_window
    ))
}

/// One policy's part of a request: its policy, storage key and current state.
#[derive(Debug, Clone)]
pub struct Slot<'a> {
    /// The policy.
    pub policy: &'a Policy,
    /// The user key (for error messages).
    pub key: &'a str,
    /// Its current state, `None` when there is none (or it expired).
    pub state: Option<State>,
}

/// The result of [`apply`]: one decision per policy and what to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// One decision per slot, in order.
    pub decisions: Vec<Decision>,
    /// One entry per slot: the state to store, or `None` to leave it untouched.
    pub writes: Vec<Option<Next<State>>>,
}

/// Applies a request to every policy of a limiter atomically: when all allow,
/// every policy consumes; when any refuses, nothing is consumed (only the
/// policies that [record rejected requests](Policy::record_rejected) record it).
/// A refund gives back to every policy; a reservation books every policy at
/// the first instant all admit, or refuses like a check.
///
/// The caller must hold whatever makes read-then-write atomic in its store (a
/// mutex, a transaction) around reading the states, this call, and the writes.
///
/// # Errors
/// The errors of [`check_request`] and [`step`].
pub fn apply(slots: &[Slot<'_>], now: Timestamp, cost: u32, mode: Mode) -> Result<Applied> {
    check_costs(slots.iter().map(|s| s.policy), cost, mode)?;
    let run = |now, mode| {
        slots
            .iter()
            .map(|s| step(s.policy, s.key, s.state.as_ref(), now, cost, mode))
            .collect::<Result<Vec<_>>>()
    };
    let mut steps = match mode {
        Mode::Reserve(_) => run(now, Mode::Consume)?,
        _ => run(now, mode)?,
    };
    let all_book = slots.iter().all(|s| books(s.policy.algorithm()));
    if let Mode::Reserve(max_delay) = mode
        && all_book
    {
        let decisions: Vec<Decision> = steps.iter().map(|s| s.decision).collect();
        if let Some(delay) = reserve_delay(&decisions, max_delay) {
            let later = run(later_by(now, delay), Mode::Consume)?;
            if later.iter().all(|s| s.decision.allowed) {
                steps = later
                    .into_iter()
                    .zip(slots)
                    .map(|(s, slot)| booked(s, slot.policy, slot.state.as_ref(), now, delay))
                    .collect();
            }
        }
    }
    let commit = mode == Mode::Refund || steps.iter().all(|s| s.decision.allowed);
    let decisions = steps.iter().map(|s| s.decision).collect();
    let writes = steps
        .into_iter()
        .zip(slots)
        .map(|(s, slot)| keep(s.next, slot.policy, commit))
        .collect();
    Ok(Applied { decisions, writes })
}

/// The state a step leaves to write: its next state when every policy of the
/// request allowed it (or it is a refund), or when its policy records refusals too.
pub(crate) fn keep<T>(next: Option<T>, policy: &Policy, commit: bool) -> Option<T> {
    next.filter(|_| commit || policy.records_rejected())
}
