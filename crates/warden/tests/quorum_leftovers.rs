//! A quorum under concurrent acquire/release on a multi-threaded runtime must
//! leave no lease key behind on any node: a release reaches every node that may
//! hold its vote, including votes still in flight when the lease was won.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use warden::Warden;
use warden::quorum::{QuorumOptions, QuorumStore};
use warden_test::RedisServer;

/// Every lease key (`warden:{…}`, not the fence counters) on one node.
async fn lease_keys(node: &RedisServer) -> Vec<String> {
    let client = redis::Client::open(node.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let mut cursor = 0u64;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("warden:{*}")
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
#[ignore = "open defect (issue 13): failed once in ~12 runs under heavy load, cause not found; run with --run-ignored"]
async fn concurrent_cycles_leave_no_lease_key_on_any_node() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let backend =
        QuorumStore::new(nodes.iter().map(RedisServer::url), QuorumOptions::default()).unwrap();
    let warden = Arc::new(Warden::with_backend(backend));
    let stop_at = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let warden = Arc::clone(&warden);
        tasks.push(tokio::spawn(async move {
            // One key per task, as in the throughput benchmark.
            let lease = warden
                .lease(format!("leftover-{t}"))
                .ttl(Duration::from_secs(10));
            let mut cycles = 0u32;
            while tokio::time::Instant::now() < stop_at {
                if let Some(guard) = lease.try_acquire().await.unwrap().into_guard() {
                    guard.release().await.unwrap();
                    cycles += 1;
                }
            }
            cycles
        }));
    }
    let mut cycles = 0;
    for t in tasks {
        cycles += t.await.unwrap();
    }
    assert!(cycles > 0, "no cycle completed");
    // Every release and undo has returned; background follow-ups are bounded
    // by the node timeout, so give them that long (the TTL is 10 s: a key
    // still there then is a leftover, not a follow-up in progress).
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
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
            "{cycles} cycles left lease keys behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
