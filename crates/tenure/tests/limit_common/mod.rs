//! Contract checks shared by the limiter tests of every store. Apart from the
//! concurrency check, they decide at injected instants, so no window boundary
//! can fall inside a test by chance.
#![allow(dead_code)]

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tenure::limit::{Algorithm, Decision, Limiter, Mode, Quota, Timestamp};
use tenure::{Coordinator, Error};

/// A `NonZeroU32` from a literal.
pub fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// 2027-01-15 08:00:00 UTC in µs: one second after an hour starts.
pub const T0: u64 = 1_800_000_000_000_000 + 1_000_000;

/// `T0 + us` as an injected instant.
pub fn at(us: u64) -> Option<Timestamp> {
    Some(Timestamp::from_micros(T0 + us))
}

/// Consumes `cost` at `T0 + us`.
pub async fn take(l: &Limiter, key: &str, cost: u32, us: u64) -> Decision {
    l.decide(key, cost, Mode::Consume, at(us))
        .await
        .expect("check")
}

/// Peeks `cost` at `T0 + us`.
pub async fn look(l: &Limiter, key: &str, cost: u32, us: u64) -> Decision {
    l.decide(key, cost, Mode::Peek, at(us)).await.expect("peek")
}

const DAY_US: u64 = 86_400_000_000;

