//! Quorum leases against real redis-server processes, with real faults: killed and
//! SIGSTOPped nodes, split votes, restarts with and without persistence.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use warden::quorum::{NodeOutcome, QuorumBackend, QuorumOptions};
use warden::{Error, TryAcquire, Warden};
use warden_test::RedisServer;

fn start(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

fn quorum(nodes: &[RedisServer], node_timeout: Duration) -> Warden {
    let backend = QuorumBackend::new(
        urls(nodes),
        QuorumOptions::default().node_timeout(node_timeout),
    )
    .unwrap();
    Warden::with_backend(backend)
}

/// The value of the lease key on one node (`None` when absent).
async fn owner_on(url: &str, key: &str) -> Option<String> {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("GET")
        .arg(format!("warden:{{{key}}}"))
        .query_async(&mut c)
        .await
        .unwrap()
}

async fn owners(nodes: &[RedisServer], key: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for n in nodes {
        out.push(owner_on(&n.url(), key).await);
    }
    out
}

/// Polls the lease key on every node until `ok` holds (votes of nodes that had
/// not answered when an attempt was decided are undone in the background), or
/// gives up after 3 s — far below the 30 s TTL the tests use, so a key left
/// behind is caught.
async fn settle(
    nodes: &[RedisServer],
    key: &str,
    ok: impl Fn(&[Option<String>]) -> bool,
) -> Vec<Option<String>> {
    let give_up = Instant::now() + Duration::from_secs(3);
    loop {
        let seen = owners(nodes, key).await;
        if ok(&seen) || Instant::now() > give_up {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_two_down_still_grant_leases_with_increasing_fences() {
    let mut nodes = start(5);
    nodes[1].kill();
    nodes[3].pause();
    let warden = quorum(&nodes, Duration::from_millis(300));
    let lease = warden.lease("two-down").ttl(Duration::from_secs(10));
    let mut last = None;
    for _ in 0..3 {
        let guard = lease
            .try_acquire()
            .await
            .unwrap()
            .into_guard()
            .expect("three of five nodes are a majority");
        assert!(last.is_none_or(|l| guard.fence() > l));
        last = Some(guard.fence());
        assert!(matches!(
            guard.extend().await.unwrap(),
            warden::ExtendOutcome::Extended { .. }
        ));
        guard.release().await.unwrap();
    }
    nodes[3].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_three_down_never_grant_and_name_every_node() {
    let mut nodes = start(5);
    nodes[0].kill();
    nodes[2].kill();
    nodes[4].pause();
    let node_timeout = Duration::from_millis(300);
    let warden = quorum(&nodes, node_timeout);
    let lease = warden.lease("three-down").ttl(Duration::from_secs(10));
    let give_up = Instant::now() + Duration::from_secs(2);
    let mut attempts = 0;
    while Instant::now() < give_up {
        let start = Instant::now();
        let err = match lease.acquire_within(Duration::from_millis(500)).await {
            Ok(TryAcquire::Acquired(_)) => panic!("a lease was granted by a minority"),
            Ok(TryAcquire::Held { .. }) => panic!("a minority must not look like contention"),
            Err(e) => e,
        };
        let took = start.elapsed();
        assert!(took < Duration::from_millis(500), "took {took:?}");
        attempts += 1;
        let Error::QuorumUnavailable {
            needed, ref votes, ..
        } = err
        else {
            panic!("expected a quorum error, got {err}");
        };
        assert_eq!(needed, 3);
        assert_eq!(votes.len(), 5);
        let msg = err.to_string();
        for n in &nodes {
            assert!(msg.contains(&n.url()), "{msg} names {}", n.url());
        }
        assert!(
            matches!(votes[0].outcome, NodeOutcome::Unreachable { .. }),
            "{msg}"
        );
        assert!(
            matches!(votes[4].outcome, NodeOutcome::TimedOut { .. }),
            "{msg}"
        );
        assert_eq!(votes[1].outcome, NodeOutcome::Granted, "{msg}");
        // The minority's votes were undone.
        assert_eq!(owner_on(&nodes[1].url(), "three-down").await, None);
        assert_eq!(owner_on(&nodes[3].url(), "three-down").await, None);
    }
    assert!(attempts >= 2);
    nodes[4].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_does_not_slow_down_acquire_extend_or_release() {
    let nodes = start(3);
    // A node timeout far above what a healthy majority needs: waiting for the
    // frozen node even once would show.
    let node_timeout = Duration::from_secs(2);
    let warden = quorum(&nodes, node_timeout);
    let lease = warden.lease("frozen").ttl(Duration::from_secs(20));
    // Connect to every node first, then freeze one.
    let warm_up = lease.try_acquire().await.unwrap().into_guard().unwrap();
    warm_up.release().await.unwrap();
    nodes[2].pause();
    for _ in 0..3 {
        let start = Instant::now();
        let guard = lease.try_acquire().await.unwrap().into_guard().unwrap();
        guard.extend().await.unwrap();
        guard.release().await.unwrap();
        let took = start.elapsed();
        assert!(took < node_timeout, "acquire+extend+release took {took:?}");
    }
    nodes[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_vote_ten_clients_at_most_one_holder_and_no_keys_left() {
    let nodes = start(3);
    let clients: Vec<Warden> = (0..10)
        .map(|_| quorum(&nodes, Duration::from_millis(500)))
        .collect();
    let mut rounds_without_winner = 0;
    for round in 0..15 {
        let key = format!("split-{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let mut tasks = Vec::new();
        for w in &clients {
            let lease = w.lease(key.clone()).ttl(Duration::from_secs(30));
            let barrier = Arc::clone(&barrier);
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                lease.try_acquire().await.unwrap().into_guard()
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            winners.extend(t.await.unwrap());
        }
        assert!(
            winners.len() <= 1,
            "round {round}: {} holders",
            winners.len()
        );
        let one_owner = |seen: &[Option<String>]| {
            let present: Vec<&String> = seen.iter().flatten().collect();
            present.iter().all(|o| *o == present[0])
        };
        match winners.pop() {
            None => {
                rounds_without_winner += 1;
                let seen = settle(&nodes, &key, |s| s.iter().all(Option::is_none)).await;
                assert!(
                    seen.iter().all(Option::is_none),
                    "round {round}: losers left {seen:?}"
                );
            }
            Some(guard) => {
                let seen = settle(&nodes, &key, one_owner).await;
                assert!(
                    one_owner(&seen),
                    "round {round}: keys of several owners {seen:?}"
                );
                assert!(
                    seen.iter().flatten().count() >= 2,
                    "round {round}: {seen:?}"
                );
                guard.release().await.unwrap();
                let seen = settle(&nodes, &key, |s| s.iter().all(Option::is_none)).await;
                assert!(seen.iter().all(Option::is_none), "round {round}: {seen:?}");
            }
        }
    }
    println!("rounds without a winner (split votes): {rounds_without_winner} of 15");
}
