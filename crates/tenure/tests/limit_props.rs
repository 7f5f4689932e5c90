//! Property tests of the pure rate-limit algorithms: bounds in every window,
//! exact retry-after, peeks that change nothing, and GCRA ≡ token bucket.

use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use tenure::limit::store::{State, step};
use tenure::limit::{Algorithm, Decision, Mode, Policy, Quota, Timestamp};

/// A start far from zero, like real epoch microseconds.
const T0: u64 = 1_700_000_000_000_000;

fn policy(alg: Algorithm, limit: u32, period_ms: u64, burst: u32) -> Policy {
    let q = Quota::new(limit, Duration::from_millis(period_ms))
        .expect("valid quota")
        .burst(NonZeroU32::new(burst).expect("burst ≥ 1"));
    Policy::new(q, alg).expect("valid policy")
}

/// One request of a generated sequence.
#[derive(Debug, Clone)]
struct Req {
    dt: u64,
    cost: u32,
    peek: bool,
}

fn reqs(max_cost: u32, max_dt: u64) -> impl Strategy<Value = Vec<Req>> {
    prop::collection::vec(
        (0..=max_dt, 1..=max_cost, prop::bool::weighted(0.15)).prop_map(|(dt, cost, peek)| Req {
            dt,
            cost,
            peek,
        }),
        1..120,
    )
}

/// Runs `reqs` through `policy`, returning `(now, cost, peek, decision)`.
fn run(p: &Policy, reqs: &[Req]) -> Vec<(u64, u32, bool, Decision)> {
    let mut state: Option<State> = None;
    let mut now = T0;
    let mut out = Vec::new();
    for r in reqs {
        now += r.dt;
        let mode = if r.peek { Mode::Peek } else { Mode::Consume };
        let cost = r.cost.min(u32::try_from(p.capacity()).unwrap_or(u32::MAX));
        let s = step(
            p,
            "k",
            state.as_ref(),
            Timestamp::from_micros(now),
            cost,
            mode,
        )
        .expect("state matches policy");
        if r.peek {
            assert!(s.next.is_none(), "a peek writes nothing");
        }
        if let Some(next) = s.next {
            assert!(!next.ttl.is_zero());
            state = Some(next.state);
        }
        out.push((now, cost, r.peek, s.decision));
    }
    out
}

fn algs() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

