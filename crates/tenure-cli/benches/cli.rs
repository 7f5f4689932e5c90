//! What one `tenure` invocation costs, process start to exit: `tenure run --key
//! K -- true` and `tenure limit`, on the embedded SQLite default and on a real
//! redis-server. Prints medians and 90th percentiles; asserts nothing. Run with
//! `cargo bench -p tenure-cli --bench cli`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tenure_test::RedisServer;

const RUNS: usize = 40;

fn measure(home: &std::path::Path, args: &[&str]) -> String {
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        let status = Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(args)
            .env("HOME", home)
            .env_remove("TENURE_BACKEND")
            .env_remove("TENURE_DB")
            .env_remove("XDG_STATE_HOME")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        samples.push(start.elapsed());
        assert!(status.code().is_some_and(|c| c == 0 || c == 75));
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    format!("median {:>8.1?}  p90 {:>8.1?}", at(0.5), at(0.9))
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let server = RedisServer::start();
    let url = server.url();
    let run = ["run", "--key", "bench", "--", "true"];
    let limit = ["limit", "--key", "bench", "--rate", "1000000/1s"];
    let baseline = {
        let mut samples: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                Command::new("true").status().unwrap();
                start.elapsed()
            })
            .collect();
        samples.sort_unstable();
        samples[RUNS / 2]
    };
    println!("{RUNS} invocations each (spawning `true` alone: median {baseline:.1?}):");
    println!("  sqlite  run -- true  {}", measure(home.path(), &run));
    println!("  sqlite  limit        {}", measure(home.path(), &limit));
    let on_redis = |args: &[&str]| {
        let mut all = vec!["--backend", url.as_str()];
        all.extend_from_slice(args);
        measure(home.path(), &all)
    };
    println!("  redis   run -- true  {}", on_redis(&run));
    println!("  redis   limit        {}", on_redis(&limit));
}
