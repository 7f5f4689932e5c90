//! Rate-limit throughput on a real redis-server and in process.
//!
//! For each algorithm, 16 tasks check random keys for 2 s; the program prints
//! checks per second and the ratio against `PING`s per second measured the same
//! way in the same run (a check is one round trip, so the ratio shows what the
//! script itself costs), and the in-process store's rate. Numbers are printed,
//! never asserted. Run with `cargo bench -p warden --bench limit`.

#![allow(clippy::unwrap_used, missing_docs)]

#[path = "common/rate.rs"]
mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use warden::Warden;
use warden::limit::{Algorithm, Limiter, Quota};
use warden_test::RedisServer;

const TASKS: usize = 16;
const RUN_FOR: Duration = Duration::from_secs(2);
const KEYS: u32 = 1000;

/// Runs `op` from `TASKS` tasks for `RUN_FOR`; returns operations per second.
async fn rate<F, Fut>(op: F) -> f64
where
    F: Fn(u32) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    common::rate(TASKS, RUN_FOR, KEYS, op).await
}

#[tokio::main]
async fn main() {
    let server = RedisServer::start();
    let warden = Warden::connect(&server.url()).await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let pings = rate(move |_| {
        let mut c = conn.clone();
        async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
        }
    })
    .await;
    server.command("CONFIG RESETSTAT").unwrap();
    println!("PING baseline: {pings:.0}/s with {TASKS} tasks");
    println!(
        "| algorithm | Redis checks/s | ÷ PINGs/s | server µs per check | in-process checks/s |"
    );
    println!("|---|---|---|---|---|");
    let quota = Quota::per_second(NonZeroU32::new(100).unwrap());
    for alg in Algorithm::ALL {
        let remote = warden.limiter(quota, alg);
        let redis = rate(move |k| {
            let l = remote.clone();
            async move {
                l.check(&format!("bench:{k}")).await.unwrap();
            }
        })
        .await;
        // Server-side time of the script, from Redis's own accounting.
        let stats = server.command("INFO commandstats").unwrap();
        server.command("CONFIG RESETSTAT").unwrap();
        let server_us = stats
            .lines()
            .find(|l| l.starts_with("cmdstat_evalsha:"))
            .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
            .unwrap_or("?")
            .to_string();
        let local = Limiter::local(quota, alg);
        let memory = rate(move |k| {
            let l = local.clone();
            async move {
                l.check(&format!("bench:{k}")).await.unwrap();
            }
        })
        .await;
        println!(
            "| {alg} | {redis:.0} | {:.2} | {server_us} | {memory:.0} |",
            redis / pings
        );
    }
}
