//! Semaphores and read-write leases on one master that requires replica
//! acknowledgements (`RedisOptions::require_replicas`), with the replication
//! link running through a proxy that can cut it: a grant the replica did not
//! acknowledge is given back and reported, an unacknowledged extend keeps
//! the grant, as for leases.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Coordinator, Error, ExtendOutcome, Lease};

async fn with_acks(master: &tenure_test::RedisServer) -> Coordinator {
    let options = RedisOptions::default()
        .timeout(Duration::from_secs(2))
        // Generous: a loaded machine must not make the healthy replica look absent.
        .require_replicas(NonZeroU32::MIN, Duration::from_secs(1));
    Coordinator::with_backend(RedisStore::connect(&master.url(), options).await.unwrap())
}

fn unacknowledged(err: &Error) -> bool {
    matches!(
        err,
        Error::ReplicasUnacknowledged {
            needed: 1,
            acked: 0,
            ..
        }
    )
}

/// Up: granted and extended. Cut: an extend fails but keeps the grant; a
/// grant fails and leaves nothing behind. `held` counts the holders.
async fn acknowledged<F, Fut>(proxy: &tenure_test::Proxy, lease: &Lease, held: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(matches!(
        guard.extend().await.unwrap(),
        ExtendOutcome::Extended { .. }
    ));
    proxy.cut();
    let err = guard.extend().await.unwrap_err();
    assert!(unacknowledged(&err), "{err}");
    assert_eq!(held().await, 1, "kept after the failed extend");
    guard.release().await.unwrap();

    let err = lease.attempt().await.unwrap_err();
    assert!(unacknowledged(&err), "{err}");
    assert_eq!(held().await, 0, "no grant left behind");
    proxy.restore();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_needs_the_replicas_acknowledgement() {
    let (master, proxy, _replica) = common::replicated_pair();
    let tenure = with_acks(&master).await;
    let sem = tenure
        .semaphore("acked", NonZeroU32::new(2).unwrap())
        .unwrap();
    let lease = sem.lease().watchdog(false).ttl(Duration::from_secs(30));
    acknowledged(&proxy, &lease, || async {
        sem.held().await.unwrap() as usize
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_grant_needs_the_replicas_acknowledgement() {
    let (master, proxy, _replica) = common::replicated_pair();
    let tenure = with_acks(&master).await;
    let rw = tenure.rw_lease("acked").unwrap();
    let lease = rw.write().watchdog(false).ttl(Duration::from_secs(30));
    acknowledged(&proxy, &lease, || async {
        rw.status().await.unwrap().holders.len()
    })
    .await;
}
