//! Release notifications on a Redis Cluster (3 masters, 1 replica each) are
//! sharded on Redis 7: a hand-off publishes with `SPUBLISH` on the lease's
//! master, which the cluster bus carries to that master's replica only —
//! not to every node, as a plain `PUBLISH` is. The same contended run with a
//! store that publishes plainly (`RedisStore::lazy`) is the baseline: the
//! bus messages, the bytes sent over the cluster bus (the kernel's TCP
//! counters of the bus links, read with `ss`, less an idle run of the same
//! length) and the bytes the nodes send to clients, per turn, are printed
//! (`--no-capture`).

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use tenure::Coordinator;
use tenure::redis::{RedisOptions, RedisStore};
use tenure_test::RedisCluster;
use tokio::time::Instant;

const TASKS: usize = 4;
const TURNS: usize = 100;

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

/// The cluster bus ports of every node (`CLUSTER NODES`: `ip:port@cport`).
fn bus_ports(cluster: &RedisCluster) -> HashSet<u16> {
    cluster
        .query(&["CLUSTER", "NODES"])
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .nth(1)?
                .split_once('@')?
                .1
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The port of an `ss` address (`127.0.0.1:6379`).
fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit_once(':')?.1.parse().ok()
}

/// Bytes sent so far over the links between `ports` (the kernel's
/// `bytes_sent` of each TCP socket with a bus port at either end, from
/// `ss -tinH`); `None` where `ss` cannot be run.
fn bus_bytes(ports: &HashSet<u16>) -> Option<u64> {
    let out = Command::new("ss").arg("-tinH").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut total = 0;
    let mut on_bus = false;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            on_bus = cols
                .iter()
                .rev()
                .take(2)
                .filter_map(|c| port_of(c))
                .any(|p| ports.contains(&p));
        } else if on_bus {
            total += line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("bytes_sent:")?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(total)
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
/// whole cluster, the time they took and the bus bytes sent meanwhile less
/// those of an idle wait as long (the nodes' own gossip).
async fn measure(
    cluster: &RedisCluster,
    tenure: &Coordinator,
    key: &str,
) -> (Traffic, Duration, Option<i64>) {
    let nodes = cluster.nodes().len();
    let ports = bus_ports(cluster);
    let before = Traffic::read(cluster, 0..nodes);
    let bus_before = bus_bytes(&ports);
    let took = contend(tenure, key).await;
    let bus_after = bus_bytes(&ports);
    let traffic = Traffic::read(cluster, 0..nodes).since(before);
    tokio::time::sleep(took).await;
    let bus_idle = bus_bytes(&ports);
    let bus = match (bus_before, bus_after, bus_idle) {
        (Some(b), Some(a), Some(i)) => {
            let (b, a, i) = (b as i64, a as i64, i as i64);
            Some((a - b) - (i - a))
        }
        _ => None,
    };
    (traffic, took, bus)
}

fn report(name: &str, t: Traffic, took: Duration, bus: Option<i64>) {
    let turns = (TASKS * TURNS) as f64;
    let hand_offs = (t.publish + t.spublish).max(1) as f64;
    let bus = bus.map_or("n/a".to_string(), |b| {
        format!("{:.0}", b as f64 / hand_offs)
    });
    println!(
        "{name}: {turns} turns, {hand_offs} published hand-offs in {took:?}; per hand-off: {:.2} bus messages for PUBLISH, {:.2} for SPUBLISH, {bus} bus bytes (less idle gossip), {:.0} bytes sent to clients by all nodes",
        t.bus_publish as f64 / hand_offs,
        t.bus_publishshard as f64 / hand_offs,
        t.client_bytes as f64 / hand_offs,
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

    let (before, plain_took, plain_bus) = measure(&cluster, &plain, "turns:plain").await;
    report("plain PUBLISH", before, plain_took, plain_bus);
    let (after, took, bus) = measure(&cluster, &sharded, "turns").await;
    report("sharded SPUBLISH", after, took, bus);

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
