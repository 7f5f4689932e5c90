//! The in-process limiter's cost per decision, next to governor's keyed limiter
//! measured in the same run: one thread, one key and 10 000 keys, each
//! algorithm, medians of 5 interleaved rounds.
//!
//! ```sh
//! cargo bench -p tenure --bench local_limit
//! ```
//!
//! Wall-clock figures on a busy machine are noisy; instruction counts are not.
//! `local_limit -- count tenure|governor ALGORITHM KEYS N` runs N decisions
//! and nothing else, for `valgrind --tool=callgrind` (run it with two values
//! of N and divide the difference of the totals by the difference of N;
//! `--toggle-collect` on the limiter's call leaves out the calibration of
//! the clock, whose count moves from run to run: docs/BENCHMARKS.md gives
//! the commands).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use governor::{Quota as GQuota, RateLimiter};
use tenure::limit::{Algorithm, Limiter, Quota};

const ROUNDS: usize = 5;
const DECISIONS: usize = 400_000;

/// `count tenure|governor ALGORITHM KEYS N`: N decisions of one limiter only.
fn count(args: &[String], rt: &tokio::runtime::Runtime) -> Option<()> {
    let [who, alg, n_keys, n] = args else {
        return None;
    };
    let alg = Algorithm::ALL.into_iter().find(|a| a.to_string() == *alg)?;
    let keys = keys(n_keys.parse().ok()?);
    let n: usize = n.parse().ok()?;
    if who == "governor" {
        let limiter = RateLimiter::keyed(GQuota::per_second(nz(1_000)).allow_burst(nz(50)));
        for i in 0..n {
            black_box(limiter.check_key(&keys[i % keys.len()]).is_ok());
        }
    } else {
        let limiter = Limiter::local(Quota::per_second(nz(1_000)).burst(nz(50)), alg);
        rt.block_on(async {
            for i in 0..n {
                let d = limiter.check(&keys[i % keys.len()]).await;
                black_box(d.map(|d| d.allowed).unwrap_or(false));
            }
        });
    }
    Some(())
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("client:{i}")).collect()
}

/// Nanoseconds per decision of tenure's local limiter.
fn tenure_ns(rt: &tokio::runtime::Runtime, alg: Algorithm, keys: &[String]) -> f64 {
    let limiter = Limiter::local(Quota::per_second(nz(1_000)).burst(nz(50)), alg);
    rt.block_on(async {
        let start = Instant::now();
        for i in 0..DECISIONS {
            let d = limiter.check(&keys[i % keys.len()]).await;
            black_box(d.map(|d| d.allowed).unwrap_or(false));
        }
        start.elapsed().as_nanos() as f64 / DECISIONS as f64
    })
}

/// Nanoseconds per decision of governor's keyed (dashmap) limiter.
fn governor_ns(keys: &[String]) -> f64 {
    let limiter = RateLimiter::keyed(GQuota::per_second(nz(1_000)).allow_burst(nz(50)));
    let start = Instant::now();
    for i in 0..DECISIONS {
        black_box(limiter.check_key(&keys[i % keys.len()]).is_ok());
    }
    start.elapsed().as_nanos() as f64 / DECISIONS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return eprintln!("no runtime: {e}"),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(rest) = args
        .iter()
        .position(|a| a == "count")
        .map(|i| &args[i + 1..])
    {
        if count(rest, &rt).is_none() {
            eprintln!("usage: local_limit count tenure|governor ALGORITHM KEYS N");
        }
        return;
    }
    println!("| algorithm | keys | tenure ns/decision | governor keyed ns/decision | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for n in [1, 10_000] {
        let keys = keys(n);
        for alg in Algorithm::ALL {
            let (mut w, mut g) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                w.push(tenure_ns(&rt, alg, &keys));
                g.push(governor_ns(&keys));
            }
            let (w, g) = (median(w), median(g));
            println!("| {alg} | {n} | {w:.0} | {g:.0} | {:.1}× |", w / g);
        }
    }
}
