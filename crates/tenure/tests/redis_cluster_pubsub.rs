//! Release notifications on a Redis Cluster (3 masters, 1 replica each) are
//! sharded on Redis 7: a hand-off publishes with `SPUBLISH` on the lease's
//! master, which the cluster bus carries to that master's replica only —
//! not to every node, as a plain `PUBLISH` is. The same contended run with a
//! store that publishes plainly (`RedisStore::lazy`) is the baseline: the
//! bus messages and the bytes the nodes send per hand-off are printed
//! (`--no-capture`).

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use tenure::Coordinator;
use tenure::redis::{RedisOptions, RedisStore};
use tenure_test::RedisCluster;
use tokio::time::Instant;

const TASKS: usize = 4;
const TURNS: usize = 50;

/// One field of an `INFO`-style reply (`name:value` lines).
fn field(reply: &str, name: &str) -> u64 {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The calls of `command` in `INFO commandstats`.
fn calls(reply: &str, command: &str) -> u64 {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// What every node of the cluster has counted so far.
#[derive(Debug, Clone, Copy, Default)]
struct Traffic {
    /// Bus messages sent for plain `PUBLISH`.
    bus_publish: u64,
    /// Bus messages sent for `SPUBLISH`.
    bus_publishshard: u64,
    /// Bytes sent to clients (`total_net_output_bytes`).
    client_bytes: u64,
    spublish: u64,
    publish: u64,
}

impl Traffic {
    /// Counters of the nodes `of` (indices into the cluster's nodes).
    fn read(cluster: &RedisCluster, of: impl Iterator<Item = usize>) -> Traffic {
        let mut t = Traffic::default();
        for i in of {
            let node = cluster.node(i);
            let bus = node.command("CLUSTER INFO").unwrap();
            let stats = node.command("INFO stats").unwrap();
            let commands = node.command("INFO commandstats").unwrap();
            t.bus_publish += field(&bus, "cluster_stats_messages_publish_sent");
            t.bus_publishshard += field(&bus, "cluster_stats_messages_publishshard_sent");
            t.client_bytes += field(&stats, "total_net_output_bytes");
            t.spublish += calls(&commands, "spublish");
            t.publish += calls(&commands, "publish");
        }
        t
    }

    fn since(self, before: Traffic) -> Traffic {
        Traffic {
            bus_publish: self.bus_publish - before.bus_publish,
            bus_publishshard: self.bus_publishshard - before.bus_publishshard,
            client_bytes: self.client_bytes - before.client_bytes,
            spublish: self.spublish - before.spublish,
            publish: self.publish - before.publish,
        }
    }
}

/// `TASKS` tasks take `TURNS` turns each on `key`; returns how long it took.
async fn contend(tenure: &Coordinator, key: &str) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let lease = tenure
                .lease(key)
                .watchdog(false)
                .ttl(Duration::from_secs(30));
            tokio::spawn(async move {
                for _ in 0..TURNS {
                    let guard = lease
                        .attempt_within(Duration::from_secs(30))
                        .await
                        .unwrap()
                        .into_guard()
                        .expect("acquired");
                    guard.release().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed()
}

/// Runs the contended turns through `tenure` and returns the traffic of the
/// whole cluster and the time they took.
async fn measure(cluster: &RedisCluster, tenure: &Coordinator, key: &str) -> (Traffic, Duration) {
    let nodes = cluster.nodes().len();
    let before = Traffic::read(cluster, 0..nodes);
    let took = contend(tenure, key).await;
    (Traffic::read(cluster, 0..nodes).since(before), took)
}

fn report(name: &str, t: Traffic, took: Duration) {
    let turns = (TASKS * TURNS) as f64;
    println!(
        "{name}: {turns} turns in {took:?}; per turn: {:.2} bus messages for PUBLISH, {:.2} for SPUBLISH, {:.0} bytes sent to clients by all nodes; PUBLISH calls {}, SPUBLISH calls {}",
        t.bus_publish as f64 / turns,
        t.bus_publishshard as f64 / turns,
        t.client_bytes as f64 / turns,
        t.publish,
        t.spublish,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_on_a_cluster_are_published_to_the_leases_shard_only() {
    let cluster = RedisCluster::start(3);
    let sharded = Coordinator::connect(&cluster.url()).await.unwrap();
    let plain = Coordinator::with_backend(
        RedisStore::lazy(&cluster.url(), RedisOptions::default()).unwrap(),
    );
    // Warm up both (connections, scripts, subscriptions).
    contend(&sharded, "warm:sharded").await;
    contend(&plain, "warm:plain").await;

    let (before, plain_took) = measure(&cluster, &plain, "turns:plain").await;
    report("plain PUBLISH", before, plain_took);
    let (after, took) = measure(&cluster, &sharded, "turns").await;
    report("sharded SPUBLISH", after, took);

    let turns = (TASKS * TURNS) as u64;
    // Every hand-off was published sharded, none plainly.
    assert_eq!(after.publish, 0, "{after:?}");
    assert!(after.spublish >= turns / 2, "{after:?}");
    assert_eq!(after.bus_publish, 0, "{after:?}");
    // A sharded message goes to the master's one replica: one bus message,
    // where a plain one goes to each of the five other nodes.
    assert!(
        after.bus_publishshard <= after.spublish,
        "sharded messages went beyond the lease's shard: {after:?}"
    );
    assert!(
        before.bus_publish >= 4 * before.publish,
        "a plain PUBLISH reaches every node: {before:?}"
    );
    // Woken by the notifications, not by the waiters' 250 ms heartbeat:
    // 200 turns of that would take tens of seconds.
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A waiter connected through another node than the lease's master is
/// woken by the sharded message all the same: the subscriber's sharded
/// subscription is on the channel's master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_hand_off_wakes_a_waiter_long_before_its_heartbeat() {
    let cluster = RedisCluster::start(3);
    let holder = Coordinator::connect(&cluster.url()).await.unwrap();
    let waiter = Coordinator::connect(&cluster.url()).await.unwrap();
    let lease = |c: &Coordinator| {
        c.lease("woken")
            .watchdog(false)
            .ttl(Duration::from_secs(30))
    };
    let mut waits = Vec::new();
    for _ in 0..20 {
        let held = lease(&holder).try_acquire().await.unwrap().unwrap();
        let waiting = tokio::spawn({
            let lease = lease(&waiter);
            async move { lease.attempt_within(Duration::from_secs(20)).await }
        });
        // The waiter stands in line (and looks again every 250 ms).
        tokio::time::sleep(Duration::from_millis(120)).await;
        let released = Instant::now();
        held.release().await.unwrap();
        let got = waiting
            .await
            .unwrap()
            .unwrap()
            .into_guard()
            .expect("handed over");
        waits.push(released.elapsed());
        got.release().await.unwrap();
    }
    waits.sort();
    let median = waits[waits.len() / 2];
    println!("release -> waiter's guard, median of 20: {median:?}");
    assert!(
        median < Duration::from_millis(60),
        "waiters were woken by their heartbeat, not the hand-off message: median {median:?}"
    );
}
