//! A frozen (SIGSTOPped) node must neither kill a holder nor stall waiters.
//! Real redis-server processes, real SIGSTOP/SIGCONT.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use tenure::lease::store::LeaseStore;
use tenure::quorum::{QuorumOptions, QuorumStore};
use tenure::{Attempt, Coordinator};
use tenure_test::RedisServer;
use tokio::sync::Mutex;
use tokio::time::Instant;

use common::{redis_get, start_nodes};

fn backend(nodes: &[RedisServer], node_timeout: Duration) -> QuorumStore {
    QuorumStore::new(
        nodes.iter().map(RedisServer::url),
        QuorumOptions::default().node_timeout(node_timeout),
    )
    .unwrap()
}

/// Item 9a. The holder won on exactly two of three nodes (the third was frozen
/// during the acquire); then one of its two nodes freezes. Renewal must take the
/// free third node, so the lease keeps a majority and is never reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_exactly_a_majority_survives_one_of_its_nodes_freezing() {
    let nodes = start_nodes(3);
    let tenure = Coordinator::with_backend(backend(&nodes, Duration::from_millis(100)));
    let ttl = Duration::from_millis(900);
    let lease = tenure.lease("exact-majority").ttl(ttl).watchdog(true);
    // Connect to every node first (on another key: a vote that went out while a
    // connection was being established may still be undone in the background).
    tenure
        .lease("exact-majority-warm-up")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap()
        .release()
        .await
        .unwrap();

    // Node 2 is held by a stale holder for a moment, so the lease is won on
    // exactly nodes 0 and 1; node 1 freezes while node 2 is still taken, and
    // node 2 only becomes free afterwards.
    let key = "tenure:{exact-majority}";
    let client = redis::Client::open(nodes[2].url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("SET")
        .arg(key)
        .arg("someone-else")
        .arg("PX")
        .arg(400)
        .query_async::<()>(&mut c)
        .await
        .unwrap();
    let guard = lease
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .expect("two of three nodes grant");
    nodes[1].pause();
    let token = redis_get(&nodes[0].url(), key).await.unwrap();
    assert_eq!(
        redis_get(&nodes[2].url(), key).await.as_deref(),
        Some("someone-else"),
        "the lease must rest on exactly nodes 0 and 1"
    );

    let hold = ttl * 5;
    let until = Instant::now() + hold;
    while Instant::now() < until {
        assert!(
            !guard.is_lost(),
            "the holder lost its lease {:?} after node 1 froze",
            hold - (until - Instant::now())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The renewal took node 2 with our token, and raised its fence counter to
    // the guard's fence, so the next grant there is above it.
    assert_eq!(redis_get(&nodes[2].url(), key).await, Some(token));
    let counter: u64 = redis_get(&nodes[2].url(), "tenure:{exact-majority}:fence")
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        counter >= guard.fence().get(),
        "counter {counter} on node 2"
    );
    nodes[1].resume();
    guard.release().await.unwrap();
}

/// One contention run: `clients` separate clients each run one `job` under the
/// lease. Returns the whole run's time and the longest time the lease sat free
/// between one holder's release and the next holder's grant.
async fn contended(clients: &[Coordinator], key: &str, job: Duration) -> (Duration, Duration) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in clients {
        let lease = w
            .lease(key.to_string())
            .watchdog(false)
            .ttl(Duration::from_secs(10));
        let (spans, barrier) = (Arc::clone(&spans), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let Attempt::Acquired(guard) =
                lease.attempt_within(Duration::from_secs(60)).await.unwrap()
            else {
                panic!("not acquired within 60 s");
            };
            let got = Instant::now();
            tokio::time::sleep(job).await;
            let released = Instant::now();
            guard.release().await.unwrap();
            spans.lock().await.push((got, released));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = start.elapsed();
    let mut spans = spans.lock().await.clone();
    spans.sort();
    let mut longest_free = Duration::ZERO;
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "two holders at once: {pair:?}");
        longest_free = longest_free.max(pair[1].0 - pair[0].1);
    }
    (total, longest_free)
}

/// Item 9b. With one node frozen, contenders doing short jobs finish about as
/// fast as without: a split vote is decided without waiting for the frozen node,
/// and the lease never sits free for long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_node_frozen_contenders_hand_over_about_as_fast_as_without() {
    let nodes = start_nodes(3);
    // A long node timeout: every wait for the frozen node would show.
    let node_timeout = Duration::from_secs(1);
    let backends: Vec<QuorumStore> = (0..12).map(|_| backend(&nodes, node_timeout)).collect();
    let clients: Vec<Coordinator> = backends
        .iter()
        .cloned()
        .map(Coordinator::with_backend)
        .collect();
    let job = Duration::from_millis(30);

    let (healthy, healthy_free) = contended(&clients, "handover-healthy", job).await;

    nodes[2].pause();
    // Every client notices the frozen node once (a status waits for every node).
    for b in &backends {
        b.status("handover-warm-up").await.unwrap();
    }
    let (frozen, frozen_free) = contended(&clients, "handover-frozen", job).await;
    nodes[2].resume();

    eprintln!(
        "healthy: {healthy:?} (lease free at most {healthy_free:?}); \
         one node frozen: {frozen:?} (lease free at most {frozen_free:?})"
    );
    assert!(
        frozen < healthy * 2 + Duration::from_millis(300),
        "one frozen node: {frozen:?}, healthy: {healthy:?}"
    );
    assert!(
        frozen_free < node_timeout / 2,
        "the lease sat free for {frozen_free:?} between two holders"
    );
}
