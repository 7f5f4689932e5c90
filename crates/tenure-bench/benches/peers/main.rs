//! tenure against its peers, in one run: a hand-written redis-rs client of
//! minimal scripts, rslock, redis-py's asyncio `Lock`, `redis-benchmark`
//! ceilings, governor and `flock`, on redis-servers this program starts.
//! Every workload runs once per round, rounds are repeated and the medians
//! printed as a markdown table; with `--write FILE` the table also replaces
//! its section of FILE (`docs/BENCHMARKS.md`). Run it with `scripts/bench`,
//! which installs the peers and builds the release `tenure` binary.
//!
//! `TENURE_BENCH_ROUNDS` (default 3) and `TENURE_BENCH_SECONDS` (default 2,
//! per workload and peer) shorten or lengthen the run; `TENURE_BENCH_ONLY`
//! (comma-separated: `distinct`, `cost`, `contended`, `limiter`, `blocked`, `local`,
//! `quorum`, `cli`, `http`) runs only those workloads, and the table then shows the
//! others as not measured.

#![allow(clippy::unwrap_used, missing_docs)]

mod blocked;
mod cli;
mod contended;
mod distinct;
mod http;
mod limiter;
mod local;
mod local_curve;
mod local_hash;
mod local_rows;
mod local_threads;
mod minimal_scripts;
mod peers;
mod python;
mod quorum;
mod raw;
mod redis_benchmark;
mod report;
mod samples;
mod server_stats;
mod tasks;

use std::time::Duration;

use tenure_test::RedisServer;

use crate::samples::Samples;
use crate::server_stats::ServerStats;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `redis-benchmark -c64 -P16` of the raw acquire script on fresh keys
/// (10 ms TTL, so most `SET NX` win and `INCR` runs): EVALSHAs per second.
async fn ceiling(stats: &ServerStats, port: u16, run_for: Duration) -> f64 {
    let sha = stats.load_script(raw::ACQUIRE_SOURCE).await;
    let requests = (400_000.0 * run_for.as_secs_f64()) as usize;
    redis_benchmark::requests_per_sec(
        port,
        64,
        16,
        requests,
        100_000,
        &[
            "EVALSHA",
            &sha,
            "2",
            "ceil:__rand_int__",
            "ceil:__rand_int__:fence",
            "token",
            "10",
        ],
    )
}

#[tokio::main]
async fn main() {
    if local_curve::child() || http::child() {
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let write = args
        .windows(2)
        .find(|w| w[0] == "--write")
        .map(|w| w[1].clone());
    let rounds: usize = env_or("TENURE_BENCH_ROUNDS", 3);
    let run_for = Duration::from_secs_f64(env_or("TENURE_BENCH_SECONDS", 2.0));
    let load_before = load_average();

    let server = RedisServer::start();
    let nodes: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let node_urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let mut node_stats = Vec::new();
    for url in &node_urls {
        node_stats.push(ServerStats::connect(url).await);
    }
    let stats = ServerStats::connect(&server.url()).await;
    let p = peers::Peers::connect(&server.url(), python::Python::from_env()).await;
    if p.python.is_none() {
        eprintln!("TENURE_BENCH_PYTHON is not set: redis-py is left out");
    }

    let only = std::env::var("TENURE_BENCH_ONLY").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|w| w.trim() == name);
    let mut s = Samples::default();
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}");
        stats.flush().await;
        if wanted("distinct") {
            distinct::throughput(&p, 16, run_for, &mut s).await;
            distinct::throughput(&p, 64, run_for, &mut s).await;
            let ceiling = ceiling(&stats, server.port(), run_for).await;
            s.add("ceiling.evalsha", ceiling);
            stats.flush().await;
        }
        if wanted("cost") {
            distinct::cost(&p, &stats, &mut s).await;
        }
        if wanted("contended") {
            contended::run(&p, &stats, run_for, &mut s).await;
        }
        if wanted("limiter") {
            stats.flush().await;
            limiter::run(&p, &stats, run_for, &mut s).await;
        }
        if wanted("blocked") {
            blocked::run(&p, &stats, run_for, &mut s).await;
        }
        if wanted("local") {
            local::run(&mut s).await;
            local_threads::run(&mut s).await;
            local_curve::run(&mut s).await;
            local_hash::run(&mut s);
        }
        if wanted("http") {
            http::run(&p.tenure, run_for, &mut s).await;
        }
        if wanted("quorum") {
            for n in &node_stats {
                n.flush().await;
            }
            quorum::run(&node_urls, &node_stats, run_for, &mut s).await;
        }
        if wanted("cli") {
            cli::run(&server.url(), &mut s).await;
        }
    }

    let setting = report::Setting {
        date: today(),
        redis_version: stats.version().await,
        cores: std::thread::available_parallelism().map_or(0, usize::from),
        load_before,
        load_after: load_average(),
        rounds,
        run_for_secs: run_for.as_secs_f64(),
        command: "scripts/bench".into(),
    };
    let section = report::render(&s, &setting);
    println!("{section}");
    if let Some(path) = write {
        report::write_into(&path, &section).unwrap();
        eprintln!("written into {path}");
    }
}
