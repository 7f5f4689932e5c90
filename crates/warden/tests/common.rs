//! Shared helpers for the lease tests: a backend per flavour.

#![allow(clippy::unwrap_used)]
#![allow(dead_code, missing_docs)]

use std::time::Duration;

use warden::Warden;
use warden::quorum::{QuorumOptions, QuorumStore};
use warden::redis::{RedisOptions, RedisStore};
use warden::sqlite::{SqliteOptions, SqliteStore};
use warden_test::RedisServer;

/// A warden handle plus the server (or database directory) behind it, kept
/// alive by the test.
pub struct Fixture {
    pub warden: Warden,
    pub server: Option<RedisServer>,
    pub dir: Option<tempfile::TempDir>,
    /// The nodes of a quorum fixture.
    pub nodes: Vec<RedisServer>,
}

pub async fn memory() -> Fixture {
    Fixture {
        warden: Warden::memory(),
        server: None,
        dir: None,
        nodes: Vec::new(),
    }
}

pub async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let backend = SqliteStore::open(dir.path().join("warden.db"), SqliteOptions::default())
        .await
        .expect("open the test database");
    Fixture {
        warden: Warden::with_backend(backend),
        server: None,
        dir: Some(dir),
        nodes: Vec::new(),
    }
}

pub async fn redis() -> Fixture {
    let server = RedisServer::start();
    let backend = RedisStore::connect(
        &server.url(),
        RedisOptions::default().timeout(Duration::from_millis(500)),
    )
    .await
    .expect("connect to the test redis-server");
    Fixture {
        warden: Warden::with_backend(backend),
        server: Some(server),
        dir: None,
        nodes: Vec::new(),
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
        warden: Warden::with_backend(backend),
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