/// Any algorithm, limit and burst below 20, period below 2 s.
fn policies() -> impl Strategy<Value = Policy> {
    (algs(), 1u32..20, 1u32..20, 1u64..2_000)
        .prop_map(|(alg, limit, burst, period_ms)| policy(alg, limit, period_ms, burst))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Every decision is well-formed and admitted units respect each
    /// algorithm's bound in every window.
    #[test]
    fn admitted_units_respect_the_bound(
        p in policies(),
        reqs in reqs(8, 300_000),
    ) {
        let alg = p.algorithm();
        let runs = run(&p, &reqs);
        let cap = p.capacity();
        for (_, cost, _, d) in &runs {
            prop_assert_eq!(d.limit, cap);
            prop_assert!(d.remaining <= cap);
            prop_assert_eq!(d.allowed, d.retry_after.is_none());
            if !d.allowed {
                prop_assert!(d.remaining < u64::from(*cost));
                prop_assert!(d.retry_after.unwrap_or_default() > Duration::ZERO);
            }
        }
        let taken: Vec<(u64, u64)> = runs
            .iter()
            .filter(|(_, _, peek, d)| d.allowed && !peek)
            .map(|(t, c, _, _)| (*t, u64::from(*c)))
            .collect();
        let period = p.period_micros();
        let t = p.interval_micros();
        for (i, &(start, _)) in taken.iter().enumerate() {
            match alg {
                Algorithm::Gcra | Algorithm::TokenBucket => {
                    // Units in [start, end] ≤ burst + (end − start) / T.
                    let mut sum = 0;
                    for &(end, c) in &taken[i..] {
                        sum += c;
                        prop_assert!(sum <= cap + (end - start) / t,
                            "{sum} units in {} µs", end - start);
                    }
                }
                Algorithm::SlidingLog => {
                    // Units in every window (start − period, start] ≤ limit.
                    let sum: u64 = taken.iter()
                        .filter(|(ts, _)| *ts <= start && ts + period > start)
                        .map(|(_, c)| c).sum();
                    prop_assert!(sum <= cap, "{sum} units in the window ending at {start}");
                }
                Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                    let w = start - start % period;
                    let sum: u64 = taken.iter()
                        .filter(|(ts, _)| ts - ts % period == w)
                        .map(|(_, c)| c).sum();
                    prop_assert!(sum <= cap, "{sum} units in aligned window {w}");
                }
                _ => unreachable!(),
            }
        }
    }

    /// A refusal's retry-after is right: at `now + retry_after` the same
    /// request is admitted; for the exact algorithms, one µs earlier it is not.
    #[test]
    fn retry_after_is_exact(
        p in policies(),
        reqs in reqs(8, 50_000),
    ) {
        let alg = p.algorithm();
        let mut state: Option<State> = None;
        let mut now = T0;
        for r in &reqs {
            now += r.dt;
            let cost = r.cost.min(u32::try_from(p.capacity()).unwrap_or(u32::MAX));
            let at = |t: u64| step(&p, "k", state.as_ref(), Timestamp::from_micros(t), cost, Mode::Peek)
                .expect("step").decision;
            let d = at(now);
            if let Some(retry) = d.retry_after {
                let retry = u64::try_from(retry.as_micros()).unwrap_or(u64::MAX);
                prop_assert!(at(now + retry).allowed, "not allowed after retry_after {retry} µs");
                if alg != Algorithm::SlidingWindow && retry > 1 {
                    prop_assert!(!at(now + retry - 1).allowed, "allowed before retry_after {retry} µs");
                }
            }
            let s = step(&p, "k", state.as_ref(), Timestamp::from_micros(now), cost, Mode::Consume)
                .expect("step");
            prop_assert_eq!(s.decision.allowed, d.allowed, "peek and check agree");
            if let Some(next) = s.next { state = Some(next.state); }
        }
    }

    /// GCRA and the token bucket admit exactly the same requests.
    #[test]
    fn gcra_and_token_bucket_agree(
        limit in 1u32..30,
        burst in 1u32..30,
        period_ms in 1u64..3_000,
        reqs in reqs(10, 200_000),
    ) {
        let g = run(&policy(Algorithm::Gcra, limit, period_ms, burst), &reqs);
        let b = run(&policy(Algorithm::TokenBucket, limit, period_ms, burst), &reqs);
        for (x, y) in g.iter().zip(&b) {
            prop_assert_eq!(x.3.allowed, y.3.allowed, "at {}", x.0);
            prop_assert_eq!(x.3.remaining, y.3.remaining, "at {}", x.0);
            prop_assert_eq!(x.3.retry_after, y.3.retry_after, "at {}", x.0);
            prop_assert_eq!(x.3.reset_after, y.3.reset_after, "at {}", x.0);
        }
    }

    /// A clock that jumps backwards never panics and never admits more than
    /// the capacity at once.
    #[test]
    fn clock_going_back_is_harmless(
        alg in algs(),
        limit in 1u32..10,
        jumps in prop::collection::vec(-2_000_000i64..2_000_000, 1..80),
    ) {
        let p = policy(alg, limit, 1_000, limit);
        let mut state: Option<State> = None;
        let mut now = T0;
        for j in jumps {
            now = now.saturating_add_signed(j);
            let s = step(&p, "k", state.as_ref(), Timestamp::from_micros(now), 1, Mode::Consume)
                .expect("step");
            prop_assert!(s.decision.remaining < p.capacity());
            if let Some(next) = s.next { state = Some(next.state); }
        }
    }

    /// Once its TTL has passed, a state reads exactly like no state, in both
    /// modes and for any cost: stores may drop it then (Redis TTLs, sweeps).
    #[test]
    fn a_state_past_its_ttl_reads_as_fresh(
        p in policies(),
        reqs in reqs(8, 300_000),
        after in 0u64..5_000_000,
        cost in 1u32..8,
    ) {
        let mut state: Option<State> = None;
        let mut expires = 0;
        let mut now = T0;
        for r in &reqs {
            now += r.dt;
            let cost = r.cost.min(u32::try_from(p.capacity()).unwrap_or(u32::MAX));
            if let Some(n) = step(&p, "k", state.as_ref(), Timestamp::from_micros(now), cost, Mode::Consume)
                .expect("step").next {
                expires = now + u64::try_from(n.ttl.as_micros()).unwrap_or(u64::MAX);
                state = Some(n.state);
            }
        }
        let at = Timestamp::from_micros(expires.max(now) + after);
        let cost = cost.min(u32::try_from(p.capacity()).unwrap_or(u32::MAX));
        for mode in [Mode::Consume, Mode::Peek] {
            let old = step(&p, "k", state.as_ref(), at, cost, mode).expect("step");
            let fresh = step(&p, "k", None, at, cost, mode).expect("step");
            prop_assert_eq!(old, fresh);
        }
    }

    /// States round-trip through bytes and integers.
    #[test]
    fn state_round_trips(alg in algs(), reqs in reqs(3, 400_000)) {
        let p = policy(alg, 5, 1_000, 5);
        let mut state = None;
        let mut now = T0;
        for r in &reqs {
            now += r.dt;
            if let Some(n) = step(&p, "k", state.as_ref(), Timestamp::from_micros(now), 1, Mode::Consume)
                .expect("step").next { state = Some(n.state); }
        }
        if let Some(s) = state {
            prop_assert_eq!(State::decode(&s.encode(), "k").expect("decodes"), s.clone());
            prop_assert_eq!(State::from_ints(alg, &s.to_ints(), "k").expect("from ints"), s);
        }
    }
}

