//! Shared helpers for the lease tests: a backend per flavour, and the Redis
//! set-ups (nodes, a replicated pair, raw reads) several test files need.

#![allow(clippy::unwrap_used)]
#![allow(dead_code, missing_docs)]

use std::time::Duration;

use tenure::quorum::{QuorumOptions, QuorumStore};
use tenure::redis::{RedisOptions, RedisStore};
use tenure::sqlite::{SqliteOptions, SqliteStore};
use tenure::{Coordinator, Fence, LeaseGuard};
use tenure_test::{Proxy, RedisServer};

/// A tenure handle plus the server (or database directory) behind it, kept
/// alive by the test.
pub struct Fixture {
    pub tenure: Coordinator,
    pub server: Option<RedisServer>,
    pub dir: Option<tempfile::TempDir>,
    /// The nodes of a quorum fixture.
    pub nodes: Vec<RedisServer>,
}

pub async fn memory() -> Fixture {
    Fixture {
        tenure: Coordinator::memory(),
        server: None,
        dir: None,
        nodes: Vec::new(),
    }
}

pub async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let backend = SqliteStore::open(dir.path().join("tenure.db"), SqliteOptions::default())
        .await
        .expect("open the test database");
    Fixture {
        tenure: Coordinator::with_backend(backend),
        server: None,
        dir: Some(dir),
        nodes: Vec::new(),
    }
}

pub async fn redis() -> Fixture {
    let server = RedisServer::start();
    Fixture {
        tenure: connect_redis(&server).await,
        server: Some(server),
        dir: None,
        nodes: Vec::new(),
    }
}

/// A handle on `server` with a 500 ms call timeout.
pub async fn connect_redis(server: &RedisServer) -> Coordinator {
    let backend = RedisStore::connect(
        &server.url(),
        RedisOptions::default().timeout(Duration::from_millis(500)),
    )
    .await
    .expect("connect to the test redis-server");
    Coordinator::with_backend(backend)
}

/// Runs `body` as a short-lived process runs its `main`: on a current-thread
/// runtime of its own, dropped (and every task spawned on it with it) as soon
/// as `body` returns.
pub fn as_one_process<F: std::future::Future>(body: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(body)
}

/// The status of `key` on `server`, read by a process of its own.
pub fn status_on(server: &RedisServer, key: &str) -> tenure::LeaseStatus {
    as_one_process(async {
        let tenure = connect_redis(server).await;
        tenure.status(key).await.unwrap()
    })
}

/// Waits (at most 10 s) until `key` is free; `true` if it became free.
pub async fn freed(tenure: &Coordinator, key: &str) -> bool {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < until {
        // A link the fault proxy just cut fails a call or two: ask again.
        if matches!(tenure.status(key).await, Ok(status) if !status.held) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Takes the free lease `key` without a watchdog and hands back its guard.
/// The first calls on a fresh server load the scripts (an `EVALSHA` answered
/// `NOSCRIPT` is a call too, and grants nothing), so tests that count or
/// freeze calls make this one first.
pub async fn warm_guard(tenure: &Coordinator, key: &str) -> LeaseGuard {
    let attempt = tenure.lease(key).watchdog(false).attempt().await.unwrap();
    attempt.into_guard().expect("the warm-up key is free")
}

/// Takes each `(key, fence)` again through `other` (waiting at most `within`)
/// and checks that the new fence is above the old one: fences go on after a
/// failover instead of repeating.
pub async fn assert_fences_go_on(other: &Coordinator, fences: &[(&str, Fence)], within: Duration) {
    for &(key, fence) in fences {
        let next = other
            .lease(key)
            .watchdog(false)
            .attempt_within(within)
            .await
            .unwrap();
        let next = next.into_guard().unwrap();
        assert!(
            next.fence() > fence,
            "{key}: fence {} after {fence}",
            next.fence()
        );
    }
}

/// `n` fresh redis-servers (quorum nodes).
pub fn start_nodes(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// `GET key` on the server at `url`, bypassing tenure.
pub async fn redis_get(url: &str, key: &str) -> Option<String> {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

/// A master, a proxy in front of it, and a replica that replicates through the
/// proxy; returns once the replica's link is up.
pub fn replicated_pair() -> (RedisServer, Proxy, RedisServer) {
    let master = RedisServer::start();
    let proxy = Proxy::start(&master.addr());
    let replica = RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", &proxy.port().to_string()])
        .start();
    wait_for_link(&replica);
    (master, proxy, replica)
}

/// Waits (at most 15 s) until `replica` reports its master link up.
pub fn wait_for_link(replica: &RedisServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !replica
        .command("INFO replication")
        .unwrap()
        .contains("master_link_status:up")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "replica never synced: {}",
            replica.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Three real redis-servers behind one quorum backend.
pub async fn quorum() -> Fixture {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let backend = QuorumStore::connect(
        nodes.iter().map(RedisServer::url),
        QuorumOptions::default().node_timeout(Duration::from_millis(250)),
    )
    .await
    .expect("connect to the test quorum");
    Fixture {
        tenure: Coordinator::with_backend(backend),
        server: None,
        dir: None,
        nodes,
    }
}

/// Generates one `#[tokio::test]` per backend for each contract function.
#[macro_export]
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fx = $crate::common::memory().await;
                    super::$name(&fx).await;
                }
            )*
        }
        mod sqlite_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fx = $crate::common::sqlite().await;
                    super::$name(&fx).await;
                }
            )*
        }
        mod redis_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fx = $crate::common::redis().await;
                    super::$name(&fx).await;
                }
            )*
        }
        mod quorum_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fx = $crate::common::quorum().await;
                    super::$name(&fx).await;
                }
            )*
        }
    };
}
