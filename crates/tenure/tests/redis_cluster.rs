//! tenure on a real Redis Cluster (3 masters, 1 replica each, started by
//! `tenure_test::RedisCluster`): the lease and limiter contracts as on one
//! node, keys whose braces would split a lease from its fence, the fenced
//! store, release notifications on every master, and a master killed with
//! SIGKILL while leases and limits are in use (see also
//! `redis_cluster_failover.rs`).

#![allow(clippy::unwrap_used, missing_docs)]

mod lease_common;
mod limit_common;

use std::collections::HashSet;
use std::time::Duration;

use lease_common::Timing;
use tenure::fence::FencedWrite;
use tenure::limit::{Algorithm, Quota};
use tenure::once::OnceOutcome;
use tenure::redis::{RedisFencedStore, RedisOptions, RedisStore};
use tenure::{Attempt, Coordinator};
use tenure_test::RedisCluster;

async fn connect(cluster: &RedisCluster) -> Coordinator {
    Coordinator::connect(&cluster.url())
        .await
        .expect("connect to the cluster")
}

/// Keys whose text is full of hash-tag syntax: a lease, its fence counter and
/// its release channel must still land in one slot.
const AWKWARD_KEYS: [&str; 9] = [
    "{",
    "}",
    "}x",
    "}{x}",
    "{}",
    "a{b}c",
    "\\}x",
    "{orders:42}",
    "x}",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_their_contract_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let w = connect(&cluster).await;
    let t = &Timing::EXACT;
    lease_common::second_acquire_fails_while_held_then_succeeds_after_expiry(&w, t).await;
    lease_common::release_and_extend_by_a_stale_holder_change_nothing(&w, t).await;
    lease_common::watchdog_keeps_the_lease_for_several_ttls(&w, t).await;
    lease_common::extend_never_revives_an_expired_lease(&w, t).await;
    lease_common::release_hands_over_to_a_waiter_quickly(&w, t).await;
    lease_common::waiter_gets_an_expiring_lease_when_its_ttl_runs_out(&w, t).await;
    lease_common::acquire_within_gives_up_at_its_deadline(&w, t).await;
    lease_common::dropping_a_guard_releases_in_the_background(&w, t).await;
    lease_common::sixty_four_tasks_lose_no_increment_and_fences_increase(&w, t).await;
    lease_common::bad_input_is_a_clear_error(&w, t).await;
    lease_common::holder_is_recorded_read_by_anyone_and_released_with_the_lease(&w, t).await;
    lease_common::holder_record_expires_with_the_lease(&w, t).await;
    lease_common::list_shows_the_held_leases_under_a_prefix(&w, t).await;
    lease_common::a_waiter_that_gets_the_lease_records_itself(&w, t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_keep_their_contract_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let w = connect(&cluster).await;
    for alg in Algorithm::ALL {
        limit_common::concurrent_requests_never_exceed_the_limit(&w, alg).await;
    }
    limit_common::bad_input_is_a_clear_error(&w).await;
    limit_common::compound_policies_commit_all_or_nothing(&w).await;
    limit_common::peek_takes_nothing(&w).await;
    limit_common::costs_take_several_units(&w).await;
    limit_common::keys_are_independent(&w).await;
    limit_common::sliding_log_records_rejections_only_when_asked(&w).await;
    limit_common::refunds_never_exceed_the_capacity(&w).await;
    limit_common::quota_changes_keep_the_state(&w).await;
    limit_common::reset_forgets_a_key(&w).await;
    limit_common::reservations_book_in_order(&w).await;
    limit_common::concurrent_reservers_proceed_in_order(&w, Algorithm::Gcra).await;
}

/// Every awkward key works as a lease with increasing fences, as a limiter
/// key (all algorithms in one compound limiter: one script over keys of one
/// slot) and as a fenced resource; and the keys are spread over all three
/// masters, so the script really ran on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_braces_keep_a_lease_with_its_fence_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let w = connect(&cluster).await;
    let store = RedisStore::connect(&cluster.url(), RedisOptions::default())
        .await
        .unwrap();
    let fenced = RedisFencedStore::connect(&cluster.url()).await.unwrap();
    let mut limiter = w.limiter(Quota::per_second(nz(5)), Algorithm::Gcra);
    for alg in Algorithm::ALL.into_iter().skip(1) {
        limiter = limiter.and(Quota::per_minute(nz(50)), alg);
    }
    let mut masters = HashSet::new();
    let keys: Vec<String> = AWKWARD_KEYS
        .iter()
        .map(|k| k.to_string())
        .chain((0..12).map(|i| format!("spread:{i}")))
        .collect();
    for key in &keys {
        let lease = w
            .lease(key.as_str())
            .watchdog(false)
            .ttl(Duration::from_secs(10));
        let first = lease.attempt().await.unwrap().into_guard().unwrap();
        assert!(matches!(
            lease.attempt().await.unwrap(),
            Attempt::Held { .. }
        ));
        let fence = first.fence();
        first.release().await.unwrap();
        let second = lease.attempt().await.unwrap().into_guard().unwrap();
        assert!(second.fence() > fence, "{key:?}");
        assert_eq!(w.status(key).await.unwrap().fence, Some(second.fence()));
        let lease_key = store.lease_key(key);
        let slot = cluster.query(&["CLUSTER", "KEYSLOT", &lease_key]);
        for other in [
            format!("{lease_key}:fence"),
            format!("{lease_key}:released"),
        ] {
            assert_eq!(
                cluster.query(&["CLUSTER", "KEYSLOT", &other]),
                slot,
                "{key:?}: {lease_key} and {other} are in different slots"
            );
        }
        masters.insert(cluster.master_of(&lease_key));

        assert!(limiter.check(key).await.unwrap().allowed, "{key:?}");
        assert_eq!(
            fenced.write(key, second.fence(), "v").await.unwrap(),
            FencedWrite::Applied
        );
        assert!(matches!(
            fenced.write(key, fence, "stale").await.unwrap(),
            FencedWrite::Rejected { .. }
        ));
        second.release().await.unwrap();
    }
    assert_eq!(masters.len(), 3, "the keys used only masters {masters:?}");
}

