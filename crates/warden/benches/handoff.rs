//! Contended hand-off: 16 tasks take turns on one lease on a real redis-server.
//!
//! Prints, for warden's `acquire_within` (release notifications) and for a
//! polling baseline that retries after a random 0–200 ms delay (what rslock and
//! many seed snippets do), the hand-offs per second to a *different* task, the
//! median and worst wait, and the ratio against the server's round trip measured
//! in the same run. Run with `cargo bench -p warden --bench handoff`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use warden::Warden;
use warden::redis::{RedisOptions, RedisStore};
use warden_test::RedisServer;

const TASKS: usize = 16;
const RUN_FOR: Duration = Duration::from_secs(4);

#[derive(Clone, Copy)]
enum Strategy {
    Notified,
    Polling,
}

struct Stats {
    handoffs_per_sec: f64,
    /// From the holder's release call to the next holder's acquisition.
    median_handoff: Duration,
    median_wait: Duration,
    worst_wait: Duration,
}

async fn contend(warden: &Warden, key: &str, strategy: Strategy) -> Stats {
    let last_holder = Arc::new(AtomicUsize::new(usize::MAX));
    let handoffs = Arc::new(AtomicUsize::new(0));
    let waits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let released_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let handoff_times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop_at = Instant::now() + RUN_FOR;
    let mut tasks = Vec::new();
    for id in 0..TASKS {
        let lease = warden.lease(key).ttl(Duration::from_secs(5));
        let (last_holder, handoffs, waits) = (last_holder.clone(), handoffs.clone(), waits.clone());
        let (released_at, handoff_times) = (released_at.clone(), handoff_times.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let asked = Instant::now();
                let guard = match strategy {
                    Strategy::Notified => lease
                        .acquire_within(Duration::from_secs(10))
                        .await
                        .unwrap()
                        .into_guard(),
                    Strategy::Polling => loop {
                        if let Some(g) = lease.try_acquire().await.unwrap().into_guard() {
                            break Some(g);
                        }
                        let ms = rand::rng().random_range(0..200);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    },
                };
                let Some(guard) = guard else { continue };
                waits.lock().unwrap().push(asked.elapsed());
                if last_holder.swap(id, Ordering::SeqCst) != id {
                    handoffs.fetch_add(1, Ordering::SeqCst);
                    if let Some(at) = released_at.lock().unwrap().take() {
                        handoff_times.lock().unwrap().push(at.elapsed());
                    }
                }
                *released_at.lock().unwrap() = Some(Instant::now());
                guard.release().await.unwrap();
                // A little work between turns, so the releaser does not simply
                // win its own release every time.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut waits = waits.lock().unwrap().clone();
    waits.sort();
    let mut handoff_times = handoff_times.lock().unwrap().clone();
    handoff_times.sort();
    Stats {
        median_handoff: handoff_times[handoff_times.len() / 2],
        handoffs_per_sec: handoffs.load(Ordering::SeqCst) as f64 / RUN_FOR.as_secs_f64(),
        median_wait: waits[waits.len() / 2],
        worst_wait: *waits.last().unwrap(),
    }
}

async fn round_trip(url: &str) -> Duration {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let mut samples = Vec::new();
    for _ in 0..2000 {
        let t = Instant::now();
        let () = redis::cmd("PING").query_async(&mut con).await.unwrap();
        samples.push(t.elapsed());
    }
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = RedisServer::start();
    let backend = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    let warden = Warden::with_backend(backend);
    let rtt = round_trip(&server.url()).await;
    println!("redis PING round trip (median of 2000): {rtt:?}");
    println!("{TASKS} tasks on one key for {RUN_FOR:?} each:");
    let notified = contend(&warden, "bench:notified", Strategy::Notified).await;
    let polling = contend(&warden, "bench:polling", Strategy::Polling).await;
    for (name, s) in [
        ("warden acquire_within", &notified),
        ("poll 0-200ms (baseline)", &polling),
    ] {
        println!(
            "  {name:<24} {:>6.0} hand-offs/s to another task; release->next holder median {:>9.2?} ({:.1} round trips); wait median {:>9.2?} worst {:>9.2?}",
            s.handoffs_per_sec,
            s.median_handoff,
            s.median_handoff.as_secs_f64() / rtt.as_secs_f64(),
            s.median_wait,
            s.worst_wait
        );
    }
    println!(
        "  ratio: {:.1}x the baseline's hand-off rate; one hand-off every {:.1} round trips",
        notified.handoffs_per_sec / polling.handoffs_per_sec,
        1.0 / (notified.handoffs_per_sec * rtt.as_secs_f64())
    );
}
