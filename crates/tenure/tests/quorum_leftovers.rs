//! A quorum under concurrent acquire/release on a multi-threaded runtime must
//! leave no lease key behind on any node: a release reaches every node that may
//! hold its vote, including votes still in flight when the lease was won.
//!
//! The races this guards against (a vote held up on a connection being
//! established and run after the release made behind it; its answer then
//! timing out) depend on scheduling and cannot be forced against a real
//! server; `quorum/tests.rs` sets each of them up exactly with in-process
//! nodes. This test is the end-to-end check on real servers.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tenure::Coordinator;
use tenure::quorum::{QuorumOptions, QuorumStore};
use tenure_test::RedisServer;

/// Long enough that no key expires during the test and its wait.
const TTL: Duration = Duration::from_secs(60);

/// Every lease key (`tenure:{…}`, not the fence counters) on one node.
async fn lease_keys(node: &RedisServer) -> Vec<String> {
    let client = redis::Client::open(node.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let mut cursor = 0u64;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("tenure:{*}")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .unwrap();
        found.extend(keys);
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cycles_leave_no_lease_key_on_any_node() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let backend =
        QuorumStore::new(nodes.iter().map(RedisServer::url), QuorumOptions::default()).unwrap();
    let tenure = Arc::new(Coordinator::with_backend(backend));
    // At least 2 s and 50 cycles per task (a loaded machine may need longer
    // to get going), at most 30 s.
    let started = tokio::time::Instant::now();
    let (min_end, max_end) = (
        started + Duration::from_secs(2),
        started + Duration::from_secs(30),
    );
    let mut tasks = Vec::new();
    for t in 0..16 {
        let tenure = Arc::clone(&tenure);
        tasks.push(tokio::spawn(async move {
            // One key per task, as in the throughput benchmark.
            let lease = tenure
                .lease(format!("leftover-{t}"))
                .watchdog(false)
                .ttl(TTL);
            let (mut cycles, mut errors) = (0u32, 0u32);
            loop {
                let now = tokio::time::Instant::now();
                if now >= max_end || (now >= min_end && cycles >= 50) {
                    break;
                }
                // On a loaded machine a node can miss its 100 ms timeout and a
                // majority be unavailable now and then: that is counted, not
                // fatal — the keys such an attempt may leave are what this
                // test looks for.
                match lease.attempt().await {
                    Ok(reply) => {
                        if let Some(guard) = reply.into_guard() {
                            match guard.release().await {
                                Ok(_) => cycles += 1,
                                Err(_) => errors += 1,
                            }
                        }
                    }
                    Err(_) => errors += 1,
                }
            }
            (cycles, errors)
        }));
    }
    let (mut cycles, mut errors) = (0, 0);
    for t in tasks {
        let (c, e) = t.await.unwrap();
        cycles += c;
        errors += e;
    }
    assert!(cycles > 0, "no cycle completed ({errors} errors)");
    // Every release and undo has returned; the background follow-ups end
    // within the nodes' 2 s request budget plus a few retries, so 15 s is
    // ample even on a loaded machine, and far from the 60 s TTL: a key still
    // there then is a leftover, not a follow-up in progress.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let mut left = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            for k in lease_keys(node).await {
                left.push(format!("node {i}: {k}"));
            }
        }
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{cycles} cycles ({errors} errors) left lease keys behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
