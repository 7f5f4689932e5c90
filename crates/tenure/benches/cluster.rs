//! One Redis master against a 3-master Redis Cluster (1 replica each), in the
//! same run on the same machine: GCRA decisions per second and lease cycles
//! (acquire + release) per second from 16 tasks on random keys, each against
//! the `PING` rate of the same set-up; the server time per script call
//! (`INFO commandstats`, summed over the masters), and the memory of one lease
//! (lease key + fence counter) and one limiter key per algorithm
//! (`MEMORY USAGE … SAMPLES 0`). Numbers are printed, never asserted; they
//! are the input of `docs/SCALING.md`. Run with
//! `cargo bench -p tenure --bench cluster`.
//!
//! On a 2-core machine six cluster nodes and the client share two cores, so
//! the cluster cannot show its scaling here: what the run shows is the cost
//! of the cluster client and that the per-call server cost is the same.

#![allow(clippy::unwrap_used, missing_docs)]

#[path = "common/rate.rs"]
mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use redis::aio::ConnectionLike;
use tenure::Coordinator;
use tenure::limit::{Algorithm, Quota};
use tenure_test::{RedisCluster, RedisServer};

const TASKS: usize = 16;
const RUN_FOR: Duration = Duration::from_secs(3);
const KEYS: u32 = 10_000;

/// Runs `op` from `TASKS` tasks for `RUN_FOR`; returns operations per second.
async fn rate<F, Fut>(op: F) -> f64
where
    F: Fn(u32) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    common::rate(TASKS, RUN_FOR, KEYS, op).await
}

/// The masters of a set-up, for `INFO commandstats` and `CONFIG RESETSTAT`.
fn reset(masters: &[&RedisServer]) {
    for m in masters {
        m.command("CONFIG RESETSTAT").unwrap();
    }
}

/// Calls and total µs of script calls over `masters` since the last reset:
/// `EVALSHA` (leases) and `FCALL` (limiters, from tenure's function library).
fn script_stats(masters: &[&RedisServer]) -> (u64, u64) {
    let mut calls = 0;
    let mut usec = 0;
    for m in masters {
        let stats = m.command("INFO commandstats").unwrap();
        let scripts = stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_fcall:"));
        for field in scripts.flat_map(|line| line.split([':', ','])) {
            if let Some(v) = field.strip_prefix("calls=") {
                calls += v.parse::<u64>().unwrap_or(0);
            }
            if let Some(v) = field.strip_prefix("usec=") {
                usec += v.parse::<u64>().unwrap_or(0);
            }
        }
    }
    (calls, usec)
}

struct Row {
    pings: f64,
    decisions: f64,
    decision_us: f64,
    cycles: f64,
    cycle_us: f64,
}

async fn measure<C>(tenure: &Coordinator, ping_conn: C, masters: &[&RedisServer]) -> Row
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let pings = rate(move |_| {
        let mut c = ping_conn.clone();
        async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
        }
    })
    .await;
    let limiter = tenure.limiter(
        Quota::per_second(NonZeroU32::new(100).unwrap()),
        Algorithm::Gcra,
    );
    reset(masters);
    let decisions = rate(move |k| {
        let l = limiter.clone();
        async move {
            let _ = l.check(&format!("bench:{k}")).await.unwrap();
        }
    })
    .await;
    let (calls, usec) = script_stats(masters);
    let decision_us = usec as f64 / calls.max(1) as f64;
    reset(masters);
    let w = tenure.clone();
    let cycles = rate(move |k| {
        let lease = w
            .lease(format!("bench:{k}"))
            .watchdog(false)
            .ttl(Duration::from_secs(10));
        async move {
            // Random keys from 16 tasks rarely collide; a collision is a
            // `Held` answer, which costs the same one script call.
            if let Some(guard) = lease.attempt().await.unwrap().into_guard() {
                guard.release().await.unwrap();
            }
        }
    })
    .await;
    let (calls, usec) = script_stats(masters);
    // Two script calls per cycle: acquire and release.
    let cycle_us = 2.0 * usec as f64 / calls.max(1) as f64;
    Row {
        pings,
        decisions,
        decision_us,
        cycles,
        cycle_us,
    }
}

async fn memory_usage(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async::<Option<u64>>(conn)
        .await
        .unwrap()
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start(3);

    let single = Coordinator::connect(&server.url()).await.unwrap();
    let single_ping = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let one = measure(&single, single_ping, &[&server]).await;

    let clustered = Coordinator::connect(&cluster.url()).await.unwrap();
    let seeds: Vec<String> = cluster.nodes()[..3].iter().map(RedisServer::url).collect();
    let cluster_ping = redis::cluster::ClusterClient::new(seeds)
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let masters: Vec<&RedisServer> = cluster.nodes()[..3].iter().collect();
    let three = measure(&clustered, cluster_ping, &masters).await;

    println!("{TASKS} tasks, random keys out of {KEYS}, {RUN_FOR:?} per figure, same run:");
    println!(
        "| set-up | PINGs/s | GCRA decisions/s | ÷ PINGs/s | server µs per decision | lease cycles/s | ÷ PINGs/s | server µs per cycle |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, r) in [("one master", &one), ("cluster, 3 masters", &three)] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.2} | {:.1} | {:.0} | {:.2} | {:.1} |",
            r.pings,
            r.decisions,
            r.decisions / r.pings,
            r.decision_us,
            r.cycles,
            r.cycles / r.pings,
            r.cycle_us
        );
    }
    println!(
        "cluster ÷ one master: decisions {:.2}, lease cycles {:.2}",
        three.decisions / one.decisions,
        three.cycles / one.cycles
    );

    // Memory on the single server: one held lease, and one key per algorithm.
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let user_key = "tenant:0000001";
    let guard = single
        .lease(user_key)
        .watchdog(false)
        .ttl(Duration::from_secs(60))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let lease_key = format!("tenure:{{{user_key}}}");
    let lease = memory_usage(&mut raw, &lease_key).await;
    let fence = memory_usage(&mut raw, &format!("{lease_key}:fence")).await;
    println!(
        "memory of one held lease on `{user_key}`: lease key {lease} B + fence counter {fence} B \
         (the counter stays after release)"
    );
    guard.release().await.unwrap();
    for alg in Algorithm::ALL {
        let l = single.limiter(Quota::per_minute(NonZeroU32::new(100).unwrap()), alg);
        let _ = l.check_n(user_key, 10).await.unwrap();
        let key = l.policies().unwrap()[0].storage_key("tenure:", user_key);
        println!(
            "memory of one {alg} key at 100/min after 10 units: {} B",
            memory_usage(&mut raw, &key).await
        );
    }
}
