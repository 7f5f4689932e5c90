//! The in-process limiter: nanoseconds per decision on one thread, on one key
//! and cycling over 10 000 keys, against governor's keyed limiter (GCRA, one
//! compare-and-swap per decision).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use tenure::limit::{Algorithm, Limiter, Quota};

use crate::samples::Samples;

/// Decisions per measurement.
const DECISIONS: usize = 1_000_000;
/// 1 000 000 per second: a limit the loop may reach on one key, so both
/// limiters decide allowed and refused alike.
const LIMIT: u32 = 1_000_000;

/// Timed loops of each limiter, taken in turn, per key count and round: a
/// loop lasts under a tenth of a second, short enough for whatever else
/// runs on the machine to catch one of them.
const PAIRS: usize = 5;

/// Records `local.{tenure,governor}.{1,10000}` in ns per decision.
pub async fn run(out: &mut Samples) {
    for keys in [1usize, 10_000] {
        let pairs = tokio::task::spawn_blocking(move || measure(keys))
            .await
            .unwrap();
        for (tenure, governor) in pairs {
            out.add(format!("local.tenure.{keys}"), tenure);
            out.add(format!("local.governor.{keys}"), governor);
        }
    }
}

/// ns per decision of tenure and governor over `keys` keys, one thread,
/// [`PAIRS`] times in turn.
fn measure(keys: usize) -> Vec<(f64, f64)> {
    let names: Vec<String> = (0..keys).map(|k| format!("ip:{k}")).collect();
    let limit = NonZeroU32::new(LIMIT).unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let limiter = Limiter::local(Quota::per_second(limit), Algorithm::Gcra);
    let governor = governor::RateLimiter::keyed(governor::Quota::per_second(limit));
    // Every key exists before timing.
    for name in &names {
        let _ = rt.block_on(limiter.check(name)).unwrap();
        let _ = governor.check_key(name);
    }
    let tenure = || {
        rt.block_on(async {
            let start = Instant::now();
            for i in 0..DECISIONS {
                let _ = black_box(limiter.check(&names[i % keys]).await.unwrap());
            }
            start.elapsed()
        })
    };
    let governor = || {
        let start = Instant::now();
        for i in 0..DECISIONS {
            let _ = black_box(governor.check_key(&names[i % keys]));
        }
        start.elapsed()
    };
    let ns = |d: std::time::Duration| d.as_nanos() as f64 / DECISIONS as f64;
    (0..PAIRS).map(|_| (ns(tenure()), ns(governor()))).collect()
}
