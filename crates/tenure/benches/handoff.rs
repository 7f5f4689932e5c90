//! Contended hand-off: 16 tasks take turns on one lease on a real redis-server.
//!
//! Prints, for tenure's `attempt_within` (a FIFO waiting line on Redis: one
//! waiter woken per hand-off) and for a polling baseline that retries after a
//! random 0–200 ms delay (what rslock and many seed snippets do), the
//! hand-offs per second to a *different* task, the median and longest wait,
//! the Redis commands per hand-off (`INFO commandstats`, every command the run
//! sent, the ones inside scripts included), the FIFO violations (acquisitions
//! that overtook a task waiting since earlier), and the ratio against the
//! server's round trip measured in the same run. Each strategy runs
//! `ROUNDS` times, interleaved; the figures are the medians.
//! Run with `cargo bench -p tenure --bench handoff`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;
use tenure::Coordinator;
use tenure::redis::{RedisOptions, RedisStore};
use tenure_test::RedisServer;
use tokio::time::Instant;

const TASKS: usize = 16;
const RUN_FOR: Duration = Duration::from_secs(4);
const ROUNDS: usize = 3;

#[derive(Clone, Copy)]
enum Strategy {
    Notified,
    Polling,
}

#[derive(Clone)]
struct Stats {
    handoffs_per_sec: f64,
    commands_per_handoff: f64,
    /// Calls per hand-off, by command.
    by_command: String,
    /// Acquisitions that came before another task's which had waited longer.
    fifo_violations: usize,
    /// From the holder's release call to the next holder's acquisition.
    median_handoff: Duration,
    median_wait: Duration,
    worst_wait: Duration,
}

/// Calls of every command since the last `CONFIG RESETSTAT`, by command, but
/// `INFO` and `CONFIG` (the bench's own).
fn commands(server: &RedisServer) -> Vec<(String, u64)> {
    let stats = server.command("INFO commandstats").unwrap();
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("info:") && !l.starts_with("config"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

async fn contend(
    server: &RedisServer,
    tenure: &Coordinator,
    key: &str,
    strategy: Strategy,
) -> Stats {
    server.command("CONFIG RESETSTAT").unwrap();
    // When each task began waiting (None: not waiting).
    let waiting_since = Arc::new(std::sync::Mutex::new(vec![None::<Instant>; TASKS]));
    let violations = Arc::new(AtomicUsize::new(0));
    let last_holder = Arc::new(AtomicUsize::new(usize::MAX));
    let handoffs = Arc::new(AtomicUsize::new(0));
    let waits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let released_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let handoff_times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop_at = Instant::now() + RUN_FOR;
    let mut tasks = Vec::new();
    for id in 0..TASKS {
        let lease = tenure
            .lease(key)
            .watchdog(false)
            .ttl(Duration::from_secs(5));
        let (last_holder, handoffs, waits) = (last_holder.clone(), handoffs.clone(), waits.clone());
        let (released_at, handoff_times) = (released_at.clone(), handoff_times.clone());
        let (waiting_since, violations) = (waiting_since.clone(), violations.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let asked = Instant::now();
                waiting_since.lock().unwrap()[id] = Some(asked);
                let guard = match strategy {
                    Strategy::Notified => lease
                        .attempt_within(Duration::from_secs(10))
                        .await
                        .unwrap()
                        .into_guard(),
                    Strategy::Polling => loop {
                        if let Some(g) = lease.attempt().await.unwrap().into_guard() {
                            break Some(g);
                        }
                        let ms = rand::rng().random_range(0..200);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    },
                };
                let Some(guard) = guard else { continue };
                waits.lock().unwrap().push(asked.elapsed());
                {
                    let mut since = waiting_since.lock().unwrap();
                    since[id] = None;
                    if since.iter().flatten().any(|other| *other < asked) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                }
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
    let handoffs = handoffs.load(Ordering::SeqCst);
    let per_handoff = |n: u64| n as f64 / handoffs.max(1) as f64;
    let calls = commands(server);
    let by_command = calls
        .iter()
        .filter(|(_, n)| per_handoff(*n) >= 0.005)
        .map(|(name, n)| format!("{name} {:.2}", per_handoff(*n)))
        .collect::<Vec<_>>()
        .join(", ");
    Stats {
        by_command,
        median_handoff: handoff_times[handoff_times.len() / 2],
        handoffs_per_sec: handoffs as f64 / RUN_FOR.as_secs_f64(),
        commands_per_handoff: per_handoff(calls.iter().map(|(_, n)| n).sum()),
        fifo_violations: violations.load(Ordering::SeqCst),
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
    let tenure = Coordinator::with_backend(backend);
    let rtt = round_trip(&server.url()).await;
    println!("redis PING round trip (median of 2000): {rtt:?}");
    println!(
        "{TASKS} tasks on one key for {RUN_FOR:?} each, medians of {ROUNDS} interleaved rounds:"
    );
    let (mut notified, mut polling) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let key = format!("bench:{round}");
        notified.push(
            contend(
                &server,
                &tenure,
                &format!("{key}:notified"),
                Strategy::Notified,
            )
            .await,
        );
        polling.push(
            contend(
                &server,
                &tenure,
                &format!("{key}:polling"),
                Strategy::Polling,
            )
            .await,
        );
    }
    let (notified, polling) = (median(notified), median(polling));
    for (name, s) in [
        ("tenure attempt_within", &notified),
        ("poll 0-200ms (baseline)", &polling),
    ] {
        println!(
            "  {name:<24} {:>6.0} hand-offs/s to another task; {:>5.1} Redis commands per hand-off; release->next holder median {:>9.2?} ({:.1} round trips); wait median {:>9.2?} longest {:>9.2?}; {} FIFO violations",
            s.handoffs_per_sec,
            s.commands_per_handoff,
            s.median_handoff,
            s.median_handoff.as_secs_f64() / rtt.as_secs_f64(),
            s.median_wait,
            s.worst_wait,
            s.fifo_violations,
        );
        println!("    per hand-off: {}", s.by_command);
    }
    println!(
        "  ratio: {:.1}x the baseline's hand-off rate; one hand-off every {:.1} round trips",
        notified.handoffs_per_sec / polling.handoffs_per_sec,
        1.0 / (notified.handoffs_per_sec * rtt.as_secs_f64())
    );
}

/// The round with the median hand-off rate (its figures stay together).
fn median(mut rounds: Vec<Stats>) -> Stats {
    rounds.sort_by(|a, b| a.handoffs_per_sec.total_cmp(&b.handoffs_per_sec));
    rounds.swap_remove(rounds.len() / 2)
}
