//! How the in-process limiter grows with its live keys (10³ … 10⁶): resident
//! bytes per key (what a fresh process grows by when the keys are added) and
//! ns per decision over all of them, next to governor's keyed limiter with
//! the same quota (1000 a day, GCRA).

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tenure::limit::{Algorithm, Limiter, Quota};
use tenure::memory::MemoryLimits;

use crate::samples::Samples;

/// The numbers of live keys measured.
pub const KEYS: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];

/// Runs a future that never waits (an in-process limiter's check) to its end.
pub fn at_once<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-process check waited"),
    }
}

/// Resident bytes of this process (`VmRSS`).
fn resident_bytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kb.unwrap_or(f64::NAN) * 1024.0
}

/// The variable that makes this program measure one point of the curve in a
/// fresh process (so no memory freed earlier is reused) and exit.
const CHILD: &str = "TENURE_BENCH_LOCAL_CURVE";

/// Records `local.curve.{n}.{tenure,governor}.{bytes,ns}` for each n of
/// [`KEYS`], each measured by a fresh run of this program.
pub async fn run(out: &mut Samples) {
    for n in KEYS {
        for who in ["tenure", "governor"] {
            let exe = std::env::current_exe().unwrap();
            let child = tokio::process::Command::new(exe)
                .env(CHILD, format!("{who}:{n}"))
                .output()
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&child.stdout);
            let mut values = text
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(f64::NAN));
            let (bytes, ns) = (values.next(), values.next());
            out.add(
                format!("local.curve.{n}.{who}.bytes"),
                bytes.unwrap_or(f64::NAN),
            );
            out.add(format!("local.curve.{n}.{who}.ns"), ns.unwrap_or(f64::NAN));
        }
    }
}

/// In a process started by [`run`]: measures its point, prints
/// `BYTES_PER_KEY NS_PER_DECISION` and returns `true`.
pub fn child() -> bool {
    let Ok(point) = std::env::var(CHILD) else {
        return false;
    };
    let (who, n) = point.split_once(':').unwrap();
    let (bytes, ns) = measure(who, n.parse().unwrap());
    println!("{bytes} {ns}");
    true
}

/// 1000 a day: every key stays live (and admitted) through the measurement.
fn per_day() -> NonZeroU32 {
    NonZeroU32::new(1_000).unwrap()
}

/// Resident bytes per key once `n` keys are held, and ns per decision over
/// all of them, of `who`'s keyed limiter.
fn measure(who: &str, n: usize) -> (f64, f64) {
    let names: Vec<String> = (0..n).map(|k| format!("ip:{k}")).collect();
    let decisions = (2 * n).max(1_000_000);
    let mut decide: Box<dyn FnMut(&String) -> bool> = if who == "governor" {
        let interval = Duration::from_secs(86_400) / per_day().get();
        let quota = governor::Quota::with_period(interval)
            .unwrap()
            .allow_burst(per_day());
        let limiter = governor::RateLimiter::keyed(quota);
        Box::new(move |key| limiter.check_key(key).is_ok())
    } else {
        let store = MemoryLimits::new().max_keys(2 * n);
        let limiter = Limiter::new(store, Quota::per_day(per_day()), Algorithm::Gcra);
        Box::new(move |key| at_once(limiter.check(key)).unwrap().allowed)
    };
    let before = resident_bytes();
    for name in &names {
        decide(name);
    }
    let bytes = (resident_bytes() - before) / n as f64;
    let began = Instant::now();
    for i in 0..decisions {
        black_box(decide(&names[i % n]));
    }
    let ns = began.elapsed().as_nanos() as f64 / decisions as f64;
    (bytes, ns)
}
