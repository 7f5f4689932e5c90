//! Fixtures of the recipe tests (election, once, semaphore): a handle per store,
//! connected by URL so that records and permits live in the same store.

#![allow(clippy::unwrap_used, dead_code, missing_docs)]

use std::time::Duration;

use tenure::Coordinator;
use tenure_test::{EtcdCluster, RedisCluster, RedisServer};

/// A tenure handle plus what keeps its store alive.
pub struct Fixture {
    pub tenure: Coordinator,
    pub url: String,
    pub server: Option<RedisServer>,
    pub nodes: Vec<RedisServer>,
    pub dir: Option<tempfile::TempDir>,
    pub etcd: Option<EtcdCluster>,
    pub cluster: Option<RedisCluster>,
    /// How long past a TTL the store may still keep a key: none but etcd's,
    /// which counts TTLs in whole seconds (rounded up) and ends expired
    /// leases in a sweep every 500 ms.
    pub expiry: Duration,
}

pub async fn memory() -> Fixture {
    Fixture {
        tenure: Coordinator::memory(),
        url: "memory:".into(),
        server: None,
        nodes: Vec::new(),
        dir: None,
        etcd: None,
        cluster: None,
        expiry: Duration::ZERO,
    }
}

pub async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("tenure.db").display());
    Fixture {
        tenure: Coordinator::connect(&url)
            .await
            .expect("open the test database"),
        url,
        server: None,
        nodes: Vec::new(),
        dir: Some(dir),
        etcd: None,
        cluster: None,
        expiry: Duration::ZERO,
    }
}

pub async fn redis() -> Fixture {
    let server = RedisServer::start();
    let url = server.url();
    Fixture {
        tenure: Coordinator::connect(&url)
            .await
            .expect("connect to redis-server"),
        url,
        server: Some(server),
        nodes: Vec::new(),
        dir: None,
        etcd: None,
        cluster: None,
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
        tenure: Coordinator::connect(&url)
            .await
            .expect("connect to the quorum"),
        url,
        server: None,
        nodes,
        dir: None,
        etcd: None,
        cluster: None,
        expiry: Duration::ZERO,
    }
}

/// A single-member etcd, connected by URL.
pub async fn etcd() -> Fixture {
    let etcd = EtcdCluster::single();
    let url = etcd.url();
    Fixture {
        tenure: Coordinator::connect(&url).await.expect("connect to etcd"),
        url,
        server: None,
        nodes: Vec::new(),
        dir: None,
        etcd: Some(etcd),
        cluster: None,
        expiry: Duration::from_secs(3),
    }
}

/// A Redis Cluster of three masters, connected by URL.
pub async fn cluster() -> Fixture {
    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    Fixture {
        tenure: Coordinator::connect(&url)
            .await
            .expect("connect to the cluster"),
        url,
        server: None,
        nodes: Vec::new(),
        dir: None,
        etcd: None,
        cluster: Some(cluster),
        expiry: Duration::ZERO,
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

/// Data of another kind than tenure's, left in a key tenure uses (by hand,
/// by another program sharing the prefix).
#[derive(Debug, Clone, Copy)]
pub enum Foreign {
    /// A string that is not a number.
    Text,
    /// A list.
    List,
    /// A hash whose `fence` field is not a number.
    Hash,
}

impl Foreign {
    /// Writes this kind of data into `key`.
    pub fn plant(self, server: &RedisServer, key: &str) {
        let command = match self {
            Foreign::Text => format!("SET {key} oops"),
            Foreign::List => format!("RPUSH {key} oops"),
            Foreign::Hash => format!("HSET {key} fence oops value oops"),
        };
        server.command(&command).unwrap();
    }

    /// Panics unless `key` still holds exactly what [`plant`](Self::plant)
    /// wrote.
    pub fn assert_intact(self, server: &RedisServer, key: &str) {
        let (command, expected) = match self {
            Foreign::Text => (format!("GET {key}"), "$4\r\noops\r\n"),
            Foreign::List => (format!("LRANGE {key} 0 -1"), "*1\r\n$4\r\noops\r\n"),
            Foreign::Hash => (
                format!("HMGET {key} fence value"),
                "*2\r\n$4\r\noops\r\n$4\r\noops\r\n",
            ),
        };
        let reply = server.command(&command).unwrap();
        assert_eq!(reply, expected, "{key} was changed");
        let ttl = server.command(&format!("PTTL {key}")).unwrap();
        assert_eq!(ttl, ":-1\r\n", "{key} was given an expiry");
    }
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&format!("EXISTS {key}")).unwrap() == ":1\r\n"
}

/// The keys an election or a run-once operation uses on Redis, as suffixes of
/// `tenure:{K}` (the lease, its fence counter, the record), each with the
/// kinds of foreign data it must refuse.
pub const LEASE_AND_RECORD_KEYS: [(&str, Foreign); 7] = [
    ("", Foreign::List),
    ("", Foreign::Hash),
    (":fence", Foreign::Text),
    (":fence", Foreign::List),
    (":record", Foreign::Text),
    (":record", Foreign::List),
    (":record", Foreign::Hash),
];

/// The Redis key of `suffix` for the user key `name`, whose record key is
/// `name` followed by `record_tag` (run-once results keep their records
/// apart from an election's).
fn storage_key(name: &str, suffix: &str, record_tag: &str) -> String {
    if suffix == ":record" {
        format!("tenure:{{{name}{record_tag}}}{suffix}")
    } else {
        format!("tenure:{{{name}}}{suffix}")
    }
}

/// For each of [`LEASE_AND_RECORD_KEYS`] on a fresh name: plants the foreign
/// data, runs `attempt` on the name, and checks that it failed with
/// [`Error::WrongType`](tenure::Error::WrongType) naming the key, left the
/// data as it was and created none of the other keys.
pub async fn foreign_keys_are_refused<F, Fut>(
    server: &RedisServer,
    prefix: &str,
    record_tag: &str,
    attempt: F,
) where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = tenure::Error>,
{
    for (i, (suffix, foreign)) in LEASE_AND_RECORD_KEYS.into_iter().enumerate() {
        let name = format!("{prefix}{i}");
        let key = storage_key(&name, suffix, record_tag);
        foreign.plant(server, &key);
        let e = attempt(name.clone()).await;
        assert!(
            matches!(&e, tenure::Error::WrongType { .. })
                && e.to_string().contains(&key.escape_debug().to_string()),
            "{key} ({foreign:?}): {e}"
        );
        foreign.assert_intact(server, &key);
        for other in ["", ":fence", ":record"] {
            let other_key = storage_key(&name, other, record_tag);
            if other != suffix && other != ":fence" {
                assert!(
                    !exists(server, &other_key),
                    "{key} ({foreign:?}): {other_key} was left"
                );
            }
        }
    }
}
