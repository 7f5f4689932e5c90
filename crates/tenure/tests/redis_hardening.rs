//! One Redis master under hostile conditions: lost replica acknowledgements,
//! exhausted fence counters, eviction-prone memory policies, passwords with
//! delimiter characters, retried fenced writes, awkward hash tags.

#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::fence::{AcquisitionId, FenceStamp, FencedWrite};
use tenure::lease::store::LeaseStore;
use tenure::redis::RedisFencedStore;
use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Attempt, Coordinator, Error, Fence};
use tenure_test::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use common::{redis_get, replicated_pair, wait_for_link};

fn plain_options() -> RedisOptions {
    RedisOptions::default().timeout(Duration::from_secs(2))
}

// ---- item 1: a failed extend must not release a lease the guard believes in ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_extend_keeps_the_key_so_no_second_holder_gets_in() {
    let (master, proxy, _replica) = replicated_pair();
    let options = plain_options().require_replicas(NonZeroU32::MIN, Duration::from_millis(500));
    let tenure =
        Coordinator::with_backend(RedisStore::connect(&master.url(), options).await.unwrap());
    let other = Coordinator::connect(&master.url()).await.unwrap();
    let guard = tenure
        .lease("acked")
        .watchdog(false)
        .ttl(Duration::from_secs(30))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let token = redis_get(&master.url(), "tenure:{acked}")
        .await
        .expect("granted");

    proxy.cut();
    let err = guard.extend().await.unwrap_err();
    assert!(
        matches!(err, Error::ReplicasUnacknowledged { op: "extend", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("kept"), "{err}");
    // The guard still believes in its lease (last confirmed deadline) ...
    assert!(!guard.is_lost());
    assert!(guard.remaining() > Duration::ZERO);
    // ... so the key must still be ours and exclude everyone else.
    assert_eq!(
        redis_get(&master.url(), "tenure:{acked}").await.as_deref(),
        Some(token.as_str())
    );
    let second = other
        .lease("acked")
        .watchdog(false)
        .attempt()
        .await
        .unwrap();
    assert!(
        matches!(second, Attempt::Held { .. }),
        "a second holder got in while the guard still has {:?}",
        guard.remaining()
    );
    assert!(guard.remaining() > Duration::ZERO);
    guard.release().await.unwrap();
}

// ---- item 18: WAIT travels with the write it acknowledges ----

#[tokio::test]
async fn a_replica_wait_longer_than_the_call_timeout_is_refused() {
    let master = RedisServer::start();
    let options = RedisOptions::default()
        .timeout(Duration::from_millis(500))
        .require_replicas(NonZeroU32::MIN, Duration::from_millis(500));
    let err = RedisStore::connect(&master.url(), options.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(RedisStore::lazy(&master.url(), options).is_err());
}

/// A one-connection-at-a-time TCP relay that, once the client has sent a script
/// call, holds the server's replies back until the client has also sent `WAIT`.
/// A client that sends `WAIT` only after reading the script's reply (so a
/// reconnect in between would put `WAIT` on a fresh connection) stalls here.
async fn hold_replies_until_wait(target: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&target).await.unwrap();
            tokio::spawn(relay(client, server));
        }
    });
    port
}

async fn relay(client: TcpStream, server: TcpStream) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (gate_tx, mut gate_rx) = tokio::sync::watch::channel(true);
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen).to_uppercase();
            let script_at = text.rfind("\r\nEVAL");
            let wait_after = script_at.is_some_and(|at| text[at..].contains("\r\nWAIT\r\n"));
            let _ = gate_tx.send(script_at.is_none() || wait_after);
            if sw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match sr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if gate_rx.wait_for(|open| *open).await.is_err() {
            return;
        }
        if cw.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_is_sent_with_the_write_before_its_reply_is_read() {
    let master = RedisServer::start();
    let replica = RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", &master.port().to_string()])
        .start();
    wait_for_link(&replica);
    let port = hold_replies_until_wait(master.addr()).await;
    let options = RedisOptions::default()
        .timeout(Duration::from_secs(1))
        .require_replicas(NonZeroU32::MIN, Duration::from_millis(500));
    let backend = RedisStore::connect(&format!("redis://127.0.0.1:{port}"), options)
        .await
        .unwrap();
    let tenure = Coordinator::with_backend(backend);
    let lease = tenure
        .lease("together")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let guard = lease
        .attempt()
        .await
        .expect("acquire script and WAIT travel in one request")
        .into_guard()
        .unwrap();
    assert!(matches!(
        guard
            .extend()
            .await
            .expect("extend and WAIT travel together"),
        tenure::ExtendOutcome::Extended { .. }
    ));
    // A release sends no WAIT (nothing to acknowledge), so this relay would hold
    // its reply: let the guard go without waiting for it.
    drop(guard);
}

