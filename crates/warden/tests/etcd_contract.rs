//! The lease contract (see `lease_contract.rs`) on a real single-member etcd.
//!
//! Mirrored rather than shared: etcd counts lease TTLs in whole seconds (warden
//! rounds up) and ends expired leases in a sweep every 500 ms, so every "after
//! expiry" here waits on the store with a bound instead of sleeping a 300 ms
//! TTL twice. The sub-second behaviour itself is pinned by
//! `a_sub_second_ttl_counts_locally_from_the_asked_ttl_while_etcd_holds_a_whole_second`.

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use warden::etcd::{EtcdOptions, EtcdStore};
use warden::{Error, ExtendOutcome, ReleaseOutcome, TryAcquire, Warden};
use warden_test::EtcdCluster;

/// The shortest etcd lease: one second.
const SECOND: Duration = Duration::from_secs(1);
/// A sub-second TTL: etcd holds the key for a whole second, the holder counts 300 ms.
const SHORT: Duration = Duration::from_millis(300);
/// How long an expired 1 s etcd lease can take to disappear: its TTL, the
/// leader's 500 ms expiry sweep, a Raft commit, and slack for a loaded machine.
const EXPIRY_BOUND: Duration = Duration::from_secs(4);

struct Fixture {
    warden: Warden,
    _etcd: EtcdCluster,
}

async fn etcd() -> Fixture {
    let etcd = EtcdCluster::single();
    let store = EtcdStore::connect(
        &etcd.url(),
        EtcdOptions::default().timeout(Duration::from_millis(1000)),
    )
    .await
    .expect("connect to the test etcd");
    Fixture {
        warden: Warden::with_backend(store),
        _etcd: etcd,
    }
}

/// Waits until `key` is free on the store; returns how long that took.
async fn until_free(fx: &Fixture, key: &str) -> Duration {
    let start = Instant::now();
    loop {
        if !fx.warden.status(key).await.unwrap().held {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < EXPIRY_BOUND,
            "{key} still held after {EXPIRY_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

macro_rules! etcd_contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let fx = super::etcd().await;
                super::$name(&fx).await;
            }
        )*
    };
}

mod etcd_store {
    etcd_contract!(
        second_acquire_fails_while_held_then_succeeds_after_expiry,
        release_and_extend_by_a_stale_holder_change_nothing,
        watchdog_keeps_the_lease_for_several_ttls,
        lost_signal_fires_at_the_local_deadline_without_renewal,
        a_sub_second_ttl_counts_locally_from_the_asked_ttl_while_etcd_holds_a_whole_second,
        extend_never_revives_an_expired_lease,
        release_hands_over_to_a_waiter_quickly,
        waiter_gets_an_expiring_lease_when_its_ttl_runs_out,
        acquire_within_gives_up_at_its_deadline,
        dropping_a_guard_releases_in_the_background,
        sixty_four_tasks_lose_no_increment_and_fences_increase,
        run_cancels_work_when_the_lease_is_lost,
        bad_input_is_a_clear_error,
        a_ttl_or_renewal_that_leaves_no_validity_is_refused,
        fences_are_create_revisions_increasing_across_keys_and_holders,
        rate_limits_are_refused_naming_redis_and_sqlite,
    );
}

async fn second_acquire_fails_while_held_then_succeeds_after_expiry(fx: &Fixture) {
    let lease = fx.warden.lease("two-tasks").ttl(SECOND);
    let start = Instant::now();
    let first = lease.try_acquire().await.expect("acquire");
    assert!(first.is_acquired(), "the key is free");
    match lease.try_acquire().await.expect("second attempt") {
        TryAcquire::Held { ttl_left } => {
            let left = ttl_left.expect("a TTL is set");
            assert!(left <= SECOND && !left.is_zero(), "ttl_left {left:?}");
        }
        TryAcquire::Acquired(_) => panic!("second task acquired a held lease"),
    }
    // Not before etcd's TTL; soon after it.
    let again = lease
        .acquire_within(EXPIRY_BOUND)
        .await
        .expect("third attempt");
    assert!(again.is_acquired(), "the lease is free again after its TTL");
    assert!(
        start.elapsed() >= SECOND,
        "freed after {:?}",
        start.elapsed()
    );
    drop(first);
}

