//! A cancelled or timed-out acquire must not leave its grant behind until the
//! TTL (issue 9, item 7): the attempt undoes it with its own owner token.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use tenure::{Coordinator, Error};
use tenure_test::RedisServer;

/// Long enough that "still held" can only mean "orphaned".
const TTL: Duration = Duration::from_secs(120);

async fn connect(server: &RedisServer) -> Coordinator {
    let tenure = common::connect_redis(server).await;
    // Loads the scripts: a first EVALSHA answered NOSCRIPT grants nothing, and
    // the test wants the frozen request to be one that grants.
    common::warm_guard(&tenure, "warm-up")
        .await
        .release()
        .await
        .unwrap();
    tenure
}

/// The caller gives up (timeout, select!) while the frozen server has the
/// request in its socket; the server grants it when it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_cancelled_acquire_is_undone() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let lease = tenure.lease("cancelled").watchdog(false).ttl(TTL);
    server.pause();
    let attempt = tokio::time::timeout(Duration::from_millis(100), lease.attempt()).await;
    assert!(attempt.is_err(), "the frozen server cannot answer");
    server.resume();
    let status = tenure.status("cancelled").await.unwrap();
    assert!(
        status.fence.is_some(),
        "the request was granted: {status:?}"
    );
    assert!(
        common::freed(&tenure, "cancelled").await,
        "the grant was orphaned"
    );
    // And the key is usable at once.
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    guard.release().await.unwrap();
}

/// The backend's own response timeout fires; the request still runs later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_timed_out_acquire_is_undone() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let lease = tenure.lease("timed-out").watchdog(false).ttl(TTL);
    server.pause();
    let err = lease.attempt().await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    server.resume();
    let status = tenure.status("timed-out").await.unwrap();
    assert!(
        status.fence.is_some(),
        "the request was granted: {status:?}"
    );
    assert!(
        common::freed(&tenure, "timed-out").await,
        "the grant was orphaned"
    );
}

/// A process that gives up on a frozen server and ends right after
/// `close`: `close` waits for the undo of the timed-out acquire, so the grant
/// the server applies when it resumes is deleted before the runtime ends
/// (and its tasks with it).
#[test]
fn redis_close_waits_for_the_undo_of_a_timed_out_acquire() {
    let server = RedisServer::start();
    std::thread::scope(|threads| {
        common::as_one_process(async {
            let tenure = connect(&server).await;
            let lease = tenure.lease("gone").watchdog(false).ttl(TTL);
            server.pause();
            let err = lease.attempt().await.unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{err}");
            threads.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                server.resume();
            });
            tenure.close().await;
        });
    });
    let status = common::status_on(&server, "gone");
    assert!(
        status.fence.is_some(),
        "the request was granted: {status:?}"
    );
    assert!(!status.held, "the grant outlived its process: {status:?}");
}

/// SQLite: the attempt waits for another process's write lock, the caller
/// gives up, then the lock is freed and the attempt's transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_cancelled_acquire_is_undone() {
    let fx = common::sqlite().await;
    let path = fx.dir.as_ref().unwrap().path().join("tenure.db");
    let mut blocker = rusqlite::Connection::open(&path).unwrap();
    let lock = blocker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let lease = fx.tenure.lease("cancelled").watchdog(false).ttl(TTL);
    let attempt = tokio::time::timeout(Duration::from_millis(200), lease.attempt()).await;
    assert!(attempt.is_err(), "the write lock is held elsewhere");
    lock.rollback().unwrap();
    // The attempt's transaction goes ahead now; wait until it has.
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while fx.tenure.status("cancelled").await.unwrap().fence.is_none() {
        assert!(tokio::time::Instant::now() < until, "never granted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        common::freed(&fx.tenure, "cancelled").await,
        "the grant was orphaned"
    );
}

/// SQLite: a fence counter that cannot grow fails the acquire cleanly and
/// leaves the lease free (grant and fence are one transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_exhausted_fence_counter_leaves_the_lease_free() {
    let fx = common::sqlite().await;
    let path = fx.dir.as_ref().unwrap().path().join("tenure.db");
    let lease = fx.tenure.lease("exhausted").watchdog(false).ttl(TTL);
    lease
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap()
        .release()
        .await
        .unwrap();
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute(
        "UPDATE tenure_leases SET fence = ?1 WHERE key = 'exhausted'",
        [i64::MAX],
    )
    .unwrap();
    let err = lease.attempt().await.unwrap_err();
    assert!(err.to_string().contains("fence counter"), "{err}");
    let (fence, token): (i64, Option<String>) = db
        .query_row(
            "SELECT fence, token FROM tenure_leases WHERE key = 'exhausted'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((fence, token), (i64::MAX, None));
    assert!(!fx.tenure.status("exhausted").await.unwrap().held);
}