#[test]
fn corrupt_or_foreign_state_is_an_error() {
    let gcra = policy(Algorithm::Gcra, 5, 1_000, 5);
    let bucket = State::from_ints(Algorithm::TokenBucket, &[1, 2, 3], "k").expect("valid");
    let err = step(
        &gcra,
        "k",
        Some(&bucket),
        Timestamp::from_micros(T0),
        1,
        Mode::Consume,
    )
    .expect_err("a token-bucket state under a GCRA policy");
    assert!(matches!(err, tenure::Error::WrongType { .. }), "{err}");
    assert!(State::decode(&[], "k").is_err());
    assert!(State::decode(&[1, 2, 3], "k").is_err());
    assert!(State::decode(&[9; 9], "k").is_err());
    assert!(State::from_ints(Algorithm::Gcra, &[1 << 60, 1], "k").is_err());
    assert!(State::from_ints(Algorithm::Gcra, &[1], "k").is_err()); // no interval
    assert!(State::from_ints(Algorithm::SlidingLog, &[3, 2], "k").is_err());
    assert!(State::from_ints(Algorithm::FixedWindow, &[1], "k").is_err());
}

/// Takes 10 units at the last µs of a window, then `second` units 1 µs later.
fn across_a_boundary(alg: Algorithm, second: u32) -> tenure::limit::Decision {
    let p = policy(alg, 10, 1_000, 10);
    let end_of_window = T0 - T0 % 1_000_000 + 999_999;
    let at = |us| Timestamp::from_micros(end_of_window + us);
    let a = step(&p, "k", None, at(0), 10, Mode::Consume).expect("step");
    assert!(a.decision.allowed);
    let s = a.next.expect("consumed").state;
    step(&p, "k", Some(&s), at(1), second, Mode::Consume)
        .expect("step")
        .decision
}

#[test]
fn fixed_window_admits_twice_the_limit_across_a_boundary() {
    // Documented behaviour: `limit` at the end of one window and `limit` at the
    // start of the next, within 1 µs of each other.
    let d = across_a_boundary(Algorithm::FixedWindow, 10);
    assert!(d.allowed, "2 × limit within 1 µs across the boundary");
    // The sliding log refuses even one more unit, until the window has passed.
    let d = across_a_boundary(Algorithm::SlidingLog, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_micros(999_999)));
}
