//! The scripted scenario behind the telemetry tests, on real redis-servers:
//! a contended hand-off, a renewal, a lease lost to a deleted key and one lost
//! to its deadline, rate-limit decisions (allowed, refused, a fallback, an
//! error) and a quorum with one node killed.

#![allow(clippy::unwrap_used, dead_code, missing_docs)]

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::limit::{Algorithm, Limiter, Quota};
use tenure::{Attempt, Coordinator, ExtendOutcome, ReleaseOutcome};
use tenure_test::RedisServer;

/// The password of the scenario's ACL user: must never show up in telemetry.
pub const PASSWORD: &str = "pw-telemetry-5e3c7a";

/// The contended key.
pub const KEY: &str = "telemetry:orders";

/// The key whose lease runs out without renewal.
pub const SHORT_KEY: &str = "telemetry:short";

/// The rate-limited key.
pub const LIMIT_KEY: &str = "telemetry:api";

/// The quorum's key.
pub const QUORUM_KEY: &str = "telemetry:quorum";

/// What the scenario did, for the assertions.
pub struct Played {
    /// The owner tokens of every grant, read from Redis.
    pub tokens: Vec<String>,
    /// The quorum nodes' names (redacted URLs) still running, and the killed one.
    pub live_nodes: Vec<String>,
    pub killed_node: String,
    /// The servers, kept alive until the assertions are done.
    pub servers: Vec<RedisServer>,
}

/// The value of `key` on `server` (a bulk-string reply to `GET`).
fn get(server: &RedisServer, key: &str) -> String {
    let reply = server.command(&format!("GET {key}")).unwrap();
    let value = reply.lines().nth(1).unwrap_or_default().to_string();
    assert!(!value.is_empty(), "GET {key}: {reply:?}");
    value
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// Waits (polling Redis, up to 10 s) until some connection is subscribed to a
/// release channel, then gives the waiter's next attempt a generous 300 ms to
/// be refused, so the release below is one the waiter is woken by.
async fn until_subscribed(server: &RedisServer) {
    for _ in 0..1000 {
        let reply = server.command("PUBSUB CHANNELS *").unwrap();
        if !reply.starts_with("*0") {
            tokio::time::sleep(Duration::from_millis(300)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the waiter never subscribed to release notifications");
}

/// Plays the scenario.
pub async fn play() -> Played {
    let server = RedisServer::start();
    let url = server.acl_user("telemetry", PASSWORD, "~* &* +@all");
    let tenure = Coordinator::connect(&url).await.unwrap();
    let mut tokens = Vec::new();

    // A holds the key; B is refused, then waits and is handed the lease.
    let lease = tenure
        .lease(KEY)
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let a = lease.attempt().await.unwrap().into_guard().unwrap();
    let a_fence = a.fence();
    let storage_key = tenure.status(KEY).await.unwrap().storage_key;
    tokens.push(get(&server, &storage_key));
    assert!(!lease.attempt().await.unwrap().is_acquired());
    let waiter = tokio::spawn({
        let lease = lease.clone();
        async move { lease.attempt_within(Duration::from_secs(20)).await }
    });
    until_subscribed(&server).await;
    assert!(matches!(
        a.extend().await.unwrap(),
        ExtendOutcome::Extended { .. }
    ));
    assert_eq!(a.release().await.unwrap(), ReleaseOutcome::Released);
    let Attempt::Acquired(b) = waiter.await.unwrap().unwrap() else {
        panic!("the waiter was not handed the lease");
    };
    assert!(b.fence() > a_fence, "the next fence");
    tokens.push(get(&server, &storage_key));

    // B's key is deleted behind its back: its renewal finds it gone.
    server.command(&format!("DEL {storage_key}")).unwrap();
    assert_eq!(b.extend().await.unwrap(), ExtendOutcome::NotHeld);
    drop(b); // released in the background (not held any more)

    // C's lease is never renewed: its local deadline passes.
    let c = tenure
        .lease(SHORT_KEY)
        .watchdog(false)
        .ttl(Duration::from_millis(100))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    tokens.push(get(
        &server,
        &tenure.status(SHORT_KEY).await.unwrap().storage_key,
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(c.is_lost());
    assert_eq!(c.release().await.unwrap(), ReleaseOutcome::NotHeld);

    // Rate limits: two allowed, one refused; then a store that is down, with
    // and without a fallback.
    let limiter = tenure.limiter(Quota::per_minute(nz(2)), Algorithm::Gcra);
    for allowed in [true, true, false] {
        assert_eq!(limiter.check(LIMIT_KEY).await.unwrap().allowed, allowed);
    }
    let mut gone = RedisServer::start();
    let down = Coordinator::connect(&gone.url()).await.unwrap();
    gone.kill();
    let bare = down.limiter(Quota::per_minute(nz(2)), Algorithm::Gcra);
    assert!(bare.check(LIMIT_KEY).await.is_err());
    let with_fallback = bare.fallback(Limiter::local(Quota::per_minute(nz(2)), Algorithm::Gcra));
    assert!(with_fallback.check(LIMIT_KEY).await.unwrap().allowed);

    // A quorum of three with one node killed: a majority still grants.
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = Coordinator::connect_quorum(nodes.iter().map(RedisServer::url))
        .await
        .unwrap();
    nodes[2].kill();
    let q = quorum
        .lease(QUORUM_KEY)
        .watchdog(false)
        .ttl(Duration::from_secs(10))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    q.release().await.unwrap();
    let live_nodes = nodes[..2].iter().map(RedisServer::url).collect();
    let killed_node = nodes[2].url();

    let mut servers = vec![server, gone];
    servers.extend(nodes);
    Played {
        tokens,
        live_nodes,
        killed_node,
        servers,
    }
}
