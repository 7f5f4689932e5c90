//! A flood of refused checks on Redis, with and without the local cache of
//! blocked keys (`Limiter::cache_blocked`): store calls per refused request
//! (the server's `FCALL` count from `INFO commandstats`) and checks per
//! second, recorded as `blocked.{plain,cached}.{calls_per_refusal,rate}`.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tenure::limit::{Algorithm, Quota};

use crate::peers::Peers;
use crate::samples::Samples;
use crate::server_stats::ServerStats;
use crate::tasks::rate;

const TASKS: usize = 64;
/// Flooding clients: each key has spent its 10 per minute after its first
/// ten checks, so nearly every check is a refusal.
const KEYS: usize = 100;

pub async fn run(p: &Peers, stats: &ServerStats, run_for: Duration, out: &mut Samples) {
    let quota = Quota::per_minute(NonZeroU32::new(10).unwrap());
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|k| format!("flood:{k}")).collect());
    let plain = p.tenure.limiter(quota, Algorithm::Gcra);
    let cached = plain
        .clone()
        .cache_blocked(NonZeroUsize::new(10_000).unwrap());
    for (name, limiter) in [("plain", plain), ("cached", cached)] {
        stats.flush().await;
        let _ = limiter.peek("flood:warm").await.unwrap();
        stats.reset().await;
        // [admitted, refused]
        let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let (keys, counted) = (Arc::clone(&keys), Arc::clone(&counts));
        let checks = rate(TASKS, run_for, move |_| {
            let (limiter, keys, counts) =
                (limiter.clone(), Arc::clone(&keys), Arc::clone(&counted));
            async move {
                let k = rand::rng().random_range(0..keys.len());
                let allowed = limiter.check(&keys[k]).await.unwrap().allowed;
                counts[usize::from(!allowed)].fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
        let calls = stats.script_calls().await as f64;
        let admitted = counts[0].load(Ordering::Relaxed) as f64;
        let refused = counts[1].load(Ordering::Relaxed) as f64;
        out.add(
            format!("blocked.{name}.calls_per_refusal"),
            (calls - admitted).max(0.0) / refused,
        );
        out.add(format!("blocked.{name}.rate"), checks);
    }
}