async fn release_and_extend_by_a_stale_holder_change_nothing(fx: &Fixture) {
    let lease = fx.warden.lease("stale").ttl(SECOND);
    let a = lease.try_acquire().await.unwrap().into_guard().unwrap();
    let long = fx.warden.lease("stale").ttl(Duration::from_secs(20));
    let b = long
        .acquire_within(EXPIRY_BOUND)
        .await
        .unwrap()
        .into_guard()
        .expect("B gets the key once A's lease expired");
    assert!(b.fence() > a.fence());

    assert_eq!(a.extend().await.unwrap(), ExtendOutcome::NotHeld);
    assert!(a.is_lost());
    let before = fx.warden.status("stale").await.unwrap();
    assert_eq!(a.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let after = fx.warden.status("stale").await.unwrap();
    assert!(after.held, "B's lease must survive A's release");
    assert_eq!(after.fence, Some(b.fence()));
    // A's extend must not have touched B's lease.
    assert!(
        after.ttl_left.unwrap() > Duration::from_secs(15),
        "{before:?} {after:?}"
    );
    assert!(!b.is_lost());
    assert_eq!(b.release().await.unwrap(), ReleaseOutcome::Released);
}

async fn watchdog_keeps_the_lease_for_several_ttls(fx: &Fixture) {
    let lease = fx.warden.lease("watchdog").ttl(SECOND).watchdog(true);
    let guard = lease.try_acquire().await.unwrap().into_guard().unwrap();
    let other = fx.warden.lease("watchdog").ttl(SECOND);
    let start = Instant::now();
    while start.elapsed() < SECOND * 4 {
        tokio::time::sleep(SECOND / 2).await;
        assert!(!guard.is_lost(), "lost after {:?}", start.elapsed());
        assert!(!other.try_acquire().await.unwrap().is_acquired());
    }
    assert!(guard.remaining() > Duration::ZERO);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(other.try_acquire().await.unwrap().is_acquired());
}

async fn lost_signal_fires_at_the_local_deadline_without_renewal(fx: &Fixture) {
    let lease = fx.warden.lease("deadline").ttl(SECOND);
    let start = Instant::now();
    let guard = lease.try_acquire().await.unwrap().into_guard().unwrap();
    let budget = SECOND - warden::lease::drift(SECOND);
    assert!(guard.remaining() <= budget, "{:?}", guard.remaining());
    assert!(guard.remaining() > budget / 2, "{:?}", guard.remaining());
    let lost = guard.lost();
    tokio::time::timeout(SECOND * 10, lost.wait())
        .await
        .expect("lost signal fires");
    let fired_after = start.elapsed();
    assert!(
        fired_after >= budget / 2,
        "fired too early: {fired_after:?}"
    );
    assert!(guard.is_lost());
    assert_eq!(guard.remaining(), Duration::ZERO);
}

/// The documented TTL mapping: etcd's TTL is rounded *up* to whole seconds,
/// the holder's deadline comes from the TTL asked for. So the holder gives up
/// after ~300 ms while etcd still refuses everyone else until the second is
/// over — never the other way round.
async fn a_sub_second_ttl_counts_locally_from_the_asked_ttl_while_etcd_holds_a_whole_second(
    fx: &Fixture,
) {
    let lease = fx.warden.lease("sub-second").ttl(SHORT);
    let start = Instant::now();
    let guard = lease.try_acquire().await.unwrap().into_guard().unwrap();
    assert!(guard.remaining() <= SHORT - warden::lease::drift(SHORT));
    tokio::time::timeout(SECOND * 5, guard.lost().wait())
        .await
        .expect("lost at the local deadline");
    let lost_after = start.elapsed();
    // The holder has stopped believing; etcd still holds the key.
    let status = fx.warden.status("sub-second").await.unwrap();
    if start.elapsed() < SECOND {
        assert!(
            status.held,
            "etcd let go before its whole second: {status:?}"
        );
        assert!(!lease.try_acquire().await.unwrap().is_acquired());
    }
    let freed_after = lost_after + until_free(fx, "sub-second").await;
    assert!(
        freed_after >= SECOND,
        "etcd freed the key after {freed_after:?}, before the rounded-up TTL"
    );
    assert!(lost_after < SECOND, "lost only after {lost_after:?}");
}

async fn extend_never_revives_an_expired_lease(fx: &Fixture) {
    let lease = fx.warden.lease("revive").ttl(SECOND);
    let guard = lease.try_acquire().await.unwrap().into_guard().unwrap();
    assert!(matches!(
        guard.extend().await.unwrap(),
        ExtendOutcome::Extended { .. }
    ));
    until_free(fx, "revive").await;
    assert_eq!(guard.extend().await.unwrap(), ExtendOutcome::NotHeld);
    let status = fx.warden.status("revive").await.unwrap();
    assert!(!status.held, "an expired lease stays expired: {status:?}");
}

async fn release_hands_over_to_a_waiter_quickly(fx: &Fixture) {
    let lease = fx.warden.lease("handoff").ttl(Duration::from_secs(30));
    let holder = lease.try_acquire().await.unwrap().into_guard().unwrap();
    let waiter = {
        let lease = lease.clone();
        tokio::spawn(async move {
            let out = lease.acquire_within(Duration::from_secs(20)).await.unwrap();
            (Instant::now(), out.into_guard())
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let released_at = Instant::now();
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let (acquired_at, guard) = waiter.await.unwrap();
    assert!(guard.is_some(), "the waiter got the lease");
    // The holder's TTL was 30 s: only the watch explains a hand-off this fast.
    let handoff = acquired_at - released_at;
    assert!(
        handoff < Duration::from_millis(500),
        "hand-off took {handoff:?}"
    );
}

async fn waiter_gets_an_expiring_lease_when_its_ttl_runs_out(fx: &Fixture) {
    let lease = fx.warden.lease("expiring").ttl(SECOND);
    let holder = lease.try_acquire().await.unwrap().into_guard().unwrap();
    let start = Instant::now();
    let got = lease.acquire_within(Duration::from_secs(10)).await.unwrap();
    assert!(got.is_acquired());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(800),
        "waited only {waited:?}"
    );
    assert!(waited < EXPIRY_BOUND, "waited {waited:?}");
    drop(holder);
}

async fn acquire_within_gives_up_at_its_deadline(fx: &Fixture) {
    let lease = fx
        .warden
        .lease("deadline-wait")
        .ttl(Duration::from_secs(30));
    let _holder = lease.try_acquire().await.unwrap().into_guard().unwrap();
    let start = Instant::now();
    let out = lease
        .acquire_within(Duration::from_millis(400))
        .await
        .unwrap();
    assert!(matches!(out, TryAcquire::Held { .. }));
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

async fn dropping_a_guard_releases_in_the_background(fx: &Fixture) {
    let lease = fx.warden.lease("dropped").ttl(Duration::from_secs(30));
    drop(lease.try_acquire().await.unwrap());
    let again = lease.acquire_within(Duration::from_secs(5)).await.unwrap();
    assert!(
        again.is_acquired(),
        "drop released the key long before its TTL"
    );
}

async fn sixty_four_tasks_lose_no_increment_and_fences_increase(fx: &Fixture) {
    let counter = Arc::new(tokio::sync::Mutex::new(0u64));
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let lease = fx.warden.lease("counter").ttl(Duration::from_secs(10));
        let (counter, log) = (Arc::clone(&counter), Arc::clone(&log));
        tasks.push(tokio::spawn(async move {
            let guard = lease
                .acquire_within(Duration::from_secs(60))
                .await
                .unwrap()
                .into_guard()
                .expect("acquired within a minute");
            let seen = *counter.lock().await;
            tokio::task::yield_now().await;
            *counter.lock().await = seen + 1;
            log.lock().unwrap().push((seen, guard.fence()));
            guard.release().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*counter.lock().await, 64, "an increment was lost");
    let mut log = log.lock().unwrap().clone();
    log.sort();
    for pair in log.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "fences must increase in acquisition order: {pair:?}"
        );
    }
}

async fn run_cancels_work_when_the_lease_is_lost(fx: &Fixture) {
    let guard = fx
        .warden
        .lease("run")
        .ttl(SHORT)
        .try_acquire()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let out = guard
        .run(async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "finished"
        })
        .await;
    assert!(matches!(out, Err(Error::LeaseLost { .. })), "{out:?}");
    let quick = fx.warden.lease("run2").try_acquire().await.unwrap();
    let guard = quick.into_guard().unwrap();
    assert_eq!(guard.run(async { 7 }).await.unwrap(), 7);
}

async fn bad_input_is_a_clear_error(fx: &Fixture) {
    let err = fx.warden.lease("").try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
    let huge = "k".repeat(5000);
    let err = fx.warden.lease(huge).try_acquire().await.unwrap_err();
    assert!(err.to_string().contains("5000 bytes"), "{err}");
    let err = fx
        .warden
        .lease("zero")
        .ttl(Duration::ZERO)
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ttl"), "{err}");
    let err = fx
        .warden
        .lease("forever")
        .ttl(Duration::MAX)
        .acquire_within(Duration::MAX)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { what: "ttl", .. }),
        "{err}"
    );
    assert!(fx.warden.status("").await.is_err());
}

async fn a_ttl_or_renewal_that_leaves_no_validity_is_refused(fx: &Fixture) {
    use warden::lease::MIN_TTL;
    for ms in [1, 2, 3, 9] {
        let err = fx
            .warden
            .lease("short")
            .ttl(Duration::from_millis(ms))
            .try_acquire()
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { what: "ttl", .. }),
            "{ms} ms: {err}"
        );
    }
    let status = fx.warden.status("short").await.unwrap();
    assert!(!status.held && status.fence.is_none(), "{status:?}");
    // The shortest accepted TTL is granted (etcd holds it a whole second).
    let guard = fx
        .warden
        .lease("shortest")
        .ttl(MIN_TTL)
        .try_acquire()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    assert!(guard.remaining() <= MIN_TTL);
    drop(guard);
}

