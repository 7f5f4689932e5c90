//! tenure through Redis Sentinel (a master, one replica, three sentinels,
//! started by `tenure_test::RedisSentinels`): the master is found by name,
//! and after it is killed with SIGKILL and the sentinels promote its replica,
//! tenure follows — held leases are renewed or reported lost, never handed to
//! a second holder, and fences go on.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::fence::FencedWrite;
use tenure::limit::{Algorithm, Quota};
use tenure::redis::{RedisFencedStore, RedisLimits, RedisOptions, RedisStore};
use tenure::{Attempt, Coordinator, Error};
use tenure_test::RedisSentinels;
use tokio::time::Instant;

/// Kill, detection (1 s down-after), the sentinels' vote and promotion, and
/// the client's re-discovery, with a generous margin for a loaded machine.
const FAILOVER_BUDGET: Duration = Duration::from_secs(30);

fn options() -> RedisOptions {
    RedisOptions::default().timeout(Duration::from_secs(2))
}

async fn handle(group: &RedisSentinels, options: RedisOptions) -> Coordinator {
    let store = RedisStore::connect(&group.url(), options).await.unwrap();
    let limits = RedisLimits::from_backend(&store);
    Coordinator::with_backend(store.clone())
        .with_limits(limits)
        .with_records(store.clone())
        .with_semaphores(store)
}

async fn until_ok<T, F, Fut>(what: &str, mut op: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = tenure::Result<T>>,
{
    let start = Instant::now();
    loop {
        match op().await {
            Ok(v) => return (v, start.elapsed()),
            Err(e) => {
                assert!(
                    e.is_transient(),
                    "{what}: a permanent error during failover: {e}"
                );
                assert!(
                    start.elapsed() < FAILOVER_BUDGET,
                    "{what}: still failing: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_is_found_by_name_for_leases_limits_and_fences() {
    let group = RedisSentinels::start();
    let w = Coordinator::connect(&group.url()).await.unwrap();
    let lease = w.lease("job").watchdog(false).ttl(Duration::from_secs(30));
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert_eq!(
        group.master.command("EXISTS tenure:{job}").unwrap().trim(),
        ":1"
    );
    let waiter = tokio::spawn({
        let lease = lease.clone();
        async move {
            let start = Instant::now();
            let got = lease.attempt_within(Duration::from_secs(20)).await.unwrap();
            (got.into_guard().map(|g| g.fence()), start.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fence = guard.fence();
    guard.release().await.unwrap();
    let (next, waited) = waiter.await.unwrap();
    assert!(next > Some(fence), "{next:?} after {fence}");
    assert!(
        waited < Duration::from_secs(5),
        "the release did not wake the waiter: {waited:?}"
    );
    let limiter = w.limiter(
        Quota::per_second(NonZeroU32::new(2).unwrap()),
        Algorithm::Gcra,
    );
    assert!(limiter.check("ip").await.unwrap().allowed);
    let fenced = RedisFencedStore::connect(&group.url()).await.unwrap();
    assert_eq!(
        fenced.write("r", fence, "v").await.unwrap(),
        FencedWrite::Applied
    );
    // A master name the sentinels do not monitor: a transient error naming it.
    let unknown = group.url().replace("tenure-master", "nobody");
    let err = Coordinator::connect(&unknown).await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string().contains("nobody") || format!("{err:?}").contains("nobody"),
        "{err:?}"
    );
}

/// Kill -9 the master: the sentinels promote the replica, and tenure's calls
/// answer again once they have. The holder without acknowledgements is
/// renewed on the new master; the holder with `require_replicas(1)` is
/// reported lost (the new master has no replica to acknowledge), and neither
/// lease goes to a second holder before it is released or expires; fences
/// continue above the old ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_follows_a_failover_and_held_leases_are_renewed_or_reported_lost() {
    let mut group = RedisSentinels::start();
    let plain = handle(&group, options()).await;
    let acked = handle(
        &group,
        options().require_replicas(NonZeroU32::new(1).unwrap(), Duration::from_millis(500)),
    )
    .await;
    let other = handle(&group, options()).await;
    let ttl = Duration::from_secs(6);
    let plain_guard = plain
        .lease("sentinel:plain")
        .ttl(ttl)
        .watchdog(true)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let acked_guard = acked
        .lease("sentinel:acked")
        .ttl(ttl)
        .watchdog(true)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let fences = [
        ("sentinel:plain", plain_guard.fence()),
        ("sentinel:acked", acked_guard.fence()),
    ];
    let limiter = other.limiter(
        Quota::per_minute(NonZeroU32::new(100).unwrap()),
        Algorithm::Gcra,
    );
    assert!(limiter.check("k").await.unwrap().allowed);
    // The unacknowledged write gets a generous half second to replicate.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let killed = Instant::now();
    group.master.kill();
    let (_, back) = until_ok("limit", || limiter.check("k")).await;
    group.wait_for_failover();
    for (key, _) in fences {
        let second = other.lease(key).watchdog(false);
        let (held, _) = until_ok("try_acquire", || second.attempt()).await;
        assert!(
            matches!(held, Attempt::Held { .. }),
            "a second holder got {key}"
        );
    }
    eprintln!(
        "master killed: tenure answered again after {back:?}; the sentinels reported the \
         replica as master {:?} after the kill",
        killed.elapsed()
    );

    tokio::time::sleep(ttl * 2).await;
    assert!(
        !plain_guard.is_lost(),
        "the unacknowledged holder was not renewed"
    );
    assert!(
        acked_guard.is_lost(),
        "renewals were confirmed without a replica to acknowledge them"
    );
    plain_guard.release().await.unwrap();
    drop(acked_guard);
    common::assert_fences_go_on(&other, &fences, ttl * 2).await;
}
