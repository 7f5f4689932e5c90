//! Contention: 16 tasks take turns on one key. Hand-offs to a *different*
//! task per second, Redis commands per cycle and the longest any task waited.
//! Between turns a task sleeps 1 ms (a little work; tokio's timer makes it
//! about 2 ms), so a releaser does not simply win its own release every time.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::peers::{Peers, TTL, token};
use crate::raw_line::{RawLine, Work};
use crate::samples::Samples;
use crate::server_stats::ServerStats;
use crate::tasks::Cpu;

pub const TASKS: usize = 16;
/// How long a waiter may wait; far beyond any wait seen.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Numbers the raw line's turns: each turn's token is unique, as a hand-off
/// names the turn it wakes.
static TURN: AtomicU64 = AtomicU64::new(0);
/// The raw client's polling interval (a hand-written client's first choice).
const RAW_POLL: Duration = Duration::from_millis(1);

/// Who held the key last, and what the run saw.
#[derive(Default)]
struct Turns {
    last: AtomicUsize,
    handoffs: AtomicU64,
    cycles: AtomicU64,
    /// The longest wait after each task's first turn.
    worst: Mutex<Duration>,
    /// The longest first turn (a task's first ask sets up what later ones reuse).
    first: Mutex<Duration>,
    /// Which tasks had their first turn.
    started: Mutex<Vec<bool>>,
}

impl Turns {
    fn new() -> Arc<Self> {
        let t = Turns::default();
        t.last.store(usize::MAX, Ordering::SeqCst);
        Arc::new(t)
    }

    /// `task` got the key after asking for it `waited` ago.
    fn granted(&self, task: usize, waited: Duration) {
        self.cycles.fetch_add(1, Ordering::SeqCst);
        if self.last.swap(task, Ordering::SeqCst) != task {
            self.handoffs.fetch_add(1, Ordering::SeqCst);
        }
        let first = {
            let mut started = self.started.lock().unwrap();
            started.resize(TASKS, false);
            !std::mem::replace(&mut started[task], true)
        };
        let mut worst = if first { &self.first } else { &self.worst }
            .lock()
            .unwrap();
        *worst = (*worst).max(waited);
    }

    /// Records what `peer` did, with the CPU it took since `cpu` started.
    async fn record(
        &self,
        peer: &str,
        run_for: Duration,
        stats: &ServerStats,
        cpu: Cpu,
        out: &mut Samples,
    ) {
        let cycles = self.cycles.load(Ordering::SeqCst).max(1) as f64;
        cpu.record(stats, &format!("contended.{peer}"), cycles, out)
            .await;
        let handoffs = self.handoffs.load(Ordering::SeqCst) as f64;
        out.add(
            format!("contended.{peer}.handoffs"),
            handoffs / run_for.as_secs_f64(),
        );
        out.add(
            format!("contended.{peer}.commands"),
            stats.calls().await as f64 / cycles,
        );
        out.add(
            format!("contended.{peer}.script_us"),
            stats.script_usec().await / cycles,
        );
        let worst = *self.worst.lock().unwrap();
        out.add(
            format!("contended.{peer}.worst_ms"),
            worst.as_secs_f64() * 1e3,
        );
        let first = *self.first.lock().unwrap();
        out.add(
            format!("contended.{peer}.first_ms"),
            first.as_secs_f64() * 1e3,
        );
    }
}

/// Runs `turn(task, turns)` from every task until `run_for` has passed,
/// counting the server's commands from the start, and records what `peer`
/// did as `contended.<peer>.<what>`.
async fn contend<F, Fut>(
    peer: &str,
    run_for: Duration,
    stats: &ServerStats,
    out: &mut Samples,
    turn: F,
) where
    F: Fn(usize, Arc<Turns>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let turns = Turns::new();
    stats.reset().await;
    let cpu = Cpu::start(stats).await;
    let stop = Instant::now() + run_for;
    let handles: Vec<_> = (0..TASKS)
        .map(|task| {
            let (turn, turns) = (turn.clone(), Arc::clone(&turns));
            tokio::spawn(async move {
                while Instant::now() < stop {
                    turn(task, Arc::clone(&turns)).await;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    turns.record(peer, run_for, stats, cpu, out).await;
}

/// Every peer's run on its own key, recorded as `contended.<peer>.<what>`.
pub async fn run(p: &Peers, stats: &ServerStats, run_for: Duration, out: &mut Samples) {
    // tenure: attempt_within waits for the release notification.
    let leases = p.leases((0..TASKS).map(|_| "contended".to_string()));
    contend("tenure", run_for, stats, out, move |task, turns| {
        let leases = Arc::clone(&leases);
        async move {
            let asked = Instant::now();
            let g = leases[task].attempt_within(MAX_WAIT).await.unwrap();
            let g = g.into_guard().unwrap();
            turns.granted(task, asked.elapsed());
            g.release().await.unwrap();
        }
    })
    .await;

    // raw line: the least client of the same FIFO hand-off; same-work line:
    // the least client of tenure's commands.
    for (peer, work) in [("raw-line", Work::Least), ("same-work-line", Work::Same)] {
        let line = Arc::new(RawLine::connect(&p.url, &format!("{peer}:contended"), work).await);
        contend(peer, run_for, stats, out, move |task, turns| {
            let line = Arc::clone(&line);
            async move {
                let turn = TURN.fetch_add(1, Ordering::Relaxed);
                let tok = format!("{}-{turn}", token(task));
                let asked = Instant::now();
                line.acquire(&tok).await;
                turns.granted(task, asked.elapsed());
                line.release(&tok).await;
            }
        })
        .await;
    }

    // in-process: a FIFO mutex and no store, the most hand-offs the pause
    // between turns allows.
    let mutex = Arc::new(tokio::sync::Mutex::new(()));
    contend("in-process", run_for, stats, out, move |task, turns| {
        let mutex = Arc::clone(&mutex);
        async move {
            let asked = Instant::now();
            let _held = mutex.lock().await;
            turns.granted(task, asked.elapsed());
        }
    })
    .await;

    // rslock: its acquire retries after random 0-200 ms delays.
    let rl = Arc::clone(&p.rslock);
    contend("rslock", run_for, stats, out, move |task, turns| {
        let rl = Arc::clone(&rl);
        async move {
            let asked = Instant::now();
            let lock = rl.acquire_no_guard("rslock:contended", TTL).await.unwrap();
            turns.granted(task, asked.elapsed());
            rl.unlock(&lock).await;
        }
    })
    .await;

    // raw: polls every RAW_POLL.
    let raw = p.raw.clone();
    contend("raw", run_for, stats, out, move |task, turns| {
        let raw = raw.clone();
        async move {
            let tok = token(task);
            let asked = Instant::now();
            while !raw.acquire("raw:contended", &tok).await {
                tokio::time::sleep(RAW_POLL).await;
            }
            turns.granted(task, asked.elapsed());
            raw.release("raw:contended", &tok).await;
        }
    })
    .await;

    if let Some(py) = &p.python {
        stats.reset().await;
        let secs = run_for.as_secs_f64().to_string();
        let r = py
            .run(&["contended", &p.url, &TASKS.to_string(), &secs])
            .await;
        let cycles = r["cycles"].max(1.0);
        out.add("contended.redis-py.handoffs", r["handoffs_per_sec"]);
        out.add(
            "contended.redis-py.commands",
            stats.calls().await as f64 / cycles,
        );
        out.add("contended.redis-py.worst_ms", r["worst_wait_ms"]);
        out.add("contended.redis-py.first_ms", r["first_wait_ms"]);
    }
}
