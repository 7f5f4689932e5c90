//! A release or resign that its caller stops waiting for (a shutdown timeout,
//! `select!`) still releases the key, as a dropped guard does: the key is not
//! left held for its whole TTL.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use tenure::Coordinator;
use tenure_test::{Proxy, RedisServer};

/// Long enough that "still held" can only mean "the release was lost".
const TTL: Duration = Duration::from_secs(120);

/// A holder reaching a fresh server through a slow link (200 ms per chunk),
/// and a direct handle to look. On a fresh server the release script is not
/// loaded yet, so a release takes more than one round trip: a caller that
/// stops waiting after 50 ms cuts it short before the delete was sent.
async fn slow_link() -> (RedisServer, Proxy, Coordinator, Coordinator) {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr());
    let holder = Coordinator::connect(&proxy.url()).await.unwrap();
    let direct = Coordinator::connect(&server.url()).await.unwrap();
    (server, proxy, holder, direct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_cancelled_release_still_releases() {
    let (_server, proxy, holder, direct) = slow_link().await;
    let lease = holder.lease("cut-release").ttl(TTL);
    let guard = lease.try_acquire().await.unwrap().unwrap();
    proxy.delay(Duration::from_millis(200));
    let cut = tokio::time::timeout(Duration::from_millis(50), guard.release()).await;
    assert!(cut.is_err(), "the slow link cannot answer in 50 ms");
    assert!(
        common::freed(&direct, "cut-release").await,
        "the cut-short release left the key held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_cancelled_resign_lets_another_candidate_win() {
    let (_server, proxy, holder, direct) = slow_link().await;
    let leader = holder
        .election("cut-resign")
        .ttl(TTL)
        .try_campaign("a")
        .await
        .unwrap()
        .expect("nobody leads");
    proxy.delay(Duration::from_millis(200));
    let cut = tokio::time::timeout(Duration::from_millis(50), leader.resign()).await;
    assert!(cut.is_err(), "the slow link cannot answer in 50 ms");
    let next = tokio::time::timeout(
        Duration::from_secs(10),
        direct.election("cut-resign").ttl(TTL).campaign("b"),
    )
    .await
    .expect("the resigned leader still held the key")
    .unwrap();
    assert_eq!(next.id(), "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_cancelled_permit_release_frees_the_permit() {
    let (_server, proxy, holder, direct) = slow_link().await;
    let permits = holder
        .semaphore("cut-permit", std::num::NonZeroU32::MIN)
        .unwrap()
        .lease()
        .ttl(TTL);
    let permit = permits.try_acquire().await.unwrap().unwrap();
    proxy.delay(Duration::from_millis(200));
    let cut = tokio::time::timeout(Duration::from_millis(50), permit.release()).await;
    assert!(cut.is_err(), "the slow link cannot answer in 50 ms");
    let other = direct
        .semaphore("cut-permit", std::num::NonZeroU32::MIN)
        .unwrap()
        .lease()
        .ttl(TTL);
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(guard) = other.try_acquire().await.unwrap() {
                return guard;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the permit stayed taken");
    got.release().await.unwrap();
}

/// A guard dropped without `release` just before a short-lived process ends:
/// `close` waits for the release the drop started, so the key is free once
/// the process's runtime (and its tasks with it) has ended.
#[test]
fn redis_close_waits_for_the_release_of_a_dropped_guard() {
    let server = RedisServer::start();
    common::as_one_process(async {
        let tenure = Coordinator::connect(&server.url()).await.unwrap();
        let lease = tenure.lease("dropped").ttl(TTL);
        let guard = lease.try_acquire().await.unwrap().expect("the key is free");
        drop(guard);
        tenure.close().await;
    });
    let status = common::status_on(&server, "dropped");
    assert!(
        !status.held,
        "the dropped guard's release was lost: {status:?}"
    );
}
