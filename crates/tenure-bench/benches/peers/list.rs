//! `tenure list` (the release binary, `--json` to /dev/null) against the
//! number of held leases: this process holds N leases, then times the command.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure::Coordinator;

use crate::cli::tenure_bin;
use crate::samples::Samples;

/// Tasks that take the leases.
const TASKS: usize = 64;
/// Runs of `tenure list` per size; the median is recorded.
const RUNS: usize = 3;

/// Holds `n` leases on `tenure` for each of `sizes` and records
/// `list.<store>.<n>` in ms (the median of `RUNS` runs of `tenure list`
/// against `backend`).
pub async fn run(
    tenure: &Coordinator,
    backend: &str,
    store: &str,
    sizes: &[usize],
    out: &mut Samples,
) {
    for &n in sizes {
        let guards = hold(tenure, store, n).await;
        let backend = backend.to_string();
        let ms = tokio::task::spawn_blocking(move || {
            let mut runs: Vec<f64> = (0..RUNS).map(|_| time_list(&backend, n)).collect();
            runs.sort_by(f64::total_cmp);
            runs[RUNS / 2]
        })
        .await
        .unwrap();
        out.add(format!("list.{store}.{n}"), ms);
        release(guards).await;
    }
}

async fn hold(tenure: &Coordinator, store: &str, n: usize) -> Vec<tenure::lease::LeaseGuard> {
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let tenure = tenure.clone();
            let store = store.to_string();
            tokio::spawn(async move {
                let mut held = Vec::new();
                for i in (t..n).step_by(TASKS) {
                    let lease = tenure
                        .lease(format!("list:{store}:{i}"))
                        .watchdog(false)
                        .ttl(Duration::from_secs(600));
                    held.push(lease.attempt().await.unwrap().into_guard().unwrap());
                }
                held
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

async fn release(guards: Vec<tenure::lease::LeaseGuard>) {
    let guards = Arc::new(std::sync::Mutex::new(guards));
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let guards = Arc::clone(&guards);
            tokio::spawn(async move {
                loop {
                    let Some(g) = guards.lock().unwrap().pop() else {
                        return;
                    };
                    g.release().await.unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
}

/// One `tenure list --json` against `backend`, in ms; checks it listed `n`.
fn time_list(backend: &str, n: usize) -> f64 {
    let start = Instant::now();
    let listed = crate::cli::plain(&mut Command::new(tenure_bin()))
        .args(["--backend", backend, "list", "--json", "--prefix", "list:"])
        .env_remove("TENURE_BACKEND")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let took = start.elapsed().as_secs_f64() * 1e3;
    assert!(
        listed.status.success(),
        "tenure list failed: {}",
        listed.status
    );
    let lines = listed.stdout.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(lines, n, "tenure list listed {lines} of {n} held leases");
    took
}
