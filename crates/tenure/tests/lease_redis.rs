//! Lease behaviour that only a real Redis shows: deleted keys, restarts, frozen
//! servers, foreign data, lost scripts, cancelled calls.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use tenure::fence::FencedWrite;
use tenure::redis::RedisFencedStore;
use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Attempt, Coordinator, Error, Fence};
use tenure_test::RedisServer;
use tokio::time::Instant;

async fn connect(server: &RedisServer) -> Coordinator {
    common::connect_redis(server).await
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server
        .command(&format!("EXISTS {key}"))
        .unwrap()
        .starts_with(":1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_signal_fires_within_one_renewal_interval_when_the_key_is_deleted() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let every = Duration::from_millis(200);
    let guard = tenure
        .lease("deleted")
        .watchdog(false)
        .ttl(Duration::from_secs(10))
        .renew_every(every)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    assert!(exists(&server, "tenure:{deleted}"));
    server.command("DEL tenure:{deleted}").unwrap();
    let deleted_at = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), guard.lost().wait())
        .await
        .expect("lost signal");
    let after = deleted_at.elapsed();
    // One renewal interval, plus a round trip and generous scheduling slack;
    // the local deadline alone would take ~10 s.
    assert!(after <= every * 5, "fired after {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_hold_fires_lost_and_the_client_recovers() {
    let mut server = RedisServer::start();
    let tenure = connect(&server).await;
    let every = Duration::from_millis(200);
    let lease = tenure
        .lease("restart")
        .watchdog(false)
        .ttl(Duration::from_secs(10))
        .renew_every(every);
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    let first_fence = guard.fence();

    server.kill();
    // While the server is down, calls fail with a clear infrastructure error.
    let err = tenure.status("restart").await.unwrap_err();
    assert!(err.is_infrastructure(), "{err}");
    assert!(err.to_string().contains("restart"), "names the key: {err}");

    server.start_again(); // no persistence: the key and the scripts are gone
    let restarted_at = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), guard.lost().wait())
        .await
        .expect("the lost signal fires after the restart");
    let after = restarted_at.elapsed();
    eprintln!("lost signal {after:?} after the restart");
    assert!(
        after < every * 5,
        "lost signal only {after:?} after the restart"
    );

    // The same handle reconnects, reloads its scripts (NOSCRIPT) and works.
    let mut again = None;
    for _ in 0..20 {
        match lease.attempt().await {
            Ok(out) => {
                again = out.into_guard();
                break;
            }
            Err(e) => {
                assert!(e.is_infrastructure(), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let again = again.expect("the client recovers after the restart");
    // Without persistence the counter is gone, but the clock floor keeps the
    // fences going up.
    assert!(again.fence() > first_fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hundred_cancelled_acquires_leave_no_key_after_the_ttl() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let ttl = Duration::from_millis(500);
    let mut tasks = Vec::new();
    for i in 0..400u64 {
        let lease = tenure
            .lease(format!("cancel:{}", i % 40))
            .watchdog(false)
            .ttl(ttl);
        tasks.push(tokio::spawn(async move {
            // Cancel at a random point: before sending, in flight, or after.
            let cut = Duration::from_micros((i * 37) % 3000);
            let _ = tokio::time::timeout(cut, lease.attempt_within(Duration::from_secs(5))).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    tokio::time::sleep(ttl + Duration::from_millis(300)).await;
    let keys = server.command("KEYS tenure:{cancel:*}").unwrap();
    assert!(keys.starts_with("*0"), "leftover lease keys: {keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_times_out_within_the_budget() {
    let server = RedisServer::start();
    let tenure = connect(&server).await; // 500 ms budget per call
    server.pause();
    let start = Instant::now();
    let err = tenure
        .lease("frozen")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    let took = start.elapsed();
    server.resume();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(err.to_string().contains("frozen"));
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let port = tenure_test::free_port();
    let err = Coordinator::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(err.is_infrastructure(), "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

#[tokio::test]
async fn a_key_of_the_wrong_type_is_an_error_not_a_hold() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    server.command("HSET tenure:{hash} a b").unwrap();
    let err = tenure
        .lease("hash")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert!(err.to_string().contains("hash"), "{err}");

    server
        .command("SET tenure:{badfence}:fence notanumber")
        .unwrap();
    let err = tenure
        .lease("badfence")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert!(
        !exists(&server, "tenure:{badfence}"),
        "no lease left behind"
    );
    let err = tenure.status("badfence").await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
}

#[tokio::test]
async fn interoperates_with_the_common_set_nx_convention() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    // Another client (redis-py Lock, bsm/redislock…) holds the key.
    server
        .command("SET tenure:{shared} other-client-token PX 400")
        .unwrap();
    let out = tenure
        .lease("shared")
        .watchdog(false)
        .attempt()
        .await
        .unwrap();
    assert!(matches!(out, Attempt::Held { ttl_left: Some(_) }));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let guard = tenure
        .lease("shared")
        .watchdog(false)
        .attempt()
        .await
        .unwrap();
    let guard = guard.into_guard().expect("free after the other's TTL");
    // Ours is a plain string value that others' SET NX respects.
    let value = server.command("GET tenure:{shared}").unwrap();
    let token = value.lines().nth(1).unwrap();
    assert_eq!(token.len(), 32);
    assert!(
        server
            .command("SET tenure:{shared} x NX PX 1000")
            .unwrap()
            .starts_with("$-1")
    );
    drop(guard);
}

#[tokio::test]
async fn survives_a_script_cache_flush() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let lease = tenure
        .lease("noscript")
        .watchdog(false)
        .ttl(Duration::from_secs(5));
    let first = lease.attempt().await.unwrap().into_guard().unwrap();
    let first_fence = first.fence();
    first.release().await.unwrap();
    server.command("SCRIPT FLUSH").unwrap();
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(guard.fence() > first_fence);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn fenced_store_rejects_stale_tokens() {
    let server = RedisServer::start();
    let store = RedisFencedStore::connect(&server.url()).await.unwrap();
    assert_eq!(
        store.write("acct", Fence::new(5), "500").await.unwrap(),
        FencedWrite::Applied
    );
    assert_eq!(
        store.write("acct", Fence::new(4), "400").await.unwrap(),
        FencedWrite::Rejected {
            current: Fence::new(5)
        }
    );
    // A bare fence names no acquisition: an equal one could be anyone's.
    assert_eq!(
        store.write("acct", Fence::new(5), "again").await.unwrap(),
        FencedWrite::Rejected {
            current: Fence::new(5)
        }
    );
    assert_eq!(
        store.read("acct").await.unwrap(),
        Some((Fence::new(5), b"500".to_vec()))
    );
    assert_eq!(
        store.write("acct", Fence::new(6), "600").await.unwrap(),
        FencedWrite::Applied
    );
    assert_eq!(store.read("missing").await.unwrap(), None);

    server.command("SET tenure:resource:str x").unwrap();
    let err = store.write("str", Fence::new(1), "v").await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    let err = store.write("acct", Fence::new(0), "v").await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = store
        .write("acct", Fence::new(u64::MAX), "v")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}

#[tokio::test]
async fn keys_live_under_the_configured_prefix() {
    let server = RedisServer::start();
    let backend = RedisStore::connect(&server.url(), RedisOptions::default().prefix("app1:"))
        .await
        .unwrap();
    let tenure = Coordinator::with_backend(backend);
    let guard = tenure
        .lease("job")
        .watchdog(false)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    assert!(exists(&server, "app1:{job}"));
    assert!(exists(&server, "app1:{job}:fence"));
    assert!(!exists(&server, "tenure:{job}"));
    let status = tenure.status("job").await.unwrap();
    assert_eq!(status.storage_key, "app1:{job}");
    assert_eq!(status.fence, Some(guard.fence()));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_notifications_survive_a_restart() {
    let mut server = RedisServer::start();
    let tenure = connect(&server).await;
    let lease = tenure
        .lease("resub")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    // Open the subscriber once before the restart.
    let holder = lease.attempt().await.unwrap().into_guard().unwrap();
    let _ = lease
        .attempt_within(Duration::from_millis(100))
        .await
        .unwrap();
    holder.release().await.unwrap();

    server.restart();
    let mut holder = None;
    for _ in 0..50 {
        if let Ok(out) = lease.attempt().await {
            holder = out.into_guard();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holder = holder.expect("reconnected");
    let waiter = {
        let lease = lease.clone();
        tokio::spawn(async move {
            let out = lease.attempt_within(Duration::from_secs(20)).await.unwrap();
            (Instant::now(), out.is_acquired())
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The waiter is subscribed again: it is woken by the release, not by polling.
    let subs = server
        .command("PUBSUB NUMSUB tenure:{resub}:released")
        .unwrap();
    assert!(subs.ends_with(":1\r\n"), "subscribers: {subs:?}");
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (acquired_at, acquired) = waiter.await.unwrap();
    assert!(acquired);
    let handoff = acquired_at - released_at;
    assert!(
        handoff < Duration::from_millis(500),
        "hand-off took {handoff:?}"
    );
}

/// Every connection tenure keeps to the server sends at once (`TCP_NODELAY`):
/// many tasks share a connection, so a request is often written while an
/// earlier one is unanswered, and Nagle's algorithm would hold it back until
/// the server acknowledged that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_to_the_server_sends_at_once() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let lease = tenure.lease("nodelay").ttl(Duration::from_secs(10));
    let held = lease.attempt().await.unwrap().into_guard().unwrap();
    // A waiter opens the release subscriber, a connection of its own.
    let waited = lease
        .attempt_within(Duration::from_millis(200))
        .await
        .unwrap();
    assert!(waited.into_guard().is_none());
    let connections = tenure_test::tcp_connections_to(server.port());
    assert!(
        connections.len() >= 2,
        "calls and subscriber: {connections:?}"
    );
    assert!(connections.iter().all(|c| c.nodelay), "{connections:?}");
    held.release().await.unwrap();
}
