//! The throughput loop shared by the Redis benches.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// Runs `op` on random keys below `keys` from `tasks` tasks for `run_for`;
/// returns operations per second.
pub async fn rate<F, Fut>(tasks: usize, run_for: Duration, keys: u32, op: F) -> f64
where
    F: Fn(u32) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + run_for;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (op, done) = (op.clone(), Arc::clone(&done));
        handles.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let key = rand::rng().random_range(0..keys);
                op(key).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        if let Err(e) = h.await {
            eprintln!("a bench task failed: {e}");
        }
    }
    done.load(Ordering::Relaxed) as f64 / run_for.as_secs_f64()
}
