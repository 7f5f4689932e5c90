//! The embedded SQLite store: what one operation costs, next to the in-process
//! store and one real redis-server, and how fast a contended lease changes hands
//! between two connections (as between two processes).
//!
//! Prints medians and 99th percentiles; asserts nothing. Run with
//! `cargo bench -p tenure --bench sqlite`. The SQLite file lives in a temporary
//! directory: its commit cost is the `fsync` of that file system
//! (`synchronous=FULL`).

#![allow(clippy::unwrap_used, missing_docs)]

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::Coordinator;
use tenure::limit::{Algorithm, Quota};
use tenure_test::RedisServer;
use tokio::time::Instant;

const ROUNDS: usize = 400;

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    format!("median {:>9.1?}  p99 {:>9.1?}", at(0.5), at(0.99))
}

/// Acquire + release of a free lease, one after the other.
async fn lease_round(tenure: &Coordinator) -> String {
    let lease = tenure
        .lease("bench")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let guard = lease.attempt().await.unwrap().into_guard().unwrap();
        guard.release().await.unwrap();
        samples.push(start.elapsed());
    }
    summary(samples)
}

/// One allowed GCRA check.
async fn limit_check(tenure: &Coordinator) -> String {
    let limiter = tenure.limiter(
        Quota::per_second(NonZeroU32::new(1_000_000).unwrap()),
        Algorithm::Gcra,
    );
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        assert!(limiter.check("bench").await.unwrap().allowed);
        samples.push(start.elapsed());
    }
    summary(samples)
}

/// Two handles on one file take turns for two seconds; each holds for 1 ms.
async fn handoffs(a: &Coordinator, b: &Coordinator) -> f64 {
    let stop = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for tenure in [a.clone(), b.clone()] {
        tasks.push(tokio::spawn(async move {
            let lease = tenure
                .lease("turns")
                .watchdog(false)
                .ttl(Duration::from_secs(10));
            let mut turns = 0u32;
            while Instant::now() < stop {
                let got = lease.attempt_within(Duration::from_secs(5)).await.unwrap();
                if let Some(guard) = got.into_guard() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.release().await.unwrap();
                    turns += 1;
                }
            }
            turns
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    f64::from(total) / 2.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let sqlite = Coordinator::sqlite(&path).await.unwrap();
    let memory = Coordinator::memory();
    let server = RedisServer::start();
    let redis = Coordinator::connect(&server.url()).await.unwrap();

    println!("{ROUNDS} rounds each, one at a time:");
    for (name, tenure) in [("memory", &memory), ("sqlite", &sqlite), ("redis", &redis)] {
        println!("  {name:<7} acquire+release  {}", lease_round(tenure).await);
        println!("  {name:<7} limit check      {}", limit_check(tenure).await);
    }
    let other = Coordinator::sqlite(&path).await.unwrap();
    println!(
        "sqlite, two connections taking turns (1 ms holds, polling): {:.0} acquisitions/s",
        handoffs(&sqlite, &other).await
    );
}
