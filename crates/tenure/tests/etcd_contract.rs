//! The lease contract (see `lease_contract.rs`) on a real single-member etcd,
//! plus what only etcd has.
//!
//! The contract's bodies are shared (`lease_common`) and run here at etcd's
//! time scale: etcd counts lease TTLs in whole seconds (tenure rounds up) and
//! ends expired leases in a sweep every 500 ms, so every "after expiry" waits
//! on the store with a bound instead of sleeping a 300 ms TTL twice. The
//! sub-second behaviour itself is pinned by
//! `a_sub_second_ttl_counts_locally_from_the_asked_ttl_while_etcd_holds_a_whole_second`.

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)]

mod lease_common;

use std::time::Duration;

use lease_common::{Timing, until_expired};
use tenure::etcd::{EtcdOptions, EtcdStore};
use tenure::{Coordinator, Error, ExtendOutcome, ReleaseOutcome};
use tenure_test::EtcdCluster;
use tokio::time::Instant;

/// The shortest etcd lease: one second.
const SECOND: Duration = Duration::from_secs(1);
/// A sub-second TTL: etcd holds the key for a whole second, the holder counts 300 ms.
const SHORT: Duration = Duration::from_millis(300);

/// etcd's time scale: whole-second TTLs. An expired 1 s lease can take its
/// TTL, the leader's 500 ms expiry sweep, a Raft commit and slack for a loaded
/// machine to disappear: 4 s.
const ETCD: Timing = Timing {
    short: SECOND,
    watchdog_ttl: SECOND,
    watchdog_ttls: 4,
    waiter_ttl: SECOND,
    waiter_max: Duration::from_secs(4),
    expiry_bound: Some(Duration::from_secs(4)),
};

struct Fixture {
    tenure: Coordinator,
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
        tenure: Coordinator::with_backend(store),
        _etcd: etcd,
    }
}

/// One test per function: `shared:` ones run the lease contract at etcd's
/// time scale, the others are etcd's own.
macro_rules! etcd_contract {
    (shared: $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let fx = super::etcd().await;
                crate::lease_common::$name(&fx.tenure, &super::ETCD).await;
            }
        )*
    };
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
        shared:
        second_acquire_fails_while_held_then_succeeds_after_expiry,
        release_and_extend_by_a_stale_holder_change_nothing,
        watchdog_keeps_the_lease_for_several_ttls,
        lost_signal_fires_at_the_local_deadline_without_renewal,
        extend_never_revives_an_expired_lease,
        release_hands_over_to_a_waiter_quickly,
        waiter_gets_an_expiring_lease_when_its_ttl_runs_out,
        acquire_within_gives_up_at_its_deadline,
        dropping_a_guard_releases_in_the_background,
        sixty_four_tasks_lose_no_increment_and_fences_increase,
        run_cancels_work_when_the_lease_is_lost,
        bad_input_is_a_clear_error,
        a_ttl_or_renewal_that_leaves_no_validity_is_refused,
        holder_is_recorded_read_by_anyone_and_released_with_the_lease,
        holder_record_expires_with_the_lease,
        list_shows_the_held_leases_under_a_prefix,
        a_waiter_that_gets_the_lease_records_itself,
    );
    etcd_contract!(
        a_sub_second_ttl_counts_locally_from_the_asked_ttl_while_etcd_holds_a_whole_second,
        fences_are_create_revisions_increasing_across_keys_and_holders,
        rate_limits_are_refused_naming_redis_and_sqlite,
    );
}

/// The documented TTL mapping: etcd's TTL is rounded *up* to whole seconds,
/// the holder's deadline comes from the TTL asked for. So the holder gives up
/// after ~300 ms while etcd still refuses everyone else until the second is
/// over — never the other way round.
async fn a_sub_second_ttl_counts_locally_from_the_asked_ttl_while_etcd_holds_a_whole_second(
    fx: &Fixture,
) {
    let lease = fx.tenure.lease("sub-second").watchdog(false).ttl(SHORT);
    let start = Instant::now();
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(guard.remaining() <= SHORT - tenure::lease::drift(SHORT));
    tokio::time::timeout(SECOND * 5, guard.lost().wait())
        .await
        .expect("lost at the local deadline");
    let lost_after = start.elapsed();
    // The holder has stopped believing; etcd still holds the key.
    let status = fx.tenure.status("sub-second").await.unwrap();
    if start.elapsed() < SECOND {
        assert!(
            status.held,
            "etcd let go before its whole second: {status:?}"
        );
        assert!(!lease.attempt().await.unwrap().is_acquired());
    }
    let freed_after = lost_after + until_expired(&fx.tenure, "sub-second", &ETCD).await;
    assert!(
        freed_after >= SECOND,
        "etcd freed the key after {freed_after:?}, before the rounded-up TTL"
    );
    assert!(lost_after < SECOND, "lost only after {lost_after:?}");
}

async fn fences_are_create_revisions_increasing_across_keys_and_holders(fx: &Fixture) {
    let mut last = 0u64;
    for round in 0..3 {
        for key in ["fence-a", "fence-b"] {
            let guard = fx
                .tenure
                .lease(key)
                .watchdog(false)
                .ttl(Duration::from_secs(10))
                .attempt()
                .await
                .unwrap()
                .into_guard()
                .unwrap();
            let fence = guard.fence().get();
            assert!(fence > last, "round {round} {key}: {fence} after {last}");
            last = fence;
            let status = fx.tenure.status(key).await.unwrap();
            assert_eq!(status.fence, Some(guard.fence()));
            assert!(status.storage_key.ends_with(key), "{status:?}");
            // Extending keeps the fence (the key is not re-created).
            assert!(matches!(
                guard.extend().await.unwrap(),
                ExtendOutcome::Extended { .. }
            ));
            assert_eq!(
                fx.tenure.status(key).await.unwrap().fence,
                Some(guard.fence())
            );
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            let free = fx.tenure.status(key).await.unwrap();
            assert!(!free.held && free.fence.is_none(), "{free:?}");
        }
    }
}

async fn rate_limits_are_refused_naming_redis_and_sqlite(fx: &Fixture) {
    use std::num::NonZeroU32;
    use tenure::limit::{Algorithm, Quota};
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    // `Coordinator::connect` puts the refusal in (`with_backend` keeps limits in
    // this process, as on every store).
    let url = fx._etcd.url();
    let tenure = Coordinator::connect(&url).await.unwrap();
    let err = tenure
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
