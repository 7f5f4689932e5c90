//! Every public setter and call that takes a `Duration`, with the extremes a
//! user can pass (zero, 1 ns, a century, `Duration::MAX`): each either works
//! or refuses with `InvalidArgument` — never a panic (in the caller or in a
//! background task), never a misleading storage error, never a hang.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use tenure::election::Election;
#[cfg(feature = "etcd")]
use tenure::etcd::EtcdOptions;
use tenure::limit::{Algorithm, Quota};
use tenure::quorum::{QuorumOptions, QuorumStore};
use tenure::redis::{RedisOptions, RedisStore};
use tenure::sqlite::{SqliteOptions, SqliteStore};
use tenure::{Attempt, Coordinator, Error, Lease};
use tenure_test::RedisServer;

const CENTURY: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// The values every parameter is tried with.
const EXTREMES: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_nanos(1),
    CENTURY,
    Duration::MAX,
];

/// Runs `call` (bounded: a hang fails the test) and accepts success or a
/// refusal naming bad input (or, for a budget below a millisecond, a timeout).
async fn works_or_refuses<T, F>(what: &str, d: Duration, call: F) -> Option<T>
where
    F: Future<Output = tenure::Result<T>>,
{
    let result = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap_or_else(|_| panic!("{what}({d:?}) hung"));
    match result {
        Ok(value) => Some(value),
        Err(Error::InvalidArgument { .. }) => None,
        // A budget below a millisecond may truthfully run out.
        Err(e) if d < Duration::from_millis(1) && e.is_transient() => None,
        Err(e) => panic!("{what}({d:?}): {e} (expected success or InvalidArgument)"),
    }
}

/// Takes and gives back a lease on `tenure`, with TTL 2 s.
async fn lease_round_trip(tenure: &Coordinator, key: &str) -> tenure::Result<()> {
    take_and_release(tenure.lease(key).ttl(Duration::from_secs(2))).await
}

/// Takes `lease` if it is free, and gives it back.
async fn take_and_release(lease: Lease) -> tenure::Result<()> {
    if let Some(guard) = lease.try_acquire().await? {
        guard.release().await?;
    }
    Ok(())
}

