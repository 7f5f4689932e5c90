//! Hand-off latency against the number of waiters on one key: `1 + waiters`
//! tasks take turns on one key, each back in line right after its release, so
//! `waiters` are always waiting. The latency of a hand-off is from the moment
//! the holder starts its release to the moment the next holder has the lease.
//! A FIFO line hands over in O(1): the curve should stay flat.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::Coordinator;
use tokio::time::Instant;

use crate::samples::Samples;

/// How long a waiter may wait; far beyond any wait seen.
const MAX_WAIT: Duration = Duration::from_secs(120);
/// TTL of each lease: a holder releases at once, so never reached.
const TTL: Duration = Duration::from_secs(30);

/// The release under way (when it started) and the latencies seen.
#[derive(Default)]
struct Chain {
    released_at: Option<Instant>,
    latencies: Vec<Duration>,
}

/// Hand-offs measured at `waiters` waiters: enough for a p99, at least two
/// full turns of the line.
pub fn handoffs(waiters: usize) -> usize {
    (2 * waiters).max(300)
}

/// Runs the chain on `tenure` with `waiters` waiters until `handoffs(waiters)`
/// hand-offs were seen (or `limit` passed); records
/// `waiters.<store>.<waiters>.{p50_us,p99_us,rate}` and the distribution.
pub async fn run(
    tenure: &Coordinator,
    store: &str,
    waiters: usize,
    limit: Duration,
    out: &mut Samples,
) {
    let key = format!("waiters:{store}:{waiters}:{}", rand::random::<u32>());
    let want = handoffs(waiters);
    let chain = Arc::new(Mutex::new(Chain::default()));
    let started = Instant::now();
    let stop = started + limit;
    let tasks: Vec<_> = (0..=waiters)
        .map(|_| {
            let lease = tenure.lease(key.clone()).watchdog(false).ttl(TTL);
            let chain = Arc::clone(&chain);
            tokio::spawn(async move {
                loop {
                    let Ok(attempt) = lease.attempt_within(MAX_WAIT).await else {
                        return;
                    };
                    let Some(guard) = attempt.into_guard() else {
                        return;
                    };
                    let done = {
                        let mut c = chain.lock().unwrap();
                        if let Some(at) = c.released_at.take() {
                            c.latencies.push(at.elapsed());
                        }
                        let done = c.latencies.len() >= want || Instant::now() >= stop;
                        if !done {
                            c.released_at = Some(Instant::now());
                        }
                        done
                    };
                    let _ = guard.release().await;
                    if done {
                        return;
                    }
                }
            })
        })
        .collect();
    // The first task to finish leaves the others waiting for a release that
    // never comes after it: stop them.
    let mut tasks = tasks;
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let c = chain.lock().unwrap();
        if c.latencies.len() >= want || Instant::now() >= stop {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for t in &tasks {
        t.abort();
    }
    for t in tasks.drain(..) {
        let _ = t.await;
    }
    let took = started.elapsed();
    let mut lat: Vec<f64> = std::mem::take(&mut chain.lock().unwrap().latencies)
        .into_iter()
        .map(|d| d.as_secs_f64() * 1e6)
        .collect();
    if lat.is_empty() {
        eprintln!("waiters: no hand-off seen on {store} with {waiters} waiters");
        return;
    }
    lat.sort_by(f64::total_cmp);
    let name = format!("waiters.{store}.{waiters}");
    out.add(format!("{name}.p50_us"), quantile(&lat, 0.5));
    out.add(format!("{name}.p99_us"), quantile(&lat, 0.99));
    out.add(
        format!("{name}.rate"),
        lat.len() as f64 / took.as_secs_f64(),
    );
    out.distribution(name, lat);
}

/// The `q` quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