// ---- item 7: a fence counter that cannot be incremented grants nothing ----

#[tokio::test]
async fn a_fence_counter_at_its_maximum_fails_the_acquire_and_leaves_no_lease() {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    server
        .command("SET tenure:{full}:fence 9223372036854775807")
        .unwrap();
    let err = tenure
        .lease("full")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("fence"), "{err}");
    assert!(
        server
            .command("EXISTS tenure:{full}")
            .unwrap()
            .starts_with(":0"),
        "the lease key must not outlive a failed fence increment"
    );
    let status = tenure.status("full").await.unwrap();
    assert!(!status.held);
}

// ---- item 10: eviction-prone memory policies and foreign key types ----

#[tokio::test]
async fn eviction_prone_policies_are_refused_at_connect_unless_allowed() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let server = RedisServer::builder()
            .args(["--maxmemory", "64mb", "--maxmemory-policy", policy])
            .start();
        let err = RedisStore::connect(&server.url(), plain_options())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(policy) && msg.contains("noeviction"), "{msg}");
        let err = Coordinator::connect(&server.url()).await.unwrap_err();
        assert!(err.to_string().contains(policy), "{err}");
        let err = RedisFencedStore::connect(&server.url()).await.unwrap_err();
        assert!(err.to_string().contains(policy), "{err}");

        let allowed = plain_options().allow_eviction(true);
        RedisStore::connect(&server.url(), allowed.clone())
            .await
            .expect("opted in");
        RedisFencedStore::connect_with(&server.url(), allowed)
            .await
            .expect("opted in");
    }
}

#[tokio::test]
async fn noeviction_and_a_disabled_config_command_connect() {
    let server = RedisServer::builder()
        .args(["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"])
        .start();
    RedisStore::connect(&server.url(), plain_options())
        .await
        .unwrap();
    // Managed Redis often hides CONFIG: the check is skipped, not fatal.
    let server = RedisServer::builder()
        .args(["--rename-command", "CONFIG", ""])
        .start();
    RedisStore::connect(&server.url(), plain_options())
        .await
        .unwrap();
    RedisFencedStore::connect(&server.url()).await.unwrap();
}

#[tokio::test]
async fn a_lease_key_replaced_by_another_type_makes_status_an_error() {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    let guard = tenure
        .lease("swapped")
        .watchdog(false)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    server.command("DEL tenure:{swapped}").unwrap();
    server.command("HSET tenure:{swapped} a b").unwrap();
    let err = tenure.status("swapped").await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    drop(guard);
}

// ---- item 14: passwords ----

const PASSWORD: &str = "p,w@d?x";

#[tokio::test]
async fn a_password_with_delimiters_authenticates_and_is_never_printed() {
    let server = RedisServer::builder()
        .args(["--requirepass", PASSWORD])
        .start();
    // `@` and `?` must be percent-encoded in a URL; `,` may stay raw.
    let url = format!("redis://:p,w%40d%3Fx@127.0.0.1:{}", server.port());
    let tenure = Coordinator::connect(&url)
        .await
        .expect("one master, not a quorum");
    let guard = tenure
        .lease("auth")
        .watchdog(false)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let debug = format!("{tenure:?} {guard:?} {}", tenure.backend().describe());
    for secret in ["p,w", "w%40d", "d%3Fx", "%2C"] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
    guard.release().await.unwrap();

    // A wrong password: the error names the server, not the password.
    let wrong = format!("redis://:p%2Cnope@127.0.0.1:{}", server.port());
    let err = Coordinator::connect(&wrong).await.unwrap_err();
    let msg = err.to_string();
    assert!(!msg.contains("nope") && !msg.contains("%2C"), "{msg}");
    assert!(msg.contains(&server.port().to_string()), "{msg}");

    // A password in the query string is refused, not silently dropped.
    let query = format!("redis://127.0.0.1:{}/?password=s3cret", server.port());
    let err = Coordinator::connect(&query).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Config { .. }), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
    assert!(msg.contains("redis://user:password@host"), "{msg}");
}

