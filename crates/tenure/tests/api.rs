//! The short paths of the public API: acquire / acquire_timeout / try_acquire
//! / with, the fenced store from the same handle, one constructor with
//! options that keeps every capability, and refusals that name the
//! alternative.

#![allow(clippy::unwrap_used, missing_docs)]

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::fence::FencedWrite;
use tenure::limit::{Algorithm, Quota};
use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Coordinator, Error};
use tenure_test::RedisServer;

/// Generous bound for waits that should end at once; never reached when the
/// code is right.
const BOUND: Duration = Duration::from_secs(10);

fn one_a_minute() -> Quota {
    Quota::per_minute(NonZeroU32::new(1).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_happy_path_on_redis() {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    let lease = tenure.lease("api:acct");

    let held = lease.acquire().await.unwrap();
    assert!(lease.try_acquire().await.unwrap().is_none());
    let busy = lease
        .acquire_timeout(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    assert!(!busy.is_infrastructure() && !busy.is_transient());
    assert!(
        matches!(busy, Error::Busy { retry_in: Some(_), ref key } if key == "api:acct"),
        "{busy:?}"
    );
    let stale = held.fence();
    held.release().await.unwrap();

    // The fenced store comes from the same handle, and `with` needs one `?`.
    let balances = tenure.fenced_store().unwrap();
    let (fence, written) = lease
        .with(|fence| {
            let balances = balances.clone();
            async move { Ok::<_, Error>((fence, balances.write("acct", fence, "150").await?)) }
        })
        .await
        .unwrap();
    assert!(fence > stale);
    assert_eq!(written, FencedWrite::Applied);
    assert_eq!(
        balances.write("acct", stale, "100").await.unwrap(),
        FencedWrite::Rejected { current: fence }
    );
    assert!(
        lease.try_acquire().await.unwrap().is_some(),
        "`with` released"
    );
}

#[tokio::test]
async fn acquire_waits_for_the_release() {
    let tenure = Coordinator::memory();
    let lease = tenure.lease("api:wait");
    let first = lease.try_acquire().await.unwrap().expect("free");
    let waiter = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.acquire().await })
    };
    tokio::task::yield_now().await;
    let fence = first.fence();
    first.release().await.unwrap();
    let second = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert!(second.fence() > fence);
}

#[tokio::test]
async fn with_reports_a_lost_lease_as_an_error() {
    let tenure = Coordinator::memory();
    let lease = tenure
        .lease("api:lost")
        .ttl(Duration::from_millis(50))
        .watchdog(false);
    let outcome: Result<(), Error> = tokio::time::timeout(
        BOUND,
        lease.with(|_fence| async {
            tokio::time::sleep(BOUND * 2).await;
            Ok(())
        }),
    )
    .await
    .expect("the loss ends the work");
    assert!(
        matches!(outcome, Err(Error::LeaseLost { ref key }) if key == "api:lost"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn campaign_timeout_reports_busy() {
    let tenure = Coordinator::memory();
    let election = tenure.election("api:chair");
    let leader = election.try_campaign("a").await.unwrap().expect("free");
    let e = election
        .campaign_timeout("b", Duration::from_millis(30))
        .await
        .unwrap_err();
    assert!(e.is_busy(), "{e}");
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_on_a_quorum_is_refused_naming_the_alternatives() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let tenure = Coordinator::connect_quorum(nodes.iter().map(RedisServer::url))
        .await
        .unwrap();
    let e = tenure
        .limiter(one_a_minute(), Algorithm::Gcra)
        .check("ip:1")
        .await
        .unwrap_err();
    let Error::Unsupported { what, instead, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(*what, "shared rate limits");
    for alternative in ["one Redis master", "SQLite", "MemoryLimits"] {
        assert!(instead.contains(alternative), "{e}");
    }
    assert!(!e.is_transient());
}

/// Two handles with the same options count one limit: the rate limits live
/// in Redis, not in each process.
async fn limits_are_shared(a: &Coordinator, b: &Coordinator) {
    let quota = one_a_minute();
    let first = a.limiter(quota, Algorithm::Gcra).check("ip:2").await;
    assert!(first.unwrap().allowed);
    let second = b.limiter(quota, Algorithm::Gcra).check("ip:2").await;
    assert!(!second.unwrap().allowed, "counted per process");
}

/// Records (the leader's id), semaphores and the fenced store work, under
/// the options' prefix.
async fn every_capability_works(tenure: &Coordinator, prefix: &str) {
    let election = tenure.election("api:lead");
    let office = election.try_campaign("node-a").await.unwrap().unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.id.as_deref(), Some("node-a"));
    office.resign().await.unwrap();
    let sem = tenure
        .semaphore("api:sem", NonZeroU32::new(2).unwrap())
        .unwrap();
    let permit = sem.lease().try_acquire().await.unwrap().expect("a permit");
    permit.release().await.unwrap();
    let fenced = tenure.fenced_store().unwrap();
    assert!(fenced.storage_key("r").starts_with(prefix));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_keep_every_capability() {
    let server = RedisServer::start();
    let options = || RedisOptions::default().prefix("app:");
    let connect = || {
        Coordinator::builder(server.url())
            .redis_options(options())
            .connect()
    };
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    limits_are_shared(&a, &b).await;
    every_capability_works(&a, "app:").await;

    // A store wired by hand brings the same capabilities.
    let by_hand = || async {
        Coordinator::with_backend(RedisStore::connect(&server.url(), options()).await.unwrap())
    };
    let (c, d) = (by_hand().await, by_hand().await);
    let quota = one_a_minute();
    let key = "ip:3";
    assert!(
        c.limiter(quota, Algorithm::Gcra)
            .check(key)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        !d.limiter(quota, Algorithm::Gcra)
            .check(key)
            .await
            .unwrap()
            .allowed
    );
    every_capability_works(&c, "app:").await;
}

#[tokio::test]
async fn options_for_another_store_are_refused() {
    let e = Coordinator::builder("memory:")
        .redis_options(RedisOptions::default())
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config { .. }), "{e:?}");
    assert!(e.to_string().contains("Redis options"), "{e}");
    let memory = Coordinator::memory();
    let e = memory.fenced_store().unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
}

/// Renewal is on by default: a guard held for several TTLs keeps its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_renew_by_default() {
    let tenure = Coordinator::memory();
    let ttl = Duration::from_secs(1);
    let lease = tenure.lease("api:renewed").ttl(ttl);
    let guard = lease.try_acquire().await.unwrap().expect("free");
    tokio::time::sleep(ttl * 5 / 2).await;
    assert!(!guard.is_lost());
    assert!(lease.try_acquire().await.unwrap().is_none(), "still held");
    guard.release().await.unwrap();
}
