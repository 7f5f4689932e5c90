//! Shared helpers for the lease tests: a backend per flavour.

#![allow(clippy::unwrap_used)]
#![allow(dead_code, missing_docs)]

use std::time::Duration;

use warden::Warden;
use warden::backend::{RedisBackend, RedisOptions};
use warden_test::RedisServer;

/// A warden handle plus the server behind it (kept alive by the test).
pub struct Fixture {
    pub warden: Warden,
    pub server: Option<RedisServer>,
}

pub async fn memory() -> Fixture {
    Fixture {
        warden: Warden::memory(),
        server: None,
    }
}

pub async fn redis() -> Fixture {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(
        &server.url(),
        RedisOptions::default().timeout(Duration::from_millis(500)),
    )
    .await
    .expect("connect to the test redis-server");
    Fixture {
        warden: Warden::with_backend(backend),
        server: Some(server),
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
        mod redis_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fx = $crate::common::redis().await;
                    super::$name(&fx).await;
                }
            )*
        }
    };
}