/// 64 tasks × 1000 requests on one key, on the store's own clock: never more
/// admitted than the limit, for every algorithm. The quota is per day, so
/// nothing refills during the test; if the run straddles midnight UTC (read
/// from the store's clock), a fixed or sliding window may admit up to
/// 2 × limit, and the check says so.
pub async fn concurrent_requests_never_exceed_the_limit(tenure: &Coordinator, alg: Algorithm) {
    const LIMIT: u32 = 500;
    const TASKS: usize = 64;
    const REQUESTS: usize = 1000;
    let limiter = tenure.limiter(Quota::per_day(nz(LIMIT)), alg);
    let key = format!("concurrent:{alg}");
    let admitted = Arc::new(AtomicU64::new(0));
    let before = tenure.limits().now().await.expect("clock").as_micros() / DAY_US;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (limiter, key, admitted) = (limiter.clone(), key.clone(), Arc::clone(&admitted));
        tasks.push(tokio::spawn(async move {
            for _ in 0..REQUESTS {
                if limiter.check(&key).await.expect("check").allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let after = tenure.limits().now().await.expect("clock").as_micros() / DAY_US;
    let admitted = admitted.load(Ordering::Relaxed);
    let windowed = matches!(alg, Algorithm::FixedWindow | Algorithm::SlidingWindow);
    if windowed && after != before {
        assert!(
            admitted <= 2 * u64::from(LIMIT),
            "{alg}: {admitted} admitted"
        );
    } else {
        assert_eq!(admitted, u64::from(LIMIT), "{alg}: admitted");
    }
}

/// Zero rate, zero window, zero cost, cost over capacity, bad keys.
pub async fn bad_input_is_a_clear_error(tenure: &Coordinator) {
    assert!(matches!(
        Quota::new(0, Duration::from_secs(1)),
        Err(Error::InvalidArgument { what: "rate", .. })
    ));
    assert!(matches!(
        Quota::new(1, Duration::ZERO),
        Err(Error::InvalidArgument { what: "window", .. })
    ));
    for alg in Algorithm::ALL {
        let l = tenure.limiter(Quota::per_second(nz(5)), alg);
        let e = l.check_n("bad", 0).await.expect_err("cost 0");
        assert!(
            matches!(e, Error::InvalidArgument { what: "cost", .. }),
            "{e}"
        );
        let e = l.check_n("bad", 6).await.expect_err("cost 6 > 5");
        assert!(
            matches!(
                e,
                Error::CostExceedsCapacity {
                    cost: 6,
                    capacity: 5
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("capacity of 5"), "{e}");
        assert!(matches!(l.check("").await, Err(Error::InvalidKey { .. })));
        // A rate finer than 1/µs cannot be represented: refused on use.
        let fine = tenure.limiter(Quota::per_second(nz(2_000_000)), alg);
        assert!(matches!(
            fine.check("bad").await,
            Err(Error::InvalidArgument { what: "rate", .. })
        ));
        // The same policy twice.
        let twice = l.clone().and(Quota::per_second(nz(5)), alg);
        assert!(matches!(
            twice.check("bad").await,
            Err(Error::InvalidArgument { what: "policy", .. })
        ));
    }
    // Injected instants must stay exact in Lua's doubles.
    let l = tenure.limiter(Quota::per_second(nz(5)), Algorithm::Gcra);
    let far = Some(Timestamp::from_micros(1 << 60));
    assert!(matches!(
        l.decide("bad", 1, Mode::Consume, far).await,
        Err(Error::InvalidArgument { what: "now", .. })
    ));
    // The burst is the capacity of GCRA and the token bucket only.
    let l = tenure.limiter(Quota::per_second(nz(5)).burst(nz(2)), Algorithm::Gcra);
    assert!(matches!(
        l.check_n("bad", 3).await,
        Err(Error::CostExceedsCapacity { capacity: 2, .. })
    ));
    let l = tenure.limiter(Quota::per_second(nz(5)).burst(nz(2)), Algorithm::SlidingLog);
    assert!(take(&l, "bad:sl", 3, 0).await.allowed);
}

/// 3 per hour and 5 per day: when the daily policy refuses, the hourly one
/// keeps its units.
pub async fn compound_policies_commit_all_or_nothing(tenure: &Coordinator) {
    for alg in Algorithm::ALL {
        let key = format!("compound:{alg}");
        // A key's state is per algorithm (and slot), not per quota: the daily
        // limiter alone shares the compound one's daily state when it is the
        // first policy of its algorithm in both.
        let day_alg = if alg == Algorithm::SlidingLog {
            Algorithm::FixedWindow
        } else {
            Algorithm::SlidingLog
        };
        let hourly = tenure.limiter(Quota::per_hour(nz(3)), alg);
        let both = hourly.clone().and(Quota::per_day(nz(5)), day_alg);
        let daily = tenure.limiter(Quota::per_day(nz(5)), day_alg);
        assert!(take(&daily, &key, 4, 0).await.allowed);
        // 2 units: the hourly policy allows, the daily refuses → nothing taken.
        let d = take(&both, &key, 2, 10).await;
        assert!(!d.allowed, "{alg}");
        assert_eq!(d.limit, 5, "{alg}: the refusing policy is reported");
        let each = both
            .decide_each(&key, 1, Mode::Peek, at(20))
            .await
            .expect("peek");
        assert_eq!(
            each[0].remaining, 3,
            "{alg}: the hourly policy kept its units"
        );
        assert_eq!(each[1].remaining, 1, "{alg}");
        // 1 unit fits both.
        let d = take(&both, &key, 1, 30).await;
        assert!(d.allowed);
        assert_eq!(d.remaining, 0, "{alg}: the tightest policy is reported");
        let each = both
            .decide_each(&key, 1, Mode::Peek, at(40))
            .await
            .expect("peek");
        assert_eq!((each[0].remaining, each[1].remaining), (2, 0), "{alg}");
    }
}

/// A peek reports without consuming.
pub async fn peek_takes_nothing(tenure: &Coordinator) {
    for alg in Algorithm::ALL {
        let key = format!("peek:{alg}");
        let l = tenure.limiter(Quota::per_hour(nz(2)), alg);
        for i in 0..5 {
            let d = look(&l, &key, 1, i).await;
            assert!(d.allowed && d.remaining == 2, "{alg}: {d:?}");
            assert_eq!(d.reset_after, Duration::ZERO, "{alg}: untouched");
        }
        assert!(take(&l, &key, 2, 10).await.allowed);
        let d = look(&l, &key, 1, 20).await;
        assert!(!d.allowed && d.remaining == 0, "{alg}");
        assert!(d.retry_after.is_some_and(|r| r > Duration::ZERO));
        assert!(d.reset_after > Duration::ZERO);
    }
}

/// Costs of N units.
pub async fn costs_take_several_units(tenure: &Coordinator) {
    for alg in Algorithm::ALL {
        let key = format!("cost:{alg}");
        let l = tenure.limiter(Quota::per_hour(nz(10)), alg);
        let d = take(&l, &key, 7, 0).await;
        assert!(d.allowed && d.remaining == 3, "{alg}: {d:?}");
        let d = take(&l, &key, 4, 1).await;
        assert!(
            !d.allowed && d.remaining == 3,
            "{alg}: refused, nothing taken"
        );
        let d = take(&l, &key, 3, 2).await;
        assert!(d.allowed && d.remaining == 0, "{alg}");
    }
}

/// Keys do not share state.
pub async fn keys_are_independent(tenure: &Coordinator) {
    for alg in Algorithm::ALL {
        let l = tenure.limiter(Quota::per_hour(nz(1)), alg);
        assert!(take(&l, &format!("a:{alg}"), 1, 0).await.allowed);
        assert!(!take(&l, &format!("a:{alg}"), 1, 1).await.allowed);
        assert!(take(&l, &format!("b:{alg}"), 1, 2).await.allowed);
    }
}

/// By default a refused request is not logged; with recording on, it is.
pub async fn sliding_log_records_rejections_only_when_asked(tenure: &Coordinator) {
    let q = Quota::new(2, Duration::from_secs(1)).expect("quota");
    let l = tenure.limiter(q, Algorithm::SlidingLog);
    for (l, key, allowed_at_1s) in [
        (l.clone(), "log:plain", true),
        (l.clone().record_rejected(true), "log:recorded", false),
    ] {
        assert!(take(&l, key, 2, 0).await.allowed);
        // Hammering while refused…
        for i in 1..=5 {
            assert!(!take(&l, key, 1, i * 100_000).await.allowed);
        }
        // …is forgiven at 1 s unless refusals are recorded.
        let d = take(&l, key, 1, 1_000_000).await;
        assert_eq!(d.allowed, allowed_at_1s, "{key}");
    }
}

/// Window boundaries: the fixed window admits 2 × limit within 1 µs across a
/// boundary (documented); the sliding log never exceeds the limit in any
/// window of a long irregular run, and the sliding window counter never within
/// an aligned window.
pub async fn window_boundaries(tenure: &Coordinator) {
    const HOUR: u64 = 3_600_000_000;
    // T0 is one second into an hour: the next hour starts at T0 + HOUR − 1 s.
    let boundary = HOUR - 1_000_000;
    let fixed = tenure.limiter(Quota::per_hour(nz(10)), Algorithm::FixedWindow);
    assert!(take(&fixed, "edge", 10, boundary - 1).await.allowed);
    assert!(
        take(&fixed, "edge", 10, boundary).await.allowed,
        "fixed window: 2 × limit within 1 µs across the boundary"
    );
    let log = tenure.limiter(Quota::per_hour(nz(10)), Algorithm::SlidingLog);
    assert!(take(&log, "edge", 10, boundary - 1).await.allowed);
    let d = take(&log, "edge", 1, boundary).await;
    assert!(!d.allowed, "sliding log: no second batch within the hour");
    assert_eq!(d.retry_after, Some(Duration::from_micros(HOUR - 1)));

    // A long irregular run (deterministic pseudo-random gaps, 0–20 min).
    for alg in [Algorithm::SlidingLog, Algorithm::SlidingWindow] {
        let l = tenure.limiter(Quota::per_hour(nz(10)), alg);
        let key = format!("run:{alg}");
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut now = 0;
        let mut admitted = Vec::new();
        for _ in 0..400 {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            now += (seed >> 33) % (20 * 60_000_000);
            let cost = u32::try_from((seed >> 20) % 3).unwrap_or(0) + 1;
            if take(&l, &key, cost, now).await.allowed {
                admitted.push((T0 + now, u64::from(cost)));
            }
        }
        assert!(admitted.len() > 50, "{alg}: the run admits traffic");
        for &(t, _) in &admitted {
            let in_window: u64 = match alg {
                Algorithm::SlidingLog => admitted
                    .iter()
                    .filter(|(u, _)| *u <= t && u + HOUR > t)
                    .map(|(_, c)| c)
                    .sum(),
                _ => admitted
                    .iter()
                    .filter(|(u, _)| u / HOUR == t / HOUR)
                    .map(|(_, c)| c)
                    .sum(),
            };
            assert!(
                in_window <= 10,
                "{alg}: {in_window} units in the window of {t}"
            );
        }
    }
}
