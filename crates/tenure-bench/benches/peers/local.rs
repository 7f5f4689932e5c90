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

/// Records `local.{tenure,governor}.{1,10000}` in ns per decision.
pub async fn run(out: &mut Samples) {
    for keys in [1usize, 10_000] {
        let (tenure, governor) = tokio::task::spawn_blocking(move || measure(keys))
            .await
            .unwrap();
        out.add(format!("local.tenure.{keys}"), tenure);
        out.add(format!("local.governor.{keys}"), governor);
    }
}

/// ns per decision of tenure and governor over `keys` keys, one thread.
fn measure(keys: usize) -> (f64, f64) {
    let names: Vec<String> = (0..keys).map(|k| format!("ip:{k}")).collect();
    let limit = NonZeroU32::new(LIMIT).unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let limiter = Limiter::local(Quota::per_second(limit), Algorithm::Gcra);
    let tenure = rt.block_on(async {
        for name in &names {
            let _ = limiter.check(name).await.unwrap(); // every key exists before timing
        }
        let start = Instant::now();
        for i in 0..DECISIONS {
            let _ = black_box(limiter.check(&names[i % keys]).await.unwrap());
        }
        start.elapsed()
    });

    let governor = governor::RateLimiter::keyed(governor::Quota::per_second(limit));
    for name in &names {
        let _ = governor.check_key(name);
    }
    let start = Instant::now();
    for i in 0..DECISIONS {
        let _ = black_box(governor.check_key(&names[i % keys]));
    }
    let governor = start.elapsed();
    let ns = |d: std::time::Duration| d.as_nanos() as f64 / DECISIONS as f64;
    (ns(tenure), ns(governor))
}
