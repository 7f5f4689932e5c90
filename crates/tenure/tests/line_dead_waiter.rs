//! A waiter killed while first in line stalls the line only briefly: its
//! place is kept alive by a short heartbeat, not by the lease's TTL, so the
//! next live waiter gets the lease within about a second of the release, on
//! one Redis master, SQLite and etcd — with the default 30 s TTL.
//!
//! The killed waiter is a real process (this test binary, running the
//! `#[ignore]`d `dead_waiter_child`), SIGKILLed while it stands first in
//! line behind a holder, which then releases at once. The measured stalls
//! are printed (`--no-capture`).

#![allow(clippy::unwrap_used)]

mod fifo_common;

use fifo_common::connect;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tenure::Lease;
use tokio::time::Instant;

/// The lease's TTL for everyone: the default, far above the bound.
const TTL: Duration = Duration::from_secs(30);

/// What the test asserts, with a margin for two loaded cores; the target is
/// one second.
const BOUND: Duration = Duration::from_millis(2500);

const CHILD_ENV: &str = "TENURE_DEAD_WAITER";

/// Run in a child process by the tests below: waits in line until killed.
#[tokio::test]
#[ignore = "run as a child process by the dead-waiter tests"]
async fn dead_waiter_child() {
    let Ok(store) = std::env::var(CHILD_ENV) else {
        return;
    };
    let tenure = connect(&store).await;
    let _ = tenure
        .lease("line")
        .ttl(TTL)
        .attempt_within(Duration::from_secs(120))
        .await;
}

fn child(store: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["dead_waiter_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENV, store)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// The holder releases right after the first waiter (another process) is
/// killed; returns how long the second waiter waited after the release.
async fn stall_after_killing_the_first<F, Fut>(store: &str, lease: &Lease, count: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    stall_after_killing_the_first_then(store, lease, count, Duration::ZERO).await
}

/// As [`stall_after_killing_the_first`], with the holder releasing `pause`
/// after the kill.
async fn stall_after_killing_the_first_then<F, Fut>(
    store: &str,
    lease: &Lease,
    count: F,
    pause: Duration,
) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let holder = lease.try_acquire().await.unwrap().unwrap();
    let mut first = child(store);
    fifo_common::until_in_line(&count, 1).await;
    let second = fifo_common::spawn_wait(lease);
    fifo_common::until_in_line(&count, 2).await;
    first.kill().unwrap(); // SIGKILL: it cannot leave the line
    first.wait().unwrap();
    tokio::time::sleep(pause).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let guard = tokio::time::timeout(TTL * 2, second)
        .await
        .expect("the second waiter got the lease")
        .unwrap()
        .unwrap()
        .into_guard()
        .expect("acquired");
    let stall = released.elapsed();
    guard.release().await.unwrap();
    stall
}

fn report(store: &str, stall: Duration) {
    println!("{store}: the next waiter got the lease {stall:?} after the release");
    assert!(
        stall < BOUND,
        "{store}: a dead first waiter stalled the line for {stall:?}"
    );
}

/// Measures and reports the stall on `store`, counting the waiters with
/// `status`.
async fn stall_counted_by_status(name: &str, store: &str) {
    let tenure = connect(store).await;
    let lease = tenure.lease("line").ttl(TTL);
    let count = || async {
        let waiters = tenure.status("line").await.unwrap().waiters;
        usize::try_from(waiters.unwrap()).unwrap()
    };
    let stall = stall_after_killing_the_first(store, &lease, count).await;
    report(name, stall);
}

/// The line's length on `server`, for the waiters of the key `line`.
fn redis_count(
    server: &tenure_test::RedisServer,
) -> impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = usize> + Send>> {
    let client = redis::Client::open(server.url()).unwrap();
    move || {
        let client = client.clone();
        Box::pin(async move {
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            redis::cmd("LLEN")
                .arg("tenure:{line}:queue")
                .query_async::<usize>(&mut c)
                .await
                .unwrap()
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_killed_first_waiter_stalls_the_line_briefly() {
    let server = tenure_test::RedisServer::start();
    let store = format!("redis:{}", server.url());
    let tenure = connect(&store).await;
    let lease = tenure.lease("line").ttl(TTL);
    let stall = stall_after_killing_the_first(&store, &lease, redis_count(&server)).await;
    report("redis", stall);
}

/// A release does not read the clock for the waiter it hands over to: a
/// first waiter that died longer ago than its place lives is handed the
/// lease for the claim window, and the next live waiter's look takes it
/// after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_long_dead_first_waiter_stalls_the_line_briefly() {
    let server = tenure_test::RedisServer::start();
    let store = format!("redis:{}", server.url());
    let tenure = connect(&store).await;
    let lease = tenure.lease("line").ttl(TTL);
    let pause = Duration::from_millis(1500);
    let stall =
        stall_after_killing_the_first_then(&store, &lease, redis_count(&server), pause).await;
    report("redis, released 1.5 s after the kill", stall);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_killed_first_waiter_stalls_the_line_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("leases.db").display());
    stall_counted_by_status("sqlite", &store).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_killed_first_waiter_stalls_the_line_briefly() {
    let etcd = tenure_test::EtcdCluster::single();
    let store = format!("etcd:{}", etcd.url());
    stall_counted_by_status("etcd", &store).await;
}
