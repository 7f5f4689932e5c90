//! Waiters survive transient backend failures (issue 9, item 8): while the
//! wait budget lasts, a restart or a frozen server is retried, not reported.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Attempt, Coordinator, Error};
use tenure_test::RedisServer;
use tokio::time::Instant;

async fn connect(server: &RedisServer) -> Coordinator {
    let backend = RedisStore::connect(
        &server.url(),
        RedisOptions::default().timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    Coordinator::with_backend(backend)
}

/// The holder's lease runs out after 1 s; the waiter's next attempt comes at
/// that moment at the latest, while the server is down, and must not end the
/// wait.
const HOLDER_TTL: Duration = Duration::from_secs(1);
const OUTAGE: Duration = Duration::from_millis(1800);

async fn holder_and_waiter(
    tenure: &Coordinator,
    key: &str,
) -> tokio::task::JoinHandle<tenure::Result<Attempt>> {
    let held = tenure
        .lease(key)
        .watchdog(false)
        .ttl(HOLDER_TTL)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    // The holder "crashes": its lease stays until the TTL.
    std::mem::forget(held);
    let lease = tenure
        .lease(key)
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let waiter = tokio::spawn(async move { lease.attempt_within(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the waiter waits for the holder");
    waiter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_survives_a_redis_restart() {
    let mut server = RedisServer::start();
    let tenure = connect(&server).await;
    let waiter = holder_and_waiter(&tenure, "restart").await;
    server.kill();
    let down = Instant::now();
    tokio::time::sleep(OUTAGE).await;
    server.restart();
    let outcome = waiter.await.unwrap();
    assert!(matches!(outcome, Ok(Attempt::Acquired(_))), "{outcome:?}");
    assert!(down.elapsed() >= OUTAGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_survives_a_frozen_redis() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let waiter = holder_and_waiter(&tenure, "frozen").await;
    server.pause();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    server.resume();
    let outcome = waiter.await.unwrap();
    assert!(matches!(outcome, Ok(Attempt::Acquired(_))), "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_reports_the_error_when_its_budget_is_spent() {
    let mut server = RedisServer::start();
    let tenure = connect(&server).await;
    server.kill();
    let started = Instant::now();
    let err = tenure
        .lease("gone")
        .watchdog(false)
        .attempt_within(Duration::from_millis(1500))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    // It kept trying for its budget (and not much longer than one more
    // attempt's timeout).
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_ends_the_wait_at_once() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    server.command("HSET tenure:{typed} a b").unwrap();
    let started = Instant::now();
    let err = tenure
        .lease("typed")
        .watchdog(false)
        .attempt_within(Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert!(!err.is_transient());
    assert!(started.elapsed() < Duration::from_secs(5));
}
