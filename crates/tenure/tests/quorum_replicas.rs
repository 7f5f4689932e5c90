//! A lease on one master that requires replica acknowledgements (`WAIT`), with
//! the replication link running through a proxy that can cut it.

#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Coordinator, Error, ExtendOutcome};
use tenure_test::RedisServer;
use tokio::time::Instant;

use common::replicated_pair;

async fn with_acks(master: &RedisServer, wait: Duration) -> Coordinator {
    let options = RedisOptions::default()
        .timeout(Duration::from_secs(2))
        .require_replicas(NonZeroU32::MIN, wait);
    Coordinator::with_backend(RedisStore::connect(&master.url(), options).await.unwrap())
}

async fn lease_key_exists(master: &RedisServer, key: &str) -> bool {
    let client = redis::Client::open(master.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("EXISTS")
        .arg(format!("tenure:{{{key}}}"))
        .query_async::<i64>(&mut c)
        .await
        .unwrap()
        == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acknowledged_lease_fails_cleanly_when_the_link_is_cut() {
    let (master, proxy, _replica) = replicated_pair();
    // Generous: a loaded machine must not make the healthy replica look absent.
    let wait = Duration::from_secs(1);
    let tenure = with_acks(&master, wait).await;
    let lease = tenure
        .lease("acked")
        .watchdog(false)
        .ttl(Duration::from_secs(30));

    // Link up: the replica acknowledges acquire and extend.
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(matches!(
        guard.extend().await.unwrap(),
        ExtendOutcome::Extended { .. }
    ));

    // Link cut while held: the extend is not acknowledged and fails, but the key
    // stays: the guard keeps its last confirmed deadline, so releasing the key
    // would let a second holder in while the guard still believes it holds.
    proxy.cut();
    let err = guard.extend().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReplicasUnacknowledged {
                needed: 1,
                acked: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        lease_key_exists(&master, "acked").await,
        "kept after the failed extend"
    );
    guard.release().await.unwrap();

    // Link cut: an acquire needing one acknowledgement fails within the wait and
    // leaves no key behind.
    let start = Instant::now();
    let err = lease.attempt().await.unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(
            err,
            Error::ReplicasUnacknowledged {
                needed: 1,
                acked: 0,
                op: "acquire",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("acked"), "{err}");
    assert!(took >= wait && took < wait * 4, "took {took:?}");
    assert!(
        !lease_key_exists(&master, "acked").await,
        "no key left behind"
    );

    // Link restored: acquisitions are acknowledged again.
    proxy.restore();
    let give_up = Instant::now() + Duration::from_secs(15);
    let guard = loop {
        match lease.attempt().await {
            Ok(out) => break out.into_guard().unwrap(),
            Err(Error::ReplicasUnacknowledged { .. }) if Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("after the link came back: {e}"),
        }
    };
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replicas_an_acknowledged_lease_is_refused() {
    let master = RedisServer::start();
    let tenure = with_acks(&master, Duration::from_millis(100)).await;
    let err = tenure
        .lease("lonely")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ReplicasUnacknowledged { acked: 0, .. }),
        "{err}"
    );
    assert!(err.is_infrastructure());
    assert!(!lease_key_exists(&master, "lonely").await);
}
