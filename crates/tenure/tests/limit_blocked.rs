//! The local cache of blocked keys against a real redis-server: a flood of
//! refused requests stops costing store calls (counted by the server's
//! `INFO commandstats`), the cache never admits what the store refuses, and
//! forgets a refusal no later than its `retry_after`.

mod limit_common;

use std::num::NonZeroUsize;
use std::time::Duration;

use limit_common::*;
use tenure::Coordinator;
use tenure::limit::{Algorithm, Limiter, Quota};
use tenure_test::RedisServer;

async fn start() -> (RedisServer, Coordinator, redis::aio::MultiplexedConnection) {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server");
    let tenure = Coordinator::connect(&server.url()).await.expect("connect");
    let raw = redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection");
    (server, tenure, raw)
}

/// Store calls since the last reset: the script or function calls (the
/// commands they run inside are counted apart by the server, and the limit
/// store sends nothing else per check).
async fn calls(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(name, _)| name.starts_with("fcall") || name.starts_with("eval"))
        .filter_map(|(_, fields)| fields.split(',').find_map(|f| f.strip_prefix("calls=")))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

async fn flushall(raw: &mut redis::aio::MultiplexedConnection) {
    let () = redis::cmd("FLUSHALL")
        .query_async(raw)
        .await
        .expect("FLUSHALL");
}

async fn reset(raw: &mut redis::aio::MultiplexedConnection) {
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(raw)
        .await
        .expect("RESETSTAT");
}

/// Floods one key with `n` checks; returns (admitted, refused, server calls).
async fn flood(
    limiter: &Limiter,
    raw: &mut redis::aio::MultiplexedConnection,
    n: u32,
) -> (u64, u64, u64) {
    // One check outside the count loads the script.
    let _ = limiter.peek("warm-up").await.expect("peek");
    reset(raw).await;
    let (mut admitted, mut refused) = (0, 0);
    for _ in 0..n {
        match limiter.check("flood").await.expect("check").allowed {
            true => admitted += 1,
            false => refused += 1,
        }
    }
    (admitted, refused, calls(raw).await)
}

#[tokio::test]
async fn a_flood_of_refused_requests_costs_no_store_calls_once_cached() {
    let (_server, tenure, mut raw) = start().await;
    let quota = Quota::per_minute(nz(5));
    for alg in [Algorithm::Gcra, Algorithm::SlidingWindow] {
        let plain = tenure.limiter(quota, alg);
        let cached = tenure
            .limiter(quota, alg)
            .cache_blocked(NonZeroUsize::new(100).expect("nonzero"));
        flushall(&mut raw).await;
        let (a, r, without) = flood(&plain, &mut raw, 200).await;
        assert_eq!((a, r), (5, 195), "{alg}");
        let per_refusal = (without - a) as f64 / r as f64;
        assert!(
            per_refusal >= 1.0,
            "{alg}: {without} calls without the cache"
        );
        flushall(&mut raw).await;
        let (a, r, with) = flood(&cached, &mut raw, 200).await;
        assert_eq!((a, r), (5, 195), "{alg}: the same answers with the cache");
        // Five admissions and the first refusal reach the store; the other
        // 194 refusals are answered here.
        assert_eq!(with, 6, "{alg}: {with} calls with the cache");
        eprintln!(
            "{alg}: store calls per refused request {per_refusal:.2} without, {:.3} with the cache",
            (with - a) as f64 / r as f64
        );
    }
}

#[tokio::test]
async fn a_cached_refusal_ends_no_later_than_its_retry_after() {
    let (_server, tenure, _raw) = start().await;
    // 4 per second: a refusal after a burst says "retry in ~250 ms".
    let limiter = tenure
        .limiter(Quota::per_second(nz(4)), Algorithm::Gcra)
        .cache_blocked(NonZeroUsize::new(10).expect("nonzero"));
    let uncached = tenure.limiter(Quota::per_second(nz(4)), Algorithm::Gcra);
    assert!(limiter.check_n("k", 4).await.expect("burst").allowed);
    let refused = limiter.check("k").await.expect("check");
    assert!(!refused.allowed);
    let retry = refused.retry_after.expect("retry_after");
    // While refused: the cache's answers shrink with time, and the store
    // (asked without the cache) agrees it refuses.
    let again = limiter.check("k").await.expect("check");
    assert!(!again.allowed && again.retry_after <= Some(retry));
    assert!(!uncached.peek("k").await.expect("peek").allowed);
    // Right after retry_after the cache has let go: the store admits.
    tokio::time::sleep(retry + Duration::from_millis(5)).await;
    assert!(limiter.check("k").await.expect("check").allowed);
}

#[tokio::test]
async fn a_lower_cost_or_another_key_still_asks_the_store() {
    let (_server, tenure, mut raw) = start().await;
    let limiter = tenure
        .limiter(Quota::per_minute(nz(10)), Algorithm::FixedWindow)
        .cache_blocked(NonZeroUsize::new(10).expect("nonzero"));
    assert!(limiter.check_n("k", 8).await.expect("take 8").allowed);
    assert!(!limiter.check_n("k", 5).await.expect("5 of 2").allowed);
    reset(&mut raw).await;
    assert!(!limiter.check_n("k", 6).await.expect("cached").allowed);
    assert_eq!(calls(&mut raw).await, 0, "a higher cost is answered here");
    assert!(limiter.check_n("k", 2).await.expect("2 of 2").allowed);
    assert!(limiter.check("other").await.expect("other").allowed);
    assert_eq!(calls(&mut raw).await, 2, "a lower cost and another key ask");
}

#[tokio::test]
async fn injected_instants_are_never_cached() {
    let tenure = Coordinator::memory();
    let limiter = Limiter::on(
        std::sync::Arc::clone(tenure.limits()),
        Quota::per_second(nz(1)),
        Algorithm::Gcra,
    )
    .cache_blocked(NonZeroUsize::new(10).expect("nonzero"));
    assert!(take(&limiter, "k", 1, 0).await.allowed);
    assert!(!take(&limiter, "k", 1, 1).await.allowed);
    // A simulated second later: the store decides, not a cached refusal.
    assert!(take(&limiter, "k", 1, 1_000_001).await.allowed);
}

#[tokio::test]
async fn a_refund_or_reset_through_the_limiter_forgets_the_refusal() {
    let (_server, tenure, mut raw) = start().await;
    let limiter = tenure
        .limiter(Quota::per_hour(nz(2)), Algorithm::FixedWindow)
        .cache_blocked(NonZeroUsize::new(10).expect("nonzero"));
    assert!(limiter.check_n("k", 2).await.expect("take 2").allowed);
    assert!(!limiter.check("k").await.expect("refused").allowed);
    let _ = limiter.refund("k", 1).await.expect("refund");
    reset(&mut raw).await;
    assert!(limiter.check("k").await.expect("after the refund").allowed);
    assert!(!limiter.check("k").await.expect("refused again").allowed);
    assert_eq!(calls(&mut raw).await, 2, "both asked the store");
    limiter.reset("k").await.expect("reset");
    assert!(limiter.check("k").await.expect("after the reset").allowed);
}