async fn fences_are_create_revisions_increasing_across_keys_and_holders(fx: &Fixture) {
    let mut last = 0u64;
    for round in 0..3 {
        for key in ["fence-a", "fence-b"] {
            let guard = fx
                .warden
                .lease(key)
                .ttl(Duration::from_secs(10))
                .try_acquire()
                .await
                .unwrap()
                .into_guard()
                .unwrap();
            let fence = guard.fence().get();
            assert!(fence > last, "round {round} {key}: {fence} after {last}");
            last = fence;
            let status = fx.warden.status(key).await.unwrap();
            assert_eq!(status.fence, Some(guard.fence()));
            assert!(status.storage_key.ends_with(key), "{status:?}");
            // Extending keeps the fence (the key is not re-created).
            assert!(matches!(
                guard.extend().await.unwrap(),
                ExtendOutcome::Extended { .. }
            ));
            assert_eq!(
                fx.warden.status(key).await.unwrap().fence,
                Some(guard.fence())
            );
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            let free = fx.warden.status(key).await.unwrap();
            assert!(!free.held && free.fence.is_none(), "{free:?}");
        }
    }
}

async fn rate_limits_are_refused_naming_redis_and_sqlite(fx: &Fixture) {
    use std::num::NonZeroU32;
    use warden::limit::{Algorithm, Quota};
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    // `Warden::connect` puts the refusal in (`with_backend` keeps limits in
    // this process, as on every store).
    let url = fx._etcd.url();
    let warden = Warden::connect(&url).await.unwrap();
    let err = warden
        .limiter(quota, Algorithm::Gcra)
        .check("ip")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Config { .. }), "{text}");
    assert!(
        text.contains("redis://") && text.contains("sqlite:"),
        "{text}"
    );
}