/// Campaigns once as `a` on `election`, and resigns if elected.
async fn campaign_and_resign(election: Election) -> tenure::Result<()> {
    if let Some(leader) = election.try_campaign("a").await? {
        leader.resign().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_election_and_once_parameters() {
    let tenure = Coordinator::memory();
    for (i, d) in EXTREMES.into_iter().enumerate() {
        let lease = tenure.lease(format!("ttl-{i}"));
        works_or_refuses("Lease::ttl", d, take_and_release(lease.ttl(d))).await;
        let lease = tenure
            .lease(format!("renew-{i}"))
            .ttl(Duration::from_secs(2));
        let renewed = take_and_release(lease.renew_every(d));
        works_or_refuses("Lease::renew_every", d, renewed).await;
        let lease = tenure.lease(format!("within-{i}"));
        works_or_refuses("Lease::attempt_within", d, async {
            if let Attempt::Acquired(g) = lease.attempt_within(d).await? {
                g.release().await?;
            }
            Ok(())
        })
        .await;

        let election = tenure.election(format!("e-ttl-{i}"));
        works_or_refuses("Election::ttl", d, campaign_and_resign(election.ttl(d))).await;
        let election = tenure.election(format!("e-poll-{i}"));
        let polled = campaign_and_resign(election.poll_every(d));
        works_or_refuses("Election::poll_every", d, polled).await;
        let election = tenure.election(format!("e-within-{i}"));
        works_or_refuses("Election::campaign_timeout", d, async {
            election.campaign_timeout("a", d).await?.resign().await?;
            Ok(())
        })
        .await;

        for (name, once) in [
            ("Once::ttl", tenure.once(format!("o-ttl-{i}")).ttl(d)),
            (
                "Once::retain",
                tenure.once(format!("o-retain-{i}")).retain(d),
            ),
            ("Once::wait", tenure.once(format!("o-wait-{i}")).wait(d)),
        ] {
            works_or_refuses(name, d, async {
                once.run(|_| async { Ok::<u8, u8>(1) }).await.map(drop)
            })
            .await;
        }
    }
}

/// `Once::wait` while another caller runs: the wait ends when the runner
/// records its result, whatever the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_waits_for_a_runner_with_any_bound() {
    let tenure = Coordinator::memory();
    for (i, d) in EXTREMES.into_iter().enumerate() {
        let key = format!("busy-{i}");
        let guard = tenure.lease(&key).try_acquire().await.unwrap().unwrap();
        let waiter = tenure.once(&key).wait(d);
        let waited =
            tokio::spawn(async move { waiter.run(|_| async { Ok::<u8, u8>(2) }).await.map(drop) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.unwrap();
        works_or_refuses("Once::wait (busy)", d, async { waited.await.unwrap() }).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiter_parameters() {
    let tenure = Coordinator::memory();
    let per_second = Quota::per_second(NonZeroU32::new(1).unwrap());
    for (i, d) in EXTREMES.into_iter().enumerate() {
        if let Ok(quota) = Quota::new(1, d) {
            let limiter = tenure.limiter(quota, Algorithm::Gcra);
            works_or_refuses("Quota::new", d, limiter.check("q")).await;
            works_or_refuses(
                "Quota::new (wait)",
                d,
                limiter.wait("q", Duration::from_millis(5)),
            )
            .await;
        }
        let limiter = tenure.limiter(per_second, Algorithm::Gcra);
        // The first unit is free; the second must wait (or be refused at once).
        let key = format!("w-{i}");
        works_or_refuses("Limiter::wait", d, limiter.wait(&key, d)).await;
        let wait = tokio::time::timeout(Duration::from_millis(200), limiter.wait(&key, d)).await;
        if let Ok(result) = wait {
            works_or_refuses("Limiter::wait (busy)", d, async { result }).await;
        }
        works_or_refuses(
            "Limiter::wait_n",
            d,
            limiter.wait_n(&format!("n-{i}"), 1, d),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_options() {
    let dir = tempfile::tempdir().unwrap();
    for (i, d) in EXTREMES.into_iter().enumerate() {
        for (name, options) in [
            (
                "SqliteOptions::busy_timeout",
                SqliteOptions::default().busy_timeout(d),
            ),
            (
                "SqliteOptions::poll_interval",
                SqliteOptions::default().poll_interval(d),
            ),
        ] {
            let path = dir.path().join(format!("{i}-{}.db", name.len()));
            works_or_refuses(name, d, async {
                let store = SqliteStore::open(path, options).await?;
                lease_round_trip(&Coordinator::with_backend(store), "k").await
            })
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_options() {
    let server = RedisServer::start();
    let one = NonZeroU32::new(1).unwrap();
    for d in EXTREMES {
        for (name, options) in [
            ("RedisOptions::timeout", RedisOptions::default().timeout(d)),
            (
                "RedisOptions::connect_timeout",
                RedisOptions::default().connect_timeout(d),
            ),
            (
                "RedisOptions::require_replicas",
                RedisOptions::default().require_replicas(one, d),
            ),
        ] {
            works_or_refuses(name, d, async {
                let store = RedisStore::connect(&server.url(), options).await?;
                let tenure = Coordinator::with_backend(store);
                match lease_round_trip(&tenure, "k").await {
                    // No replica to acknowledge: the expected answer.
                    Err(Error::ReplicasUnacknowledged { .. }) => Ok(()),
                    other => other,
                }
            })
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_options() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    for d in EXTREMES {
        for (name, options) in [
            (
                "QuorumOptions::node_timeout",
                QuorumOptions::default().node_timeout(d),
            ),
            (
                "QuorumOptions::connect_timeout",
                QuorumOptions::default().connect_timeout(d),
            ),
            (
                "QuorumOptions::retry_delay",
                QuorumOptions::default().retry_delay(d),
            ),
        ] {
            works_or_refuses(name, d, async {
                let store = QuorumStore::connect(urls.iter(), options).await?;
                lease_round_trip(&Coordinator::with_backend(store), "k").await
            })
            .await;
        }
    }
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_options() {
    let cluster = tenure_test::EtcdCluster::single();
    for d in EXTREMES {
        for (name, options) in [
            ("EtcdOptions::timeout", EtcdOptions::default().timeout(d)),
            (
                "EtcdOptions::connect_timeout",
                EtcdOptions::default().connect_timeout(d),
            ),
        ] {
            works_or_refuses(name, d, async {
                let tenure = Coordinator::connect_etcd(&cluster.url(), options).await?;
                lease_round_trip(&tenure, "k").await
            })
            .await;
        }
    }
}

/// The value types and the store implementers' helpers saturate.
#[tokio::test]
async fn values_and_implementer_helpers_saturate() {
    use tenure::clock::{Clock, FakeClock, Moment};
    use tenure::lease::store::{DriftMargin, valid_until};
    use tenure::lease::{Holder, HolderInfo, drift};
    use tenure::limit::{Decision, Timestamp};

    let memory = tenure::memory::MemoryStore::new();
    for d in EXTREMES {
        let clock = FakeClock::new();
        clock.advance(d);
        clock.advance(d);
        let at = Moment::from_origin(d) + d;
        assert!(at >= clock.now().min(at));
        let _ = (
            drift(d),
            DriftMargin::default().validity(d),
            valid_until(at, d),
        );
        let _ = Timestamp::now_wall().plus(d);
        let _ = (Decision::allowed(1, 0, d), Decision::refused(1, d, d));
        let _ = Holder::new(HolderInfo::this_process(), Some(d));
        let mut watch = tenure::lease::store::LeaseStore::watch_releases(&memory, "k").await;
        let _ = tokio::time::timeout(Duration::from_millis(20), watch.wait(d)).await;
    }
}
