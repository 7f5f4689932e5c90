//! What consensus costs: lease cycles per second and contended hand-off on a
//! real etcd (one member, and a 3-member cluster on this host) against one
//! real redis-server.
//!
//! - *cycles/s*: acquire + release of a fresh key, by 1 task and by 8 tasks
//!   on distinct keys;
//! - *hand-off*: 8 tasks take turns on one key with `attempt_within`; prints
//!   hand-offs per second, the median time from a release to the next holder's
//!   grant, and fairness (fewest and most turns of a task: waiting is FIFO
//!   on both stores, so a task that comes back for more stands in line
//!   behind the others).
//!
//! Run with `cargo bench -p tenure --features etcd --bench etcd`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tenure::Coordinator;
use tenure::etcd::{EtcdOptions, EtcdStore};
use tenure::redis::{RedisOptions, RedisStore};
use tenure_test::{EtcdCluster, RedisServer};
use tokio::time::Instant;

const RUN_FOR: Duration = Duration::from_secs(2);
const TASKS: usize = 8;

async fn cycles_per_sec(tenure: &Coordinator, tasks: usize, tag: &str) -> f64 {
    let done = Arc::new(AtomicUsize::new(0));
    let stop_at = Instant::now() + RUN_FOR;
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (tenure, done) = (tenure.clone(), Arc::clone(&done));
        let tag = tag.to_string();
        handles.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < stop_at {
                i += 1;
                let guard = tenure
                    .lease(format!("{tag}-{t}-{i}"))
                    .watchdog(false)
                    .ttl(Duration::from_secs(10))
                    .attempt()
                    .await
                    .unwrap()
                    .into_guard()
                    .unwrap();
                guard.release().await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

struct Handoff {
    per_sec: f64,
    median: Duration,
    fewest: usize,
    most: usize,
}

async fn handoff(tenure: &Coordinator, key: &str) -> Handoff {
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let released_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let turns: Arc<Vec<AtomicUsize>> = Arc::new((0..TASKS).map(|_| AtomicUsize::new(0)).collect());
    let stop_at = Instant::now() + RUN_FOR;
    let start = Instant::now();
    let mut handles = Vec::new();
    for id in 0..TASKS {
        let lease = tenure
            .lease(key)
            .watchdog(false)
            .ttl(Duration::from_secs(5));
        let (last, released_at, latencies, turns) = (
            Arc::clone(&last),
            Arc::clone(&released_at),
            Arc::clone(&latencies),
            Arc::clone(&turns),
        );
        handles.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let Some(guard) = lease
                    .attempt_within(Duration::from_secs(10))
                    .await
                    .unwrap()
                    .into_guard()
                else {
                    continue;
                };
                turns[id].fetch_add(1, Ordering::Relaxed);
                let other_holder = last.swap(id, Ordering::SeqCst) != id;
                let released = released_at.lock().unwrap().take();
                if let Some(at) = released.filter(|_| other_holder) {
                    latencies.lock().unwrap().push(at.elapsed());
                }
                *released_at.lock().unwrap() = Some(Instant::now());
                guard.release().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    let counts: Vec<usize> = turns.iter().map(|t| t.load(Ordering::Relaxed)).collect();
    Handoff {
        per_sec: lat.len() as f64 / start.elapsed().as_secs_f64(),
        median: lat.get(lat.len() / 2).copied().unwrap_or_default(),
        fewest: counts.iter().copied().min().unwrap_or(0),
        most: counts.iter().copied().max().unwrap_or(0),
    }
}

async fn report(name: &str, tenure: &Coordinator) {
    let one = cycles_per_sec(tenure, 1, "c1").await;
    let many = cycles_per_sec(tenure, TASKS, "c8").await;
    let h = handoff(tenure, "handoff").await;
    println!(
        "{name:<22} {one:>9.0} {many:>12.0} {:>12.0} {:>10.2?} {:>5}..{}",
        h.per_sec, h.median, h.fewest, h.most
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "{:<22} {:>9} {:>12} {:>12} {:>10} {:>8}",
        "store", "cycles/s", "cycles/s x8", "handoffs/s", "median", "turns"
    );
    let redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url(), RedisOptions::default())
        .await
        .unwrap();
    report("redis (one server)", &Coordinator::with_backend(store)).await;
    drop(redis);

    for (name, size) in [("etcd (1 member)", 1), ("etcd (3 members)", 3)] {
        let etcd = EtcdCluster::start(size);
        let store = EtcdStore::connect(&etcd.url(), EtcdOptions::default())
            .await
            .unwrap();
        report(name, &Coordinator::with_backend(store)).await;
    }
}