#[tokio::test]
async fn quorum_urls_split_only_before_a_scheme() {
    let a = RedisServer::builder()
        .args(["--requirepass", PASSWORD])
        .start();
    let b = RedisServer::builder()
        .args(["--requirepass", PASSWORD])
        .start();
    let c = RedisServer::builder()
        .args(["--requirepass", PASSWORD])
        .start();
    let urls: Vec<String> = [&a, &b, &c]
        .iter()
        .map(|s| format!("redis://:p,w%40d%3Fx@127.0.0.1:{}", s.port()))
        .collect();
    let tenure = Coordinator::connect(&urls.join(",")).await.unwrap();
    let guard = tenure
        .lease("quorum-auth")
        .watchdog(false)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .expect("all three nodes authenticate");
    let debug = format!("{tenure:?} {}", tenure.backend().describe());
    assert!(!debug.contains("p,w"), "{debug}");
    guard.release().await.unwrap();
}

// ---- item 17: a retried fenced write ----

#[tokio::test]
async fn a_retried_fenced_write_is_applied_not_reported_as_a_newer_holder() {
    let server = RedisServer::start();
    let store = RedisFencedStore::connect(&server.url()).await.unwrap();
    let mine = FenceStamp::new(Fence::new(7), AcquisitionId::from(1));
    assert_eq!(
        store.write("acct", mine, "700").await.unwrap(),
        FencedWrite::Applied
    );
    // The reply of the first write was lost; the holder retries with its stamp.
    assert_eq!(
        store.write("acct", mine, "700").await.unwrap(),
        FencedWrite::Applied
    );
    // An older fence is stale.
    assert_eq!(
        store.write("acct", Fence::new(6), "600").await.unwrap(),
        FencedWrite::Rejected {
            current: Fence::new(7)
        }
    );
    assert_eq!(
        store.read("acct").await.unwrap(),
        Some((Fence::new(7), b"700".to_vec()))
    );
}

// ---- item 20: one slot for a lease, its fence and its channel ----

#[tokio::test]
async fn lease_and_fence_keys_share_a_cluster_slot_for_any_user_key() {
    let plain = RedisServer::start();
    let cluster = RedisServer::builder()
        .args(["--cluster-enabled", "yes"])
        .start();
    let backend = RedisStore::connect(&plain.url(), plain_options())
        .await
        .unwrap();
    let client = redis::Client::open(cluster.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let mut p = redis::Client::open(plain.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for key in [
        "}x",
        "}",
        "{}",
        "{",
        "a}b",
        "}{x}",
        "\\}x",
        "\\",
        "{a}b",
        "orders:42",
    ] {
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut p)
            .await
            .unwrap();
        let token = tenure::lease::store::OwnerToken::generate().unwrap();
        let reply = backend
            .try_acquire(key, &token, Duration::from_secs(5), None)
            .await
            .unwrap();
        assert!(matches!(
            reply,
            tenure::lease::store::AcquireReply::Acquired { .. }
        ));
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut p)
            .await
            .unwrap();
        assert_eq!(keys.len(), 2, "{key:?}: {keys:?}");
        let mut slots = Vec::new();
        for k in &keys {
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(k)
                .query_async(&mut c)
                .await
                .unwrap();
            slots.push(slot);
        }
        assert_eq!(slots[0], slots[1], "{key:?}: {keys:?} in slots {slots:?}");
    }
    // Plain keys keep their layout (existing fence counters stay valid).
    assert_eq!(backend.lease_key("orders:42"), "tenure:{orders:42}");
}
