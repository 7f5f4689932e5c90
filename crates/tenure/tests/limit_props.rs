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
    try_policy(alg, limit, period_ms, burst).expect("valid policy")
}

/// The policy, or why it is refused: GCRA and the token bucket refuse a rate
/// that whole-microsecond intervals would slow by more than 1 % (29 per 1 ms).
fn try_policy(alg: Algorithm, limit: u32, period_ms: u64, burst: u32) -> tenure::Result<Policy> {
    let q = Quota::new(limit, Duration::from_millis(period_ms))
        .expect("valid quota")
        .burst(NonZeroU32::new(burst).expect("burst ≥ 1"));
    Policy::new(q, alg)
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
        let g = try_policy(Algorithm::Gcra, limit, period_ms, burst);
        let b = try_policy(Algorithm::TokenBucket, limit, period_ms, burst);
        prop_assert_eq!(g.is_ok(), b.is_ok(), "both refuse the same rates");
        let (Ok(g), Ok(b)) = (g, b) else {
            return Err(TestCaseError::reject("a rate both refuse"));
        };
        let (g, b) = (run(&g, &reqs), run(&b, &reqs));
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
    let bucket = State::from_ints(Algorithm::TokenBucket, &[1, 2, 3, 4], "k").expect("valid");
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

/// An algorithm, two to four quotas of it (the window algorithms share one
/// period: across a period change they keep counts only in part, as
/// documented), and requests `(dt, cost, which quota)`.
type Requota = (Algorithm, Vec<Policy>, Vec<(u64, u32, usize)>);

fn requotas() -> impl Strategy<Value = Requota> {
    let quota = (1u32..20, 1u32..20, 1u64..2_000);
    (
        algs(),
        prop::collection::vec(quota, 2..5),
        prop::collection::vec((0u64..200_000, 1u32..8, 0usize..4), 1..150),
    )
        .prop_map(|(alg, quotas, reqs)| {
            let shared = quotas[0].2;
            let policies = quotas
                .into_iter()
                .map(|(limit, burst, period_ms)| {
                    let period_ms = if alg.uses_burst() { period_ms } else { shared };
                    policy(alg, limit, period_ms, burst)
                })
                .collect::<Vec<_>>();
            let n = policies.len();
            let reqs = reqs.into_iter().map(|(dt, c, q)| (dt, c, q % n)).collect();
            (alg, policies, reqs)
        })
}

/// Runs `reqs`, each under its quota, in `mode`; returns the admitted
/// `(instant it may proceed, cost, quota)` in decision order.
fn run_requota(
    policies: &[Policy],
    reqs: &[(u64, u32, usize)],
    mode: Mode,
) -> Vec<(u64, u64, usize)> {
    let mut state: Option<State> = None;
    let mut now = T0;
    let mut taken = Vec::new();
    for &(dt, cost, q) in reqs {
        now += dt;
        let p = &policies[q];
        let cost = cost.min(u32::try_from(p.capacity()).unwrap_or(u32::MAX));
        let s = step(
            p,
            "k",
            state.as_ref(),
            Timestamp::from_micros(now),
            cost,
            mode,
        )
        .expect("state converts");
        assert!(s.decision.remaining <= p.capacity());
        if s.decision.allowed {
            let wait = s.decision.retry_after.map_or(0, |d| d.as_micros() as u64);
            taken.push((now + wait, u64::from(cost), q));
        }
        if let Some(next) = s.next {
            state = Some(next.state);
        }
    }
    taken
}

/// Units admitted in `[start, end]` never exceed the most any of the quotas
/// allows there: the largest capacity plus what the fastest rate refills
/// (GCRA, token bucket); every admission fits its own quota's window (sliding
/// log); an aligned window holds at most the largest limit (window counters).
/// A quota change that started the key from a fresh budget would break it.
fn check_bound(
    alg: Algorithm,
    policies: &[Policy],
    taken: &[(u64, u64, usize)],
) -> Result<(), TestCaseError> {
    let cap = policies.iter().map(Policy::capacity).max().unwrap_or(0);
    let t = policies
        .iter()
        .map(Policy::interval_micros)
        .min()
        .unwrap_or(1);
    let period = policies[0].period_micros();
    if alg == Algorithm::SlidingLog {
        // Each admission, with all admitted before it still in its quota's
        // window (booked ones too), fits that quota.
        for (k, &(at, _, q)) in taken.iter().enumerate() {
            let p = &policies[q];
            let sum: u64 = taken[..=k]
                .iter()
                .filter(|(ts, _, _)| ts + p.period_micros() > at)
                .map(|(_, c, _)| c)
                .sum();
            prop_assert!(
                sum <= p.capacity(),
                "{sum} units in the window ending at {at}"
            );
        }
    }
    let mut by_time = taken.to_vec();
    by_time.sort();
    for (i, &(start, _, _)) in by_time.iter().enumerate() {
        match alg {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                let mut sum = 0;
                for &(end, c, _) in &by_time[i..] {
                    sum += c;
                    prop_assert!(
                        sum <= cap + (end - start) / t,
                        "{sum} units in {} µs",
                        end - start
                    );
                }
            }
            Algorithm::SlidingLog => {} // below, in decision order
            _ => {
                let w = start - start % period;
                let sum: u64 = by_time
                    .iter()
                    .filter(|(ts, _, _)| ts - ts % period == w)
                    .map(|(_, c, _)| c)
                    .sum();
                prop_assert!(sum <= cap, "{sum} units in aligned window {w}");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Across any sequence of quota changes, a key is never given a fresh
    /// budget: admissions in every window stay within what the laxest quota
    /// alone allows there (see [`check_bound`]).
    #[test]
    fn quota_changes_never_grant_a_fresh_budget((alg, policies, reqs) in requotas()) {
        let taken = run_requota(&policies, &reqs, Mode::Consume);
        check_bound(alg, &policies, &taken)?;
    }

    /// An upgrade takes effect at once: at the instant of the change, the new,
    /// larger quota leaves at least the old remaining plus the added capacity
    /// (GCRA may lose one unit to rounding its rescaled backlog up); a
    /// downgrade never leaves more than the new capacity.
    #[test]
    fn an_upgrade_takes_effect_at_once(
        (alg, policies, reqs) in requotas(),
        more_limit in 0u32..10,
        more_burst in 0u32..10,
    ) {
        let a = &policies[0];
        let q = a.quota();
        let bigger = Quota::new(q.limit().get() + more_limit, q.period())
            .expect("quota")
            .burst(NonZeroU32::new(q.burst_size().get() + more_burst).expect("≥ 1"));
        let b = Policy::new(bigger, alg).expect("policy");
        let mut state: Option<State> = None;
        let mut now = T0;
        for &(dt, cost, _) in &reqs {
            now += dt;
            let at = Timestamp::from_micros(now);
            let peek = |p: &Policy| step(p, "k", state.as_ref(), at, 1, Mode::Peek)
                .expect("converts").decision.remaining;
            let (before, after) = (peek(a), peek(&b));
            let added = b.capacity() - a.capacity();
            let slack = u64::from(alg == Algorithm::Gcra);
            prop_assert!(after + slack >= (before + added).min(b.capacity()),
                "{before} of {} became {after} of {}", a.capacity(), b.capacity());
            prop_assert!(before <= a.capacity());
            let cost = cost.min(u32::try_from(a.capacity()).unwrap_or(1));
            if let Some(n) = step(a, "k", state.as_ref(), at, cost, Mode::Consume).expect("step").next {
                state = Some(n.state);
            }
        }
    }

    /// A refund never takes a key beyond its capacity, and a refund at the
    /// instant of a check undoes it exactly.
    #[test]
    fn a_refund_undoes_a_check_and_never_exceeds_the_capacity(
        p in policies(),
        reqs in prop::collection::vec((0u64..300_000, 1u32..8, any::<bool>()), 1..100),
    ) {
        let mut state: Option<State> = None;
        let mut now = T0;
        let cap = p.capacity();
        for (dt, cost, refund) in reqs {
            now += dt;
            let at = Timestamp::from_micros(now);
            let cost = cost.min(u32::try_from(cap).unwrap_or(1));
            let go = |s: Option<&State>, cost, mode| step(&p, "k", s, at, cost, mode).expect("step");
            if refund {
                let r = go(state.as_ref(), cost * 3, Mode::Refund);
                prop_assert!(r.decision.remaining <= cap);
                if let Some(n) = r.next { state = Some(n.state); }
                continue;
            }
            let before = go(state.as_ref(), 1, Mode::Peek).decision;
            let taken = go(state.as_ref(), cost, Mode::Consume);
            if !taken.decision.allowed { continue; }
            let next = taken.next.expect("consumed").state;
            let back = go(Some(&next), cost, Mode::Refund);
            prop_assert_eq!(back.decision.remaining, before.remaining, "a refund undoes the check");
            state = Some(next);
        }
    }

    /// Reservations under changing quotas keep the bound, counted at the
    /// instants they proceed; under one quota of GCRA or the token bucket
    /// nobody proceeds before one who booked earlier.
    #[test]
    fn reservations_keep_the_bound_and_their_order(
        (alg, policies, reqs) in requotas(),
        max_ms in 0u64..3_000,
    ) {
        // The sliding log books too, but across quota changes its bound is not
        // shown here (a known gap); under one quota the contract tests cover it.
        prop_assume!(matches!(alg, Algorithm::Gcra | Algorithm::TokenBucket));
        let mode = Mode::Reserve(Duration::from_millis(max_ms));
        // Under one quota: across quota changes, a change rescales what is
        // booked after it but not the instants already promised (a known gap).
        let one: Vec<_> = reqs.iter().map(|&(dt, c, _)| (dt, c, 0)).collect();
        let taken = run_requota(&policies, &one, mode);
        check_bound(alg, &policies[..1], &taken)?;
        if alg != Algorithm::SlidingLog {
            prop_assert!(taken.windows(2).all(|w| w[0].0 <= w[1].0), "out of booking order: {taken:?}");
        }
    }
}
