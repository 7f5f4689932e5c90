//! The in-process keyed limiter: bounded memory, idle keys dropped, live keys
//! never evicted (a full store refuses new keys); waiting with jitter on
//! tokio's paused clock, which a store made with `tokio_clock` decides on.

mod limit_common;

use std::time::Duration;

use limit_common::*;
use tenure::limit::{Algorithm, Limiter, Quota};
use tenure::memory::MemoryLimits;
use tokio::time::Instant;

#[tokio::test]
async fn memory_stays_bounded_under_many_keys() {
    let store = MemoryLimits::new().max_keys(100);
    let l = Limiter::new(store.clone(), Quota::per_hour(nz(5)), Algorithm::Gcra);
    for i in 0..10_000 {
        let d = l.check(&format!("ip:{i}")).await.expect("check");
        // The first 100 keys fit; after that the store is full of keys that
        // still remember what they consumed, and a new key is refused until
        // one of them is back to fresh (not let in by forgetting another).
        assert_eq!(d.allowed, i < 100, "key {i}: {d:?}");
        if !d.allowed {
            let wait = d.retry_after.expect("a refusal says when");
            assert!(wait <= Duration::from_secs(3600), "{wait:?}");
        }
        assert!(store.len() <= 100, "{} keys after {i}", store.len());
    }
    // Keys already held keep working, and keep their state.
    assert!(l.check_n("ip:99", 4).await.expect("check").allowed);
    assert!(!l.check("ip:99").await.expect("check").allowed);
}

#[tokio::test]
async fn a_flood_of_new_keys_never_resets_a_victim() {
    for alg in Algorithm::ALL {
        let store = MemoryLimits::new().max_keys(100);
        let login = Limiter::new(store.clone(), Quota::per_hour(nz(10)), alg);
        // The victim's key is at its limit: ten guesses in the first second.
        for i in 0..10 {
            assert!(take(&login, "user:victim", 1, i).await.allowed, "{alg}");
        }
        assert!(!take(&login, "user:victim", 1, 20).await.allowed, "{alg}");
        // The attacker floods throwaway keys, ten times the bound, over the
        // next minute: each one would expire after the victim's key.
        let mut refused = 0;
        for i in 0..1000u64 {
            let d = take(&login, &format!("junk:{i}"), 1, 1_000_000 + i * 60_000).await;
            if !d.allowed {
                refused += 1;
                assert!(d.retry_after.is_some(), "{alg}: {d:?}");
            }
            assert!(store.len() <= 100, "{alg}: {} keys", store.len());
        }
        // The victim's key still remembers its ten guesses.
        let d = take(&login, "user:victim", 1, 61_000_000).await;
        assert!(!d.allowed, "{alg}: the flood reset the victim: {d:?}");
        assert!(!look(&login, "user:victim", 1, 61_000_000).await.allowed);
        assert!(
            refused >= 900,
            "{alg}: only {refused} throwaway keys refused"
        );
    }
}

#[tokio::test]
async fn a_full_store_takes_new_keys_again_once_a_key_is_fresh() {
    let store = MemoryLimits::new().max_keys(10);
    let l = Limiter::new(
        store.clone(),
        Quota::per_second(nz(5)),
        Algorithm::SlidingLog,
    );
    for i in 0..10 {
        assert!(take(&l, &format!("k:{i}"), 1, i * 1000).await.allowed);
    }
    // Full: the next new key waits until the oldest key (k:0, used at 0 µs)
    // is back to fresh, one period later.
    let d = take(&l, "new", 1, 500_000).await;
    assert!(!d.allowed, "{d:?}");
    assert_eq!(d.retry_after, Some(Duration::from_micros(500_000)));
    assert_eq!(d.remaining, 0);
    // Peeking at a new key never needs room.
    assert!(look(&l, "new", 1, 500_000).await.allowed);
    // Once k:0 reads as fresh, dropping it forgets nothing: "new" gets in.
    assert!(take(&l, "new", 1, 1_000_000).await.allowed);
    assert!(store.len() <= 10);
    assert!(!take(&l, "newer", 1, 1_000_500).await.allowed);
}

#[tokio::test]
async fn idle_keys_are_evicted() {
    let store = MemoryLimits::new();
    let l = Limiter::new(
        store.clone(),
        Quota::per_second(nz(5)),
        Algorithm::SlidingLog,
    );
    for i in 0..3000 {
        let _ = take(&l, &format!("old:{i}"), 1, 0).await;
    }
    assert_eq!(store.len(), 3000);
    // After their period these keys read as fresh; a sweep drops them.
    for i in 0..5000 {
        let _ = take(&l, &format!("new:{i}"), 1, 2_000_000).await;
    }
    assert!(
        store.len() <= 5000,
        "{} keys: idle ones not evicted",
        store.len()
    );
}

/// A limiter deciding on tokio's clock, which these tests pause.
fn on_paused_clock(quota: Quota, algorithm: Algorithm) -> Limiter {
    Limiter::new(MemoryLimits::new().tokio_clock(), quota, algorithm)
}

#[tokio::test(start_paused = true)]
async fn wait_sleeps_until_allowed_with_bounded_jitter() {
    let l = on_paused_clock(Quota::per_second(nz(10)), Algorithm::Gcra);
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
    // An hour's window: the wall-clock window boundary cannot fall between
    // the two checks (with a second's, it did under load).
    let l = on_paused_clock(Quota::per_hour(nz(1)), Algorithm::FixedWindow);
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
    let l = on_paused_clock(Quota::per_second(nz(20)), Algorithm::SlidingWindow);
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

/// `check`/`run` answer an in-process store's request inline (no future, one
/// policy without vectors); `decide_each` goes through the store's async
/// `apply`. Both must decide alike, for one policy and for a compound
/// limiter, allowed and refused, on the same sequence of costs and instants.
#[tokio::test]
async fn the_inline_path_decides_like_the_store_s_apply() {
    use tenure::limit::{Decision, Mode, Timestamp};
    let t0 = 1_700_000_000_000_000u64;
    for alg in Algorithm::ALL {
        for compound in [false, true] {
            let build = || {
                let l = Limiter::new(MemoryLimits::new(), Quota::per_second(nz(5)), alg);
                if compound {
                    l.and(Quota::per_minute(nz(12)), Algorithm::FixedWindow)
                } else {
                    l
                }
            };
            let (inline, applied) = (build(), build());
            let (mut allowed, mut refused) = (0, 0);
            for i in 0..200u64 {
                let now = Some(Timestamp::from_micros(t0 + i * 37_000));
                let (key, cost) = (format!("k{}", i % 3), 1 + (i % 3) as u32);
                let a = inline
                    .decide(&key, cost, Mode::Consume, now)
                    .await
                    .expect("inline");
                let each = applied.decide_each(&key, cost, Mode::Consume, now).await;
                let b = Decision::combine(&each.expect("apply")).expect("one decision");
                assert_eq!(a, b, "{alg} compound={compound} step {i}");
                if a.allowed {
                    allowed += 1
                } else {
                    refused += 1
                }
            }
            assert!(
                allowed > 0 && refused > 0,
                "{alg}: {allowed} allowed, {refused} refused"
            );
        }
    }
}
