//! Running one operation from many tasks for a fixed time.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::samples::Samples;
use crate::server_stats::ServerStats;

/// Runs `op(task)` in a loop from `tasks` tasks for `run_for`; returns the
/// completed operations per second.
pub async fn rate<F, Fut>(tasks: usize, run_for: Duration, op: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + run_for;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (op, done) = (op.clone(), Arc::clone(&done));
            tokio::spawn(async move {
                while Instant::now() < stop {
                    op(task).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / run_for.as_secs_f64()
}

/// CPU time this process spent so far, every thread's (the first field of
/// `/proc/self/task/*/schedstat`), in seconds.
fn process_cpu_secs() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}

/// CPU time of this process and of the server at the start of a workload.
pub struct Cpu {
    client: f64,
    server: f64,
}

impl Cpu {
    pub async fn start(stats: &ServerStats) -> Self {
        Cpu {
            client: process_cpu_secs(),
            server: stats.cpu_secs().await,
        }
    }

    /// Records the CPU µs per cycle of this process and of the server since
    /// `start`, over `cycles` cycles, as `<name>.client_us` and
    /// `<name>.server_us`.
    pub async fn record(self, stats: &ServerStats, name: &str, cycles: f64, out: &mut Samples) {
        let client = (process_cpu_secs() - self.client) * 1e6 / cycles;
        let server = (stats.cpu_secs().await - self.server) * 1e6 / cycles;
        out.add(format!("{name}.client_us"), client);
        out.add(format!("{name}.server_us"), server);
    }
}
