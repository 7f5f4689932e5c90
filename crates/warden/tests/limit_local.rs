//! The in-process keyed limiter: bounded memory, idle keys evicted; waiting
//! with jitter on tokio's paused clock.

mod limit_common;

use std::time::Duration;

use limit_common::*;
use tokio::time::Instant;
use warden::limit::{Algorithm, Limiter, LocalLimits, Quota};

#[tokio::test]
async fn memory_stays_bounded_under_many_keys() {
    let store = LocalLimits::new().max_keys(100);
    let l = Limiter::new(store.clone(), Quota::per_hour(nz(5)), Algorithm::Gcra);
    for i in 0..10_000 {
        assert!(l.check(&format!("ip:{i}")).await.expect("check").allowed);
        assert!(store.len() <= 100, "{} keys after {i}", store.len());
    }
    // The most recent keys survive eviction (the oldest expire first).
    assert!(!l.check_n("ip:9999", 5).await.expect("check").allowed);
}

#[tokio::test]
async fn idle_keys_are_evicted() {
    let store = LocalLimits::new();
    let l = Limiter::new(
        store.clone(),
        Quota::per_second(nz(5)),
        Algorithm::SlidingLog,
    );
    for i in 0..3000 {
        take(&l, &format!("old:{i}"), 1, 0).await;
    }
    assert_eq!(store.len(), 3000);
    // After their period these keys read as fresh; a sweep drops them.
    for i in 0..5000 {
        take(&l, &format!("new:{i}"), 1, 2_000_000).await;
    }
    assert!(
        store.len() <= 5000,
        "{} keys: idle ones not evicted",
        store.len()
    );
}

#[tokio::test(start_paused = true)]
async fn wait_sleeps_until_allowed_with_bounded_jitter() {
    let l = Limiter::local(Quota::per_second(nz(10)), Algorithm::Gcra);
    assert!(l.check_n("job", 10).await.expect("burst").allowed);
    let start = Instant::now();
    let d = l.wait("job", Duration::from_secs(5)).await.expect("wait");
    assert!(d.allowed);
    let waited = start.elapsed();
    // One interval (100 ms) plus at most a quarter of it as jitter.
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(waited <= Duration::from_millis(126), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn wait_gives_up_at_once_when_max_wait_is_too_short() {
    let l = Limiter::local(Quota::per_second(nz(1)), Algorithm::FixedWindow);
    assert!(l.check("job").await.expect("first").allowed);
    let start = Instant::now();
    let d = l
        .wait("job", Duration::from_millis(10))
        .await
        .expect("wait");
    assert!(!d.allowed);
    assert!(d.retry_after.is_some());
    assert_eq!(start.elapsed(), Duration::ZERO, "no sleep in vain");
}

#[tokio::test(start_paused = true)]
async fn many_waiters_all_get_through_in_time() {
    let l = Limiter::local(Quota::per_second(nz(20)), Algorithm::SlidingWindow);
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            l.wait("shared", Duration::from_secs(10))
                .await
                .expect("wait")
                .allowed
        }));
    }
    let start = Instant::now();
    for t in tasks {
        assert!(t.await.expect("task"));
    }
    // 40 units at 20 per second: at least one window must pass.
    assert!(
        start.elapsed() >= Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}