/// A release on any master wakes a waiter at once (pub/sub through the
/// cluster), long before the holder's TTL would have let it in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_its_waiter_on_every_master() {
    let cluster = RedisCluster::start(3);
    let holder = connect(&cluster).await;
    let waiter = connect(&cluster).await;
    let store = RedisStore::connect(&cluster.url(), RedisOptions::default())
        .await
        .unwrap();
    let mut seen = HashSet::new();
    for i in 0.. {
        let key = format!("wake:{i}");
        let master = cluster.master_of(&store.lease_key(&key));
        if !seen.insert(master) {
            continue;
        }
        let lease = holder
            .lease(key.as_str())
            .watchdog(false)
            .ttl(Duration::from_secs(30));
        let guard = lease.attempt().await.unwrap().into_guard().unwrap();
        let waiting = tokio::spawn({
            let lease = waiter
                .lease(key.as_str())
                .watchdog(false)
                .ttl(Duration::from_secs(30));
            async move {
                let start = tokio::time::Instant::now();
                let got = lease.attempt_within(Duration::from_secs(20)).await.unwrap();
                (got.into_guard().is_some(), start.elapsed())
            }
        });
        // Let the waiter subscribe and find the key held.
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().await.unwrap();
        let (acquired, waited) = waiting.await.unwrap();
        assert!(acquired, "{key}");
        // The fallback retry would come at the holder's TTL (30 s).
        assert!(waited < Duration::from_secs(5), "{key}: waited {waited:?}");
        if seen.len() == 3 {
            break;
        }
    }
    // Every connection to the nodes, the subscriber's included, sends at
    // once (`TCP_NODELAY`).
    let connections: Vec<_> = (cluster.nodes().iter())
        .flat_map(|node| tenure_test::tcp_connections_to(node.port()))
        .collect();
    assert!(connections.len() >= 3, "{connections:?}");
    assert!(connections.iter().all(|c| c.nodelay), "{connections:?}");
}

