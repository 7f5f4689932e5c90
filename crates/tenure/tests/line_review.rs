//! What a review of the waiting line found, each pinned by a test: no ghost
//! place for an abandoned token, no pile of watchers, every re-created line
//! expires, and no `Debug` output prints an owner token.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenure::lease::store::{Handoff, OwnerToken, QueuePlace, ReleaseWatch};
use tenure::{Coordinator, Fence, LeaseGuard};
use tenure_test::{Direction, Partition, Proxy, RedisServer};
use tokio::task::JoinHandle;

/// A plain connection to `server`, to look at the keys.
async fn redis(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The entries of `key`'s waiting line.
async fn line_of(c: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(format!("tenure:{{{key}}}:queue"))
        .arg(0)
        .arg(-1)
        .query_async(c)
        .await
        .unwrap()
}

/// `key` held by `holder` for `ttl`, and a task in which `waiter` waits
/// for it (up to a minute).
async fn held_and_awaited(
    holder: &Coordinator,
    waiter: &Coordinator,
    key: &str,
    ttl: Duration,
) -> (LeaseGuard, JoinHandle<tenure::Result<LeaseGuard>>) {
    let held = holder
        .lease(key)
        .ttl(ttl)
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    let lease = waiter.lease(key).ttl(ttl);
    let waiting = tokio::spawn(async move { lease.acquire_timeout(Duration::from_secs(60)).await });
    (held, waiting)
}

/// Review item 5.1: a waiter's look applied by Redis whose reply is lost
/// (held past the client's 2 s timeout) must not leave a ghost place: when
/// the waiter stands in line again, the abandoned token has no place left,
/// and the next release hands the lease to the live waiter at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_look_whose_reply_was_lost_leaves_no_ghost_place() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr());
    let direct = Coordinator::connect(&server.url()).await.unwrap();
    let waiter = Coordinator::connect(&proxy.url()).await.unwrap();
    let (held, waiting) =
        held_and_awaited(&direct, &waiter, "ghost", Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The waiter's next look runs, its reply is held past the timeout.
    proxy.partition(Direction::ToClient, Partition::Stall);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut c = redis(&server).await;
    let line = line_of(&mut c, "ghost").await;
    assert_eq!(line.len(), 1, "one waiter, places in line: {line:?}");
    let released = tokio::time::Instant::now();
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter got the lease")
        .unwrap()
        .unwrap();
    let stall = released.elapsed();
    assert!(
        stall < Duration::from_secs(3),
        "the live waiter got the lease {stall:?} after the release"
    );
    guard.release().await.unwrap();
}

/// Review item 5.3: a line that a release empties and re-creates (an
/// observer's marker put back) keeps a TTL: a dead observer's marker must
/// not live forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_line_recreated_by_a_release_has_a_ttl() {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    let held = tenure.lease("marked").try_acquire().await.unwrap().unwrap();
    let observer = tenure.backend().watch_releases("marked").await;
    held.release().await.unwrap();
    let mut c = redis(&server).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg("tenure:{marked}:queue")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        pttl > 0,
        "the re-created line has PTTL {pttl}: {:?}",
        line_of(&mut c, "marked").await
    );
    drop(observer);
}

/// An observer's marker is taken out of the line when its watch is dropped,
/// and `Coordinator::close` waits for that removal, as for the lease
/// layer's other clean-up: a process that closes and exits leaves no marker
/// behind for its lifetime. The line is read without yielding to the
/// runtime (a blocking connection on this one-thread runtime), so a removal
/// still waiting to be polled shows.
#[tokio::test]
async fn redis_close_waits_for_a_dropped_observers_marker_removal() {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    let mut blocking = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let line = |c: &mut redis::Connection| -> Vec<String> {
        redis::cmd("LRANGE")
            .arg("tenure:{observed}:queue")
            .arg(0)
            .arg(-1)
            .query(c)
            .unwrap()
    };
    let observer = tenure.backend().watch_releases("observed").await;
    assert_eq!(
        line(&mut blocking).len(),
        1,
        "the observer's marker is in line"
    );
    drop(observer);
    tenure.close().await;
    assert_eq!(
        line(&mut blocking),
        Vec::<String>::new(),
        "the marker was still in line when close returned"
    );
}

/// `QueuePlace`, `Handoff` and `ReleaseWatch` print no owner token (as
/// `OwnerToken`'s own `Debug` does not).
#[tokio::test]
async fn debug_output_never_prints_the_owner_token() {
    let token = OwnerToken::generate().unwrap();
    // Places as the Redis line and the etcd line write them.
    for place in [
        format!("1764670000000 30000 {}", token.as_str()),
        format!("lease\0line\0{}", token.as_str()),
    ] {
        let place = QueuePlace::new(place);
        let handoff = Handoff {
            fence: Fence::new(7),
            place: place.clone(),
        };
        let (tx, rx) = tokio::sync::watch::channel(None);
        let mut watch = ReleaseWatch::for_turn(rx, true);
        tx.send_replace(Some(handoff.clone()));
        assert!(watch.wait(Duration::from_secs(5)).await);
        for printed in [
            format!("{place:?}"),
            format!("{handoff:?}"),
            format!("{watch:?}"),
        ] {
            assert!(
                !printed.contains(token.as_str()),
                "Debug printed the owner token: {printed}"
            );
        }
    }
}

/// A hand-off whose notification never comes (the releaser's ACL user may
/// not publish) still reaches a waiter whose looks its process answers
/// itself: the process's keeper sees the lease handed to the waiter and
/// wakes it, and its look claims the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_hand_off_without_its_notification_still_reaches_a_quiet_waiter() {
    let server = RedisServer::start();
    let mute = server.acl_user("mute", "s3cret", "~tenure:* resetchannels +@all");
    let holder = Coordinator::connect(&mute).await.unwrap();
    let waiter = Coordinator::connect(&server.url()).await.unwrap();
    let (held, waiting) =
        held_and_awaited(&holder, &waiter, "muted", Duration::from_secs(30)).await;
    // Long enough for the waiter's looks to be answered in its process.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = tokio::time::Instant::now();
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter got the lease")
        .unwrap()
        .unwrap();
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the waiter got the lease {took:?} after the release"
    );
    guard.release().await.unwrap();
}
