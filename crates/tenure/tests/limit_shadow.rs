//! Shadow mode (a dry run) in memory and on a real redis-server: a shadow
//! policy never refuses, says when it would have, and consumes exactly what
//! enforcing it would; enforced policies are never charged for it.

mod limit_common;

use limit_common::*;
use tenure::Coordinator;
use tenure::limit::{Algorithm, Mode, Quota};
use tenure_test::RedisServer;

const SECOND: u64 = 1_000_000;

/// A shadow limiter's would-refuse answers are exactly the refusals of the
/// same limiter enforced, on the same arrivals (GCRA and the sliding log:
/// one smooth, one exact per window).
async fn shadow_refuses_where_enforcing_would(tenure: &Coordinator) {
    for alg in [
        Algorithm::Gcra,
        Algorithm::SlidingLog,
        Algorithm::FixedWindow,
    ] {
        let quota = Quota::per_second(nz(3));
        let enforced = tenure.limiter(quota, alg);
        let shadow = tenure.limiter(quota, alg).shadow(true);
        // Bursts and gaps: 10 arrivals in the first second, 4 in the next half.
        let arrivals: Vec<u64> = (0..10)
            .map(|i| i * 50_000)
            .chain((0..4).map(|i| 1_500_000 + i * 10_000))
            .collect();
        for &us in &arrivals {
            let real = take(&enforced, &format!("enforced:{alg}"), 1, us).await;
            let dry = take(&shadow, &format!("shadow:{alg}"), 1, us).await;
            assert!(dry.allowed, "{alg} at {us}: a shadow limiter never refuses");
            assert_eq!(dry.would_refuse, !real.allowed, "{alg} at {us}");
            assert_eq!(
                (dry.remaining, dry.retry_after),
                (real.remaining, real.retry_after),
                "{alg} at {us}: the shadow's numbers are the enforced ones"
            );
        }
    }
}

/// 10/s enforced and 2/s in shadow: every request passes and takes an
/// enforced unit; the shadow policy takes only the two it admits.
async fn a_shadow_policy_never_charges_the_enforced_ones(tenure: &Coordinator) {
    let limiter = tenure
        .limiter(Quota::per_second(nz(10)), Algorithm::Gcra)
        .and_shadow(Quota::per_second(nz(2)), Algorithm::SlidingLog);
    for i in 0..5_u64 {
        let d = take(&limiter, "tenant", 1, i).await;
        assert!(d.allowed, "request {i}");
        assert_eq!(d.would_refuse, i >= 2, "request {i}");
        assert_eq!((d.limit, d.remaining), (10, 9 - i), "the enforced numbers");
    }
    let each = limiter
        .decide_each("tenant", 1, Mode::Peek, at(10))
        .await
        .expect("peek");
    assert_eq!(each[0].remaining, 5, "five enforced units taken");
    assert_eq!(each[1].remaining, 0, "two shadow units taken");
    assert!(each[1].would_refuse && each[1].allowed);
    // A second later the shadow policy admits again and takes its unit.
    let d = take(&limiter, "tenant", 1, SECOND + 10).await;
    assert!(d.allowed && !d.would_refuse);
}

/// 1/s enforced and 10/s in shadow: an enforced refusal is a refusal, and the
/// shadow policy takes nothing for the refused request.
async fn an_enforced_refusal_stands_and_charges_no_shadow(tenure: &Coordinator) {
    let limiter = tenure
        .limiter(Quota::per_second(nz(1)), Algorithm::FixedWindow)
        .and_shadow(Quota::per_second(nz(10)), Algorithm::FixedWindow);
    assert!(take(&limiter, "user", 1, 0).await.allowed);
    let refused = take(&limiter, "user", 1, 1).await;
    assert!(!refused.allowed && !refused.would_refuse);
    assert_eq!(refused.limit, 1);
    let each = limiter
        .decide_each("user", 1, Mode::Peek, at(2))
        .await
        .expect("peek");
    assert_eq!(
        each[1].remaining, 9,
        "only the admitted request was counted"
    );
}

#[tokio::test]
async fn memory_shadow_refuses_where_enforcing_would() {
    shadow_refuses_where_enforcing_would(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_a_shadow_policy_never_charges_the_enforced_ones() {
    a_shadow_policy_never_charges_the_enforced_ones(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_an_enforced_refusal_stands_and_charges_no_shadow() {
    an_enforced_refusal_stands_and_charges_no_shadow(&Coordinator::memory()).await;
}

#[tokio::test]
async fn redis_shadow_mode() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server");
    let tenure = Coordinator::connect(&server.url()).await.expect("connect");
    shadow_refuses_where_enforcing_would(&tenure).await;
    a_shadow_policy_never_charges_the_enforced_ones(&tenure).await;
    an_enforced_refusal_stands_and_charges_no_shadow(&tenure).await;
}

#[tokio::test]
async fn turning_shadow_mode_off_enforces_the_same_state() {
    let tenure = Coordinator::memory();
    let quota = Quota::per_minute(nz(2));
    let dry = tenure.limiter(quota, Algorithm::Gcra).shadow(true);
    for _ in 0..3 {
        assert!(take(&dry, "k", 1, 0).await.allowed);
    }
    let live = dry.shadow(false);
    let d = take(&live, "k", 1, 1).await;
    assert!(
        !d.allowed && !d.would_refuse,
        "the dry run spent the budget"
    );
}