/// The recipes on a cluster: a semaphore keeps at most N with increasing
/// fences (its permits and their fence counter share the lease's slot), an
/// election's leader and term are read back, and a run-once result is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_elections_and_run_once_work_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let w = connect(&cluster).await;
    for key in ["sem", "}sem"] {
        let sem = w.semaphore(key, nz(2)).unwrap();
        let lease = sem.lease().watchdog(false).ttl(Duration::from_secs(10));
        let a = lease.attempt().await.unwrap().into_guard().unwrap();
        let b = lease.attempt().await.unwrap().into_guard().unwrap();
        assert!(matches!(
            lease.attempt().await.unwrap(),
            Attempt::Held { .. }
        ));
        assert!(b.fence() > a.fence());
        assert_eq!(sem.held().await.unwrap(), 2);
        a.release().await.unwrap();
        let c = lease.attempt().await.unwrap().into_guard().unwrap();
        assert!(c.fence() > b.fence());
    }
    let election = w.election("scheduler").ttl(Duration::from_secs(10));
    let leadership = election.campaign("node-a").await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.id.as_deref(), Some("node-a"));
    assert_eq!(leader.term, leadership.term());
    let once = w.once("report:2026-12-01");
    let first = once.run(|_| async { Ok::<u32, String>(7) }).await.unwrap();
    assert!(matches!(first, OnceOutcome::Ran { result: Ok(7), .. }));
    let second = once.run(|_| async { Ok::<u32, String>(8) }).await.unwrap();
    assert!(matches!(
        second,
        OnceOutcome::Recorded { result: Ok(7), .. }
    ));
}

/// An evicting `maxmemory-policy` on any master (here the last one) is
/// refused at connect, naming the node; `allow_eviction(true)` connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_policy_on_any_master_is_refused() {
    let cluster = RedisCluster::start(3);
    let node = cluster.node(2);
    node.command("CONFIG SET maxmemory-policy allkeys-lru")
        .unwrap();
    let err = RedisStore::connect(&cluster.url(), RedisOptions::default())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("allkeys-lru"), "{msg}");
    assert!(msg.contains(&node.port().to_string()), "{msg}");
    RedisStore::connect(&cluster.url(), RedisOptions::default().allow_eviction(true))
        .await
        .unwrap();
}

fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).unwrap()
}

/// The limiter's function library is loaded on every master (the first
/// check finds it missing), and loaded again after every node lost it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_functions_are_loaded_on_every_master() {
    let cluster = RedisCluster::start(3);
    let w = connect(&cluster).await;
    let l = w.limiter(Quota::per_minute(limit_common::nz(3)), Algorithm::Gcra);
    // A key on each master (node index → key).
    let mut keys: std::collections::BTreeMap<usize, String> = Default::default();
    for i in 0.. {
        let key = format!("slot:{i}");
        let storage = l.policies().expect("policies")[0].storage_key("tenure:", &key);
        keys.entry(cluster.master_of(&storage)).or_insert(key);
        if keys.len() == 3 {
            break;
        }
    }
    for round in 0..2 {
        for key in keys.values() {
            let d = l.check(key).await.expect("check");
            assert_eq!(d.remaining, 2 - round, "{key}, round {round}");
        }
        for &i in keys.keys() {
            let node = cluster.node(i);
            let list = node.command("FUNCTION LIST").expect("list");
            assert!(list.contains("tenure_limit_"), "node {i}: {list}");
            node.command("FUNCTION FLUSH").expect("flush");
        }
    }
}
