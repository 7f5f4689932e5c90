//! Expiring semaphores on every store: at most N, fences, expiry, lowering N,
//! waking waiters, bad input.

#![allow(clippy::unwrap_used, missing_docs)]

mod recipes_common;

use std::num::NonZeroU32;
use std::time::Duration;

use recipes_common::Fixture;
use tenure::{Attempt, Error};

fn n(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).unwrap()
}

async fn at_most_n_hold_and_fences_increase(fx: &Fixture) {
    let sem = fx.tenure.semaphore("sem:n", n(3)).unwrap();
    let lease = sem.lease().watchdog(false).ttl(Duration::from_secs(10));
    let mut guards = Vec::new();
    for _ in 0..3 {
        guards.push(
            lease
                .attempt()
                .await
                .unwrap()
                .into_guard()
                .expect("free permit"),
        );
    }
    assert!(matches!(
        lease.attempt().await.unwrap(),
        Attempt::Held { ttl_left: Some(_) }
    ));
    assert_eq!(sem.held().await.unwrap(), 3);
    assert!(guards.windows(2).all(|w| w[0].fence() < w[1].fence()));
    let last = guards.last().unwrap().fence();
    guards.remove(0).release().await.unwrap();
    let again = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(again.fence() > last);
}

async fn lowering_n_never_admits_more_than_the_new_n(fx: &Fixture) {
    let five = fx
        .tenure
        .semaphore("sem:lower", n(5))
        .unwrap()
        .lease()
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(five.attempt().await.unwrap().into_guard().unwrap());
    }
    let two_sem = fx.tenure.semaphore("sem:lower", n(2)).unwrap();
    let two = two_sem.lease().watchdog(false).ttl(Duration::from_secs(10));
    // Old holders leave one by one; nobody new gets in until fewer than 2 hold.
    for left in (2..5).rev() {
        old.pop().unwrap().release().await.unwrap();
        assert_eq!(two_sem.held().await.unwrap(), left);
        assert!(
            two.attempt().await.unwrap().into_guard().is_none(),
            "{left} held"
        );
    }
    old.pop().unwrap().release().await.unwrap();
    let newcomer = two
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .expect("1 < 2 held");
    assert_eq!(two_sem.held().await.unwrap(), 2);
    // Settled at 2: nobody else gets in against the new N.
    for _ in 0..3 {
        assert!(two.attempt().await.unwrap().into_guard().is_none());
    }
    assert_eq!(two_sem.held().await.unwrap(), 2);
    // A caller still on the old N is admitted up to 5 — never a sixth.
    let mut late = Vec::new();
    while let Some(guard) = five.attempt().await.unwrap().into_guard() {
        late.push(guard);
        assert!(late.len() <= 3, "a sixth permit was granted");
    }
    assert_eq!(late.len(), 3);
    assert_eq!(two_sem.held().await.unwrap(), 5);
    drop(newcomer);
}

async fn a_silent_holders_permit_expires_with_its_ttl(fx: &Fixture) {
    let sem = fx.tenure.semaphore("sem:expire", n(1)).unwrap();
    let short = sem.lease().watchdog(false).ttl(Duration::from_millis(200));
    let crashed = short.attempt().await.unwrap().into_guard().unwrap();
    // No renewal and no release, as after a crash.
    std::mem::forget(crashed);
    let other = sem.lease().watchdog(false).ttl(Duration::from_secs(10));
    assert!(other.attempt().await.unwrap().into_guard().is_none());
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        other.attempt_within(Duration::from_secs(5)),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(got.is_acquired(), "the permit came back after its TTL");
}

async fn a_waiter_gets_a_released_permit(fx: &Fixture) {
    let sem = fx.tenure.semaphore("sem:wait", n(1)).unwrap();
    let lease = sem.lease().watchdog(false).ttl(Duration::from_secs(30));
    let holder = lease.attempt().await.unwrap().into_guard().unwrap();
    let waiting = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.attempt_within(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    holder.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert!(got.is_acquired());
}

async fn an_empty_key_is_refused(fx: &Fixture) {
    let sem = fx.tenure.semaphore("", n(2)).unwrap();
    let e = sem
        .lease()
        .watchdog(false)
        .ttl(Duration::from_secs(10))
        .attempt()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidKey { .. }), "{e}");
    assert!(matches!(sem.held().await, Err(Error::InvalidKey { .. })));
}

on_store!(memory: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit,
    an_empty_key_is_refused);
on_store!(sqlite: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit,
    an_empty_key_is_refused);
on_store!(redis: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit,
    an_empty_key_is_refused);
