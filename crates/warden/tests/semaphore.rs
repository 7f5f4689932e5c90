//! Expiring semaphores on every store: at most N, fences, expiry, lowering N,
//! waking waiters, bad input.

#![allow(clippy::unwrap_used, missing_docs)]

mod recipes_common;

use std::num::NonZeroU32;
use std::time::Duration;

use recipes_common::Fixture;
use warden::{Error, TryAcquire};

fn n(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).unwrap()
}

async fn at_most_n_hold_and_fences_increase(fx: &Fixture) {
    let sem = fx.warden.semaphore("sem:n", n(3)).unwrap();
    let lease = sem.lease().ttl(Duration::from_secs(10));
    let mut guards = Vec::new();
    for _ in 0..3 {
        guards.push(
            lease
                .try_acquire()
                .await
                .unwrap()
                .into_guard()
                .expect("free permit"),
        );
    }
    assert!(matches!(
        lease.try_acquire().await.unwrap(),
        TryAcquire::Held { ttl_left: Some(_) }
    ));
    assert_eq!(sem.held().await.unwrap(), 3);
    assert!(guards.windows(2).all(|w| w[0].fence() < w[1].fence()));
    let last = guards.last().unwrap().fence();
    guards.remove(0).release().await.unwrap();
    let again = lease.try_acquire().await.unwrap().into_guard().unwrap();
    assert!(again.fence() > last);
}

async fn lowering_n_never_admits_more_than_the_new_n(fx: &Fixture) {
    let five = fx
        .warden
        .semaphore("sem:lower", n(5))
        .unwrap()
        .lease()
        .ttl(Duration::from_secs(10));
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(five.try_acquire().await.unwrap().into_guard().unwrap());
    }
    let two_sem = fx.warden.semaphore("sem:lower", n(2)).unwrap();
    let two = two_sem.lease().ttl(Duration::from_secs(10));
    // Old holders leave one by one; nobody new gets in until fewer than 2 hold.
    for left in (2..5).rev() {
        old.pop().unwrap().release().await.unwrap();
        assert_eq!(two_sem.held().await.unwrap(), left);
        assert!(
            two.try_acquire().await.unwrap().into_guard().is_none(),
            "{left} held"
        );
    }
    old.pop().unwrap().release().await.unwrap();
    let newcomer = two
        .try_acquire()
        .await
        .unwrap()
        .into_guard()
        .expect("1 < 2 held");
    assert_eq!(two_sem.held().await.unwrap(), 2);
    assert!(two.try_acquire().await.unwrap().into_guard().is_none());
    // The old N admits a third holder (2 held < 5). Its guard is kept: dropping it
    // would release it in the background, racing the count below.
    let third = five.try_acquire().await.unwrap().into_guard();
    assert!(third.is_some());
    assert_eq!(two_sem.held().await.unwrap(), 3);
    drop((newcomer, third));
}

async fn a_silent_holders_permit_expires_with_its_ttl(fx: &Fixture) {
    let sem = fx.warden.semaphore("sem:expire", n(1)).unwrap();
    let short = sem.lease().ttl(Duration::from_millis(200));
    let crashed = short.try_acquire().await.unwrap().into_guard().unwrap();
    // No renewal and no release, as after a crash.
    std::mem::forget(crashed);
    let other = sem.lease().ttl(Duration::from_secs(10));
    assert!(other.try_acquire().await.unwrap().into_guard().is_none());
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        other.acquire_within(Duration::from_secs(5)),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(got.is_acquired(), "the permit came back after its TTL");
}

async fn a_waiter_gets_a_released_permit(fx: &Fixture) {
    let sem = fx.warden.semaphore("sem:wait", n(1)).unwrap();
    let lease = sem.lease().ttl(Duration::from_secs(30));
    let holder = lease.try_acquire().await.unwrap().into_guard().unwrap();
    let waiting = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.acquire_within(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    holder.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert!(got.is_acquired());
}

on_store!(memory: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit);
on_store!(sqlite: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit);
on_store!(redis: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit);
#[cfg(feature = "etcd")]
on_store!(etcd: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permits_key_of_the_wrong_type_is_refused_on_redis() {
    let fx = recipes_common::redis().await;
    fx.server
        .as_ref()
        .unwrap()
        .command("SET warden:{sem:wrong}:permits oops")
        .unwrap();
    let sem = fx.warden.semaphore("sem:wrong", n(2)).unwrap();
    let e = sem.lease().try_acquire().await.unwrap_err();
    assert!(
        matches!(&e, Error::WrongType { key, .. } if key.contains("sem:wrong")),
        "{e}"
    );
    assert!(matches!(sem.held().await, Err(Error::WrongType { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_is_refused_naming_the_alternative() {
    let fx = recipes_common::quorum().await;
    let e = fx.warden.semaphore("sem:q", n(2)).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { what: "store", reason } if reason.contains("one Redis master or SQLite")),
        "{e}"
    );
}

/// Waking waiters is best-effort: an ACL user without channel rights (PUBLISH
/// refused with NOPERM) still gives its permit back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_succeeds_for_a_user_without_channel_rights_on_redis() {
    let server = warden_test::RedisServer::start();
    let url = server.acl_user("app", "s3cret", "~warden:* resetchannels +@all");
    let warden = warden::Warden::connect(&url).await.unwrap();
    let sem = warden.semaphore("sem:acl", n(2)).unwrap();
    let guard = sem
        .lease()
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .into_guard()
        .expect("free permit");
    assert_eq!(
        guard.release().await.unwrap(),
        warden::ReleaseOutcome::Released
    );
    assert_eq!(sem.held().await.unwrap(), 0);
}
