//! Rate-limit checks on a real redis-server: tenure's `Limiter` against the
//! minimal script of the same algorithm (`tenure-bench`'s
//! `minimal_scripts.rs`: one policy, no validation, no reset or retry times),
//! both from 64 tasks on random keys of 10 000 at 100/s per key, and the
//! server's own time per call (`usec_per_call` of `FCALL` / `EVALSHA` in
//! `INFO commandstats`, after `CONFIG RESETSTAT`); then the in-process
//! store's rate. Numbers are printed, never asserted; medians of 3
//! interleaved rounds. Run with `cargo bench -p tenure --bench limit`.

#![allow(clippy::unwrap_used, missing_docs)]

#[path = "common/rate.rs"]
mod common;
#[path = "../../tenure-bench/benches/peers/minimal_scripts.rs"]
mod minimal_scripts;

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::Coordinator;
use tenure::limit::{Algorithm, Limiter, Quota};
use tenure_test::RedisServer;

const TASKS: usize = 64;
const RUN_FOR: Duration = Duration::from_secs(2);
const KEYS: u32 = 10_000;
const ROUNDS: usize = 3;
const LIMIT: u32 = 100;

/// Runs `op` from `TASKS` tasks for `RUN_FOR`; returns operations per second.
async fn rate<F, Fut>(op: F) -> f64
where
    F: Fn(u32) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    common::rate(TASKS, RUN_FOR, KEYS, op).await
}

/// `usec_per_call` of the first of `commands` the server counted.
fn usec_per_call(server: &RedisServer, commands: &[&str]) -> f64 {
    let stats = server.command("INFO commandstats").unwrap();
    commands
        .iter()
        .find_map(|c| {
            let line = stats
                .lines()
                .find(|l| l.starts_with(&format!("cmdstat_{c}:")))?;
            line.split(',')
                .find_map(|f| f.strip_prefix("usec_per_call="))?
                .parse()
                .ok()
        })
        .unwrap_or(f64::NAN)
}

/// Checks per second and server µs per call of tenure's limiter.
async fn tenure_round(server: &RedisServer, limiter: &Limiter) -> (f64, f64) {
    server.command("CONFIG RESETSTAT").unwrap();
    let l = limiter.clone();
    let checks = rate(move |k| {
        let l = l.clone();
        async move {
            let _ = l.check(&format!("lim:{k}")).await.unwrap();
        }
    })
    .await;
    (checks, usec_per_call(server, &["fcall", "evalsha"]))
}

/// The same for the minimal script of `alg`, sent by a plain redis-rs client.
async fn minimal_round(server: &RedisServer, alg: Algorithm) -> (f64, f64) {
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let script = redis::Script::new(&minimal_scripts::script(alg));
    let period = 1_000_000u64;
    let interval = period / u64::from(LIMIT);
    server.command("CONFIG RESETSTAT").unwrap();
    let checks = rate(move |k| {
        let (mut c, script) = (conn.clone(), script.clone());
        async move {
            let _: i64 = script
                .key(format!("min:{alg}:{k}"))
                .arg(LIMIT)
                .arg(period)
                .arg(interval)
                .arg(rand::random::<u64>())
                .invoke_async(&mut c)
                .await
                .unwrap();
        }
    })
    .await;
    (checks, usec_per_call(server, &["evalsha"]))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let server = RedisServer::start();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    let quota = Quota::per_second(NonZeroU32::new(LIMIT).unwrap());
    println!(
        "{TASKS} tasks, {KEYS} keys at {LIMIT}/s each, medians of {ROUNDS} rounds of {RUN_FOR:?}"
    );
    println!(
        "| algorithm | tenure checks/s | minimal checks/s | ratio | tenure server µs | minimal server µs | ratio | in-process checks/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for alg in Algorithm::ALL {
        let limiter = tenure.limiter(quota, alg);
        let _ = limiter.check("warm").await.unwrap(); // loads the library
        let (mut w, mut m) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for _ in 0..ROUNDS {
            let (checks, us) = tenure_round(&server, &limiter).await;
            w.0.push(checks);
            w.1.push(us);
            let (checks, us) = minimal_round(&server, alg).await;
            m.0.push(checks);
            m.1.push(us);
        }
        let local = Limiter::local(quota, alg);
        let memory = rate(move |k| {
            let l = local.clone();
            async move {
                let _ = l.check(&format!("lim:{k}")).await.unwrap();
            }
        })
        .await;
        let (wc, wu, mc, mu) = (median(w.0), median(w.1), median(m.0), median(m.1));
        println!(
            "| {alg} | {wc:.0} | {mc:.0} | {:.2}× | {wu:.2} | {mu:.2} | {:.2}× | {memory:.0} |",
            wc / mc,
            wu / mu
        );
    }
}
