//! A single attempt at a full semaphore that is refused leaves nothing
//! behind, even when its process ends right after the refusal: the next
//! holder gets the permit as soon as the holder releases it.
//!
//! Each refused attempt runs in a runtime of its own that is dropped as
//! soon as the attempt returns, as a one-shot process (`tenure run
//! --no-wait`) ends. On etcd a refused attempt has created a member on an
//! etcd lease of the full TTL; a member left there would count ahead of
//! every later one and take the permit when the holder releases, for the
//! TTL, with nobody to use it.

#![allow(clippy::unwrap_used, missing_docs)]

mod fifo_common;

use std::num::NonZeroU32;
use std::time::Duration;

use fifo_common::connect;
use tenure::semaphore::Semaphore;
use tenure::{Coordinator, Lease};

/// Everyone's TTL: far longer than the test, so a member left behind
/// would outlast it.
const TTL: Duration = Duration::from_secs(60);

/// Refused attempts, each in a runtime of its own.
const ATTEMPTS: usize = 100;

/// The semaphore of one permit under test.
fn pool(tenure: &Coordinator) -> Semaphore {
    let one = NonZeroU32::new(1).unwrap();
    tenure.semaphore("pool", one).unwrap()
}

fn permit(tenure: &Coordinator) -> Lease {
    pool(tenure).lease().ttl(TTL)
}

/// One refused attempt in a current-thread runtime dropped at once after
/// it returns (its tasks with it).
fn refused_and_gone(store: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let tenure = connect(store).await;
        let got = permit(&tenure).try_acquire().await.unwrap();
        assert!(got.is_none(), "the permit is held: the attempt is refused");
    });
    drop(runtime);
}

fn refused_attempts_leave_nothing(store: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let tenure = runtime.block_on(connect(store));
    let lease = permit(&tenure);
    let holder = runtime.block_on(lease.try_acquire()).unwrap().unwrap();
    for _ in 0..ATTEMPTS {
        refused_and_gone(store);
    }
    runtime.block_on(async {
        holder.release().await.unwrap();
        let status = pool(&tenure).status().await.unwrap();
        assert!(
            status.holders.is_empty() && status.waiting.is_empty(),
            "refused attempts left members behind: {status:?}"
        );
        let next = lease.try_acquire().await.unwrap();
        assert!(next.is_some(), "the released permit went to nobody");
    });
}

#[test]
fn redis_refused_attempts_leave_nothing() {
    let server = tenure_test::RedisServer::start();
    refused_attempts_leave_nothing(&format!("redis:{}", server.url()));
}

#[test]
fn sqlite_refused_attempts_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gates.db");
    refused_attempts_leave_nothing(&format!("sqlite:{}", path.display()));
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_refused_attempts_leave_nothing() {
    let etcd = tenure_test::EtcdCluster::single();
    refused_attempts_leave_nothing(&format!("etcd:{}", etcd.url()));
}
