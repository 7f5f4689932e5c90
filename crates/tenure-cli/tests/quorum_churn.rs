//! A quorum that churns: five Redis masters (`appendfsync always`), `tenure
//! run` processes one after another on one key, and before each a random
//! minority of the nodes killed (-9), restarted once the run is over. No
//! process runs while the next one waits, so every run must get the lease:
//! nothing a finished run left on a node may hold it (a release or an undo
//! abandoned when the process exits).

mod common;

use common::{Sandbox, output, stderr};
use tenure_test::RedisServer;
use tenure_test::nemesis::Rng;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_run_wins_a_quorum_whose_minority_churns() {
    let seed = env_or("TENURE_CHURN_SEED", 20_261_202);
    let runs = env_or("TENURE_CHURN_RUNS", 15);
    // Long enough for the watchdog to extend the lease at least once.
    let command = format!(
        "sleep {}",
        env_or("TENURE_CHURN_HOLD_MS", 0) as f64 / 1000.0
    );
    println!("seed {seed}, {runs} runs");
    let mut nodes: Vec<RedisServer> = (0..5)
        .map(|_| RedisServer::builder().persistent(true).start())
        .collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let sandbox = Sandbox::new();
    let mut rng = Rng::new(seed);
    for run in 0..runs {
        let mut down: Vec<usize> = Vec::new();
        for _ in 0..rng.below(3) {
            let i = usize::try_from(rng.below(5)).unwrap();
            if !down.contains(&i) {
                down.push(i);
            }
        }
        for &i in &down {
            nodes[i].kill();
        }
        let mut cmd = sandbox.tenure();
        for url in &urls {
            cmd.args(["--backend", url]);
        }
        cmd.args([
            "run", "--key", "churn", "--ttl", "10s", "--wait", "10s", "--", "sh", "-c", &command,
        ]);
        let started = std::time::Instant::now();
        let out = output(&mut cmd);
        if started.elapsed() > std::time::Duration::from_secs(1) {
            println!(
                "run {run} (nodes {down:?} down) took {:?}",
                started.elapsed()
            );
        }
        for &i in &down {
            nodes[i].start_again();
        }
        assert!(
            out.status.success(),
            "run {run} (seed {seed}, nodes {down:?} down) exited {:?}: {}",
            out.status.code(),
            stderr(&out)
        );
    }
}
