//! tenure against its peers, in one run: a hand-written redis-rs client of
//! minimal scripts, rslock, redis-py's asyncio `Lock`, `redis-benchmark`
//! ceilings, governor and `flock`, on redis-servers this program starts.
//! Every workload runs once per round, rounds are repeated and the medians
//! printed as a markdown table; with `--write FILE` the table also replaces
//! its section of FILE (`docs/BENCHMARKS.md`). Run it with `scripts/bench`,
//! which installs the peers and builds the release `tenure` binary.
//!
//! After the rounds, the curves run once each: hand-off latency against
//! waiters (Redis, SQLite, etcd), Redis memory per key, `tenure list` against
//! held leases, and what a cold start sends. With `--write FILE` the charts
//! go into `bench/` beside FILE; rows, bars and targets of other benchmarks
//! are read from the directory `TENURE_BENCH_ROWS` names (see `extra.rs`).
//!
//! `--quick` is one round of 0.5 s and the small points of each curve.
//! `TENURE_BENCH_ROUNDS` (default 3) and `TENURE_BENCH_SECONDS` (default 2,
//! per workload and peer) shorten or lengthen the run; `TENURE_BENCH_BIG=1`
//! adds the 10⁶-key memory point; `TENURE_BENCH_ONLY` (comma-separated:
//! `distinct`, `cost`, `contended`, `limiter`, `blocked`, `local`, `quorum`,
//! `cli`, `http`, `waiters`, `memory`, `list`, `coldstart`) runs only those
//! workloads, and the tables then show the others as not measured;
//! `TENURE_BENCH_STORES` (comma-separated: `redis`, `sqlite`, `etcd`) runs the
//! waiters curve on those stores only.

#![allow(clippy::unwrap_used, missing_docs)]

mod blocked;
mod charts;
mod cli;
mod contended;
mod distinct;
mod extra;
mod http;
mod limiter;
mod list;
mod local;
mod local_curve;
mod local_hash;
mod local_rows;
mod local_threads;
mod memory;
mod minimal_scripts;
mod peers;
mod python;
mod quorum;
mod raw;
mod raw_line;
mod redis_benchmark;
mod report;
mod report_curves;
mod samples;
mod server_stats;
mod tasks;
mod waiters;

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
    let quick = args.iter().any(|a| a == "--quick");
    let rounds: usize = env_or("TENURE_BENCH_ROUNDS", if quick { 1 } else { 3 });
    let run_for = Duration::from_secs_f64(env_or(
        "TENURE_BENCH_SECONDS",
        if quick { 0.5 } else { 2.0 },
    ));
    let big = std::env::var("TENURE_BENCH_BIG").is_ok_and(|v| v == "1");
    let load_before = load_average();
    let began = std::time::Instant::now();

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
            for tasks in distinct::TASKS {
                distinct::throughput(&p, &stats, tasks, run_for, &mut s).await;
            }
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

    curves(&server, &stats, quick, big, &wanted, &mut s).await;

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
    let extras = std::env::var_os("TENURE_BENCH_ROWS")
        .map(|d| extra::Extras::read(std::path::Path::new(&d)))
        .unwrap_or_default();
    let chart_dir = match &write {
        Some(path) => std::path::Path::new(path)
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("bench"),
        None => std::env::temp_dir().join("tenure-bench-charts"),
    };
    let charts = report_curves::charts(&s, &extras, &chart_dir);
    let (section, targets) = report::render(&s, &setting, &extras, &charts);
    println!("{section}");
    println!("Targets (medians of this run):");
    for t in &targets {
        let met = if t.met { "met" } else { "NOT met" };
        println!("  {}: {} — {met}", t.what, t.measured);
    }
    for t in &extras.targets {
        println!("  {t}");
    }
    eprintln!("charts in {}", chart_dir.display());
    eprintln!("measured in {:.0} s", began.elapsed().as_secs_f64());
    if let Some(path) = write {
        report::write_into(&path, &section).unwrap();
        eprintln!("written into {path}");
    }
}

/// The curves, once each: small points only with `quick`.
async fn curves(
    server: &RedisServer,
    stats: &ServerStats,
    quick: bool,
    big: bool,
    wanted: &dyn Fn(&str) -> bool,
    s: &mut Samples,
) {
    let upto =
        |xs: &[usize], max: usize| xs.iter().copied().filter(|&x| x <= max).collect::<Vec<_>>();
    let limit = Duration::from_secs(if quick { 10 } else { 30 });
    if wanted("waiters") {
        let dir = tempfile_dir("waiters");
        let waiters = upto(&report_curves::WAITERS, if quick { 100 } else { 1000 });
        let stores = std::env::var("TENURE_BENCH_STORES").unwrap_or_default();
        let store_wanted =
            |name: &str| stores.is_empty() || stores.split(',').any(|s| s.trim() == name);
        let etcd = store_wanted("etcd").then(tenure_test::EtcdCluster::single);
        let urls = [
            ("redis", Some(server.url())),
            (
                "sqlite",
                Some(format!("sqlite:{}", dir.join("w.db").display())),
            ),
            ("etcd", etcd.as_ref().map(tenure_test::EtcdCluster::url)),
        ];
        for (store, url) in urls {
            let Some(url) = url.filter(|_| store_wanted(store)) else {
                continue;
            };
            eprintln!("hand-off latency against waiters on {store}");
            let tenure = tenure::Coordinator::connect(&url).await.unwrap();
            for &w in &waiters {
                waiters::run(&tenure, store, w, limit, s).await;
            }
            tenure.close().await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    if wanted("memory") {
        eprintln!("memory per key");
        let max = if big {
            1_000_000
        } else if quick {
            10_000
        } else {
            100_000
        };
        memory::run(&upto(&report_curves::MEMORY_KEYS, max), s).await;
    }
    if wanted("list") {
        eprintln!("tenure list against held leases");
        stats.flush().await;
        let tenure = tenure::Coordinator::connect(&server.url()).await.unwrap();
        let sizes = upto(&report_curves::LISTED, if quick { 1_000 } else { 100_000 });
        list::run(&tenure, &server.url(), "redis", &sizes, s).await;
        let dir = tempfile_dir("list");
        let url = format!("sqlite:{}", dir.join("l.db").display());
        let tenure = tenure::Coordinator::connect(&url).await.unwrap();
        let sizes = upto(&report_curves::LISTED, if quick { 1_000 } else { 10_000 });
        list::run(&tenure, &url, "sqlite", &sizes, s).await;
        tenure.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
    if wanted("coldstart") {
        eprintln!("what a cold start sends");
        cli::count(stats, &server.url(), s).await;
    }
}

/// A fresh directory under the system's temporary directory.
fn tempfile_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tenure-bench-{what}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
