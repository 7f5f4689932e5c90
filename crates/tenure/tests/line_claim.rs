//! A lease handed to a waiter on Redis is set for the claim window (half a
//! second) and taken from the hand-off message without another call; the
//! guard's first renewal claims the full TTL before the window ends — with
//! the watchdog on or off — so a holder that releases sooner sends nothing
//! but its release, and one that keeps the lease keeps it for its TTL.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenure::{Coordinator, Lease};
use tenure_test::RedisServer;

const TTL: Duration = Duration::from_secs(10);

/// The lease key's PTTL in milliseconds.
async fn pttl(server: &RedisServer, key: &str) -> i64 {
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("PTTL")
        .arg(format!("tenure:{{{key}}}"))
        .query_async(&mut c)
        .await
        .unwrap()
}

/// Hands `lease` from a holder to a waiter (both of this process) and
/// returns the waiter's guard.
async fn handed_over(lease: &Lease) -> tenure::LeaseGuard {
    let held = lease.try_acquire().await.unwrap().unwrap();
    let waiting = tokio::spawn({
        let lease = lease.clone();
        async move { lease.attempt_within(Duration::from_secs(20)).await }
    });
    // The waiter stands in line (its channel subscribed) before the release.
    tokio::time::sleep(Duration::from_millis(150)).await;
    held.release().await.unwrap();
    waiting
        .await
        .unwrap()
        .unwrap()
        .into_guard()
        .expect("handed over")
}

async fn a_hand_off_is_claimed_by_the_first_renewal(watchdog: bool) {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    let key = if watchdog {
        "claimed:renewing"
    } else {
        "claimed"
    };
    let lease = tenure.lease(key).ttl(TTL).watchdog(watchdog);
    let guard = handed_over(&lease).await;
    let set_for = pttl(&server, key).await;
    assert!(
        (1..=500).contains(&set_for),
        "a hand-off sets the key for the claim window, not {set_for} ms"
    );
    assert!(guard.remaining() <= Duration::from_millis(500));
    // Past the claim window: the first renewal claimed the full TTL.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!guard.is_lost(), "lost: {:?}", guard.loss_cause());
    let claimed = pttl(&server, key).await;
    assert!(
        claimed > 8_000,
        "the claim set the full TTL: PTTL {claimed} ms"
    );
    assert!(guard.remaining() > Duration::from_secs(8));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_is_claimed_by_the_first_renewal_without_the_watchdog() {
    a_hand_off_is_claimed_by_the_first_renewal(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_is_claimed_by_the_first_renewal_with_the_watchdog() {
    a_hand_off_is_claimed_by_the_first_renewal(true).await;
}

/// A hand-off released within the claim window costs the new holder no
/// call but its release: no `lease_extend` script ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_hold_after_a_hand_off_sends_no_claim() {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    let lease = tenure.lease("short").ttl(TTL).watchdog(false);
    let guard = handed_over(&lease).await;
    server.command("CONFIG RESETSTAT").unwrap();
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let stats = server.command("INFO commandstats").unwrap();
    let pexpires = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_pexpire:"))
        .map_or(0, |l| {
            l.split("calls=")
                .nth(1)
                .and_then(|n| n.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        });
    assert_eq!(pexpires, 0, "a claim was sent after the release: {stats}");
}
