//! The in-process limiter from several threads at once: 4 threads share one
//! `Limiter::local` or one governor keyed limiter (a sharded `DashMap`), each
//! thread cycling over its quarter of 10 000 keys. Four threads on this
//! machine's two cores are at the mercy of whatever else runs (a
//! measurement lasts about a tenth of a second), so the two are measured in
//! turn, [`PAIRS`] times a round, and the medians compared.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use tenure::limit::{Algorithm, Limiter, Quota};

use crate::local_curve::at_once;
use crate::samples::Samples;

/// Threads deciding at once.
pub const THREADS: usize = 4;
/// Decisions per thread.
const DECISIONS: usize = 400_000;
const KEYS: usize = 10_000;
/// 1 000 000 per second per key, as in `local.rs`.
const LIMIT: u32 = 1_000_000;

type Decide = Arc<dyn Fn(&String) + Send + Sync>;

/// Measurements of each, taken in turn, per round.
const PAIRS: usize = 5;

/// Records `local.threads.{tenure,governor}` in decisions per second.
pub async fn run(out: &mut Samples) {
    let pairs = tokio::task::spawn_blocking(measure).await.unwrap();
    for (tenure, governor) in pairs {
        out.add("local.threads.tenure", tenure);
        out.add("local.threads.governor", governor);
    }
}

/// Decisions per second of tenure and of governor, all threads together,
/// [`PAIRS`] times in turn.
fn measure() -> Vec<(f64, f64)> {
    let limit = NonZeroU32::new(LIMIT).unwrap();
    let names: Arc<[String]> = (0..KEYS).map(|k| format!("ip:{k}")).collect();
    let limiter = Limiter::local(Quota::per_second(limit), Algorithm::Gcra);
    let tenure: Decide = Arc::new(move |key| {
        black_box(at_once(limiter.check(key)).unwrap().allowed);
    });
    let governor = governor::RateLimiter::keyed(governor::Quota::per_second(limit));
    let governor: Decide = Arc::new(move |key| {
        black_box(governor.check_key(key).is_ok());
    });
    (0..PAIRS)
        .map(|_| (on_threads(&names, &tenure), on_threads(&names, &governor)))
        .collect()
}

/// [`THREADS`] threads, each making [`DECISIONS`] decisions over its share of
/// the keys, started together: decisions per second until the last ends.
fn on_threads(names: &Arc<[String]>, decide: &Decide) -> f64 {
    let start = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (names, decide, start) = (names.clone(), decide.clone(), start.clone());
            std::thread::spawn(move || {
                let first = t * KEYS / THREADS;
                start.wait();
                for i in 0..DECISIONS {
                    decide(&names[(first + i) % KEYS]);
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for t in threads {
        t.join().unwrap();
    }
    (THREADS * DECISIONS) as f64 / began.elapsed().as_secs_f64()
}