#[cfg(feature = "etcd")]
on_store!(etcd: at_most_n_hold_and_fences_increase, lowering_n_never_admits_more_than_the_new_n,
    a_silent_holders_permit_expires_with_its_ttl, a_waiter_gets_a_released_permit,
    an_empty_key_is_refused);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_is_refused_naming_the_alternative() {
    let fx = recipes_common::quorum().await;
    let e = fx.tenure.semaphore("sem:q", n(2)).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what: "semaphores", instead, .. } if instead.contains("one Redis master, SQLite")),
        "{e}"
    );
}

/// Waking waiters is best-effort: an ACL user without channel rights (PUBLISH
/// refused with NOPERM) still gives its permit back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_succeeds_for_a_user_without_channel_rights_on_redis() {
    let server = tenure_test::RedisServer::start();
    let url = server.acl_user("app", "s3cret", "~tenure:* resetchannels +@all");
    let tenure = tenure::Coordinator::connect(&url).await.unwrap();
    let sem = tenure.semaphore("sem:acl", n(2)).unwrap();
    let guard = sem
        .lease()
        .watchdog(false)
        .ttl(Duration::from_secs(30))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .expect("free permit");
    assert_eq!(
        guard.release().await.unwrap(),
        tenure::ReleaseOutcome::Released
    );
    assert_eq!(sem.held().await.unwrap(), 0);
}

/// Every key of a semaphore holding foreign data: acquiring is an error
/// naming that key, the foreign data is left as it was, no fence is spent,
/// and a permit held before the damage can still be renewed and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_semaphore_key_of_a_foreign_type_is_refused_and_left_alone_on_redis() {
    use recipes_common::Foreign;
    let fx = recipes_common::redis().await;
    let server = fx.server.as_ref().unwrap();
    let cases = [
        (":permits", Foreign::Text),
        (":permits", Foreign::List),
        (":permits", Foreign::Hash),
        (":permits:fence", Foreign::Text),
        (":permits:fence", Foreign::List),
    ];
    for (i, (suffix, foreign)) in cases.into_iter().enumerate() {
        let name = format!("sem:foreign{i}");
        let sem = fx.tenure.semaphore(&name, n(3)).unwrap();
        let lease = sem.lease().watchdog(false).ttl(Duration::from_secs(30));
        // A holder from before the damage (none when the permits key itself
        // is foreign: there is no set to hold a permit in).
        let earlier = if suffix == ":permits:fence" {
            Some(lease.attempt().await.unwrap().into_guard().unwrap())
        } else {
            None
        };
        let key = format!("tenure:{{{name}}}{suffix}");
        server.command(&format!("DEL {key}")).unwrap();
        foreign.plant(server, &key);
        let e = lease.attempt().await.unwrap_err();
        assert!(
            matches!(&e, Error::WrongType { .. }) && e.to_string().contains(&key),
            "{key} ({foreign:?}): {e}"
        );
        foreign.assert_intact(server, &key);
        let e = sem.held().await.unwrap_err();
        assert!(
            matches!(&e, Error::WrongType { .. }),
            "{key} ({foreign:?}): {e}"
        );
        match earlier {
            Some(guard) => {
                let state = server
                    .command(&format!("GET tenure:{{{name}}}:permits"))
                    .unwrap();
                assert_eq!(
                    state.matches("\"token\"").count(),
                    1,
                    "{key}: only the earlier permit is held: {state}"
                );
                assert!(matches!(
                    guard.extend().await.unwrap(),
                    tenure::ExtendOutcome::Extended { .. }
                ));
                assert_eq!(
                    guard.release().await.unwrap(),
                    tenure::ReleaseOutcome::Released
                );
            }
            None => assert!(
                !recipes_common::exists(server, &format!("tenure:{{{name}}}:permits:fence")),
                "{key}: a fence was spent on a refused acquire"
            ),
        }
        foreign.assert_intact(server, &key);
    }
}

/// On Redis a permit's release is pushed to watchers — what wakes waiting
/// acquirers without polling: with a watch that would otherwise wait an hour,
/// the release ends the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_pushed_to_waiters_on_redis() {
    use tenure::gate::{GateKind, GateStore};
    let fx = recipes_common::redis().await;
    let store = tenure::redis::RedisStore::connect(&fx.url, tenure::redis::RedisOptions::default())
        .await
        .unwrap();
    let sem = fx.tenure.semaphore("sem:push", n(1)).unwrap();
    let guard = sem
        .lease()
        .watchdog(false)
        .ttl(Duration::from_secs(60))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let mut watch = GateStore::watch(&store, GateKind::Semaphore, "sem:push", None).await;
    assert!(watch.is_push());
    guard.release().await.unwrap();
    let woken = tokio::time::timeout(
        Duration::from_secs(10),
        watch.wait(Duration::from_secs(3600)),
    )
    .await
    .expect("woken by the release, not by the hour passing");
    assert!(woken);
}
