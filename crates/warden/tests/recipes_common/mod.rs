//! Fixtures of the recipe tests (election, once, semaphore): a handle per store,
//! connected by URL so that records and permits live in the same store.

#![allow(clippy::unwrap_used, dead_code, missing_docs)]

use std::time::Duration;

use warden::Warden;
use warden_test::{EtcdCluster, RedisServer};

/// A warden handle plus what keeps its store alive.
pub struct Fixture {
    pub warden: Warden,
    pub url: String,
    pub server: Option<RedisServer>,
    pub nodes: Vec<RedisServer>,
    pub dir: Option<tempfile::TempDir>,
    pub etcd: Option<EtcdCluster>,
    /// How long past a TTL the store may still keep a key: none but etcd's,
    /// which counts TTLs in whole seconds (rounded up) and ends expired
    /// leases in a sweep every 500 ms.
    pub expiry: Duration,
}

pub async fn memory() -> Fixture {
    Fixture {
        warden: Warden::memory(),
        url: "memory:".into(),
        server: None,
        nodes: Vec::new(),
        dir: None,
        etcd: None,
        expiry: Duration::ZERO,
    }
}

pub async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("warden.db").display());
    Fixture {
        warden: Warden::connect(&url).await.expect("open the test database"),
        url,
        server: None,
        nodes: Vec::new(),
        dir: Some(dir),
        etcd: None,
        expiry: Duration::ZERO,
    }
}

pub async fn redis() -> Fixture {
    let server = RedisServer::start();
    let url = server.url();
    Fixture {
        warden: Warden::connect(&url)
            .await
            .expect("connect to redis-server"),
        url,
        server: Some(server),
        nodes: Vec::new(),
        dir: None,
        etcd: None,
        expiry: Duration::ZERO,
    }
}

pub async fn quorum() -> Fixture {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = nodes
        .iter()
        .map(RedisServer::url)
        .collect::<Vec<_>>()
        .join(",");
    Fixture {
        warden: Warden::connect(&url).await.expect("connect to the quorum"),
        url,
        server: None,
        nodes,
        dir: None,
        etcd: None,
        expiry: Duration::ZERO,
    }
}

/// A single-member etcd, connected by URL.
pub async fn etcd() -> Fixture {
    let etcd = EtcdCluster::single();
    let url = etcd.url();
    Fixture {
        warden: Warden::connect(&url).await.expect("connect to etcd"),
        url,
        server: None,
        nodes: Vec::new(),
        dir: None,
        etcd: Some(etcd),
        expiry: Duration::from_secs(3),
    }
}

/// One `#[tokio::test]` on `store` for each function named, in a module
/// named after the store.
#[macro_export]
macro_rules! on_store {
    ($store:ident: $($name:ident),* $(,)?) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fx = $crate::recipes_common::$store().await;
                    super::$name(&fx).await;
                }
            )*
        }
    };
}
