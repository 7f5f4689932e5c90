//! Uncontended acquire + release: every task cycles on a key of its own.
//! Throughput from many tasks, and what one cycle costs the server.

use std::sync::Arc;
use std::time::Duration;

use crate::peers::{Peers, TTL, token};
use crate::raw::Raw;
use crate::samples::Samples;
use crate::server_stats::ServerStats;
use crate::tasks::{Cpu, rate};

/// The task counts of the throughput curve.
pub const TASKS: [usize; 5] = [1, 4, 16, 64, 256];

/// Cycles per second of each peer with `tasks` tasks, recorded as
/// `distinct<tasks>.<peer>` (redis-py, a process of its own, at 16 and 64
/// tasks only).
pub async fn throughput(
    p: &Peers,
    stats: &ServerStats,
    tasks: usize,
    run_for: Duration,
    out: &mut Samples,
) {
    let leases = p.leases((0..tasks).map(|t| format!("d{tasks}:{t}")));
    let cpu = Cpu::start(stats).await;
    let tenure = rate(tasks, run_for, move |t| {
        let leases = Arc::clone(&leases);
        async move {
            let g = leases[t].attempt().await.unwrap().into_guard().unwrap();
            g.release().await.unwrap();
        }
    })
    .await;
    let name = format!("distinct{tasks}.tenure");
    out.add(&name, tenure);
    cpu.record(stats, &name, tenure * run_for.as_secs_f64(), out)
        .await;

    for (peer, raw) in raw_peers(p) {
        let cpu = Cpu::start(stats).await;
        let cycles = rate(tasks, run_for, move |t| {
            let raw = raw.clone();
            async move {
                let (key, token) = (format!("{peer}:d{tasks}:{t}"), token(t));
                assert!(raw.acquire(&key, &token).await);
                raw.release(&key, &token).await;
            }
        })
        .await;
        let name = format!("distinct{tasks}.{peer}");
        out.add(&name, cycles);
        cpu.record(stats, &name, cycles * run_for.as_secs_f64(), out)
            .await;
    }

    let rl = Arc::clone(&p.rslock);
    let rslock = rate(tasks, run_for, move |t| {
        let rl = Arc::clone(&rl);
        async move {
            let key = format!("rslock:d{tasks}:{t}");
            let lock = rl.lock(key.as_str(), TTL).await.unwrap();
            rl.unlock(&lock).await;
        }
    })
    .await;
    out.add(format!("distinct{tasks}.rslock"), rslock);

    if let Some(py) = p.python.as_ref().filter(|_| matches!(tasks, 16 | 64)) {
        let secs = run_for.as_secs_f64().to_string();
        let r = py
            .run(&["distinct", &p.url, &tasks.to_string(), &secs])
            .await;
        out.add(format!("distinct{tasks}.redis-py"), r["cycles_per_sec"]);
    }
}

/// The hand-written client and its *same work* variant, by peer name.
fn raw_peers(p: &Peers) -> [(&'static str, Raw); 2] {
    [("raw", p.raw.clone()), ("same-work", p.raw.same_work())]
}

/// Cycles of the command-count workload.
const CYCLES: usize = 1000;

/// Redis commands per acquire + release of each peer: `CYCLES` sequential
/// cycles on distinct keys, counted by the server; recorded as `cost.<peer>`.
pub async fn cost(p: &Peers, stats: &ServerStats, out: &mut Samples) {
    // Warm up: connections and loaded scripts are not per-cycle costs.
    let warm = p.tenure.lease("cost-warm").watchdog(false).ttl(TTL);
    warm.attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap()
        .release()
        .await
        .unwrap();
    stats.reset().await;
    for i in 0..CYCLES {
        let lease = p.tenure.lease(format!("cost:{i}")).watchdog(false).ttl(TTL);
        let g = lease.attempt().await.unwrap().into_guard().unwrap();
        g.release().await.unwrap();
    }
    per_cycle(stats, "cost.tenure", out).await;

    let tok = token(0);
    for (peer, raw) in raw_peers(p) {
        raw.acquire(&format!("{peer}:cost-warm"), &tok).await;
        raw.release(&format!("{peer}:cost-warm"), &tok).await;
        stats.reset().await;
        for i in 0..CYCLES {
            let key = format!("{peer}:cost:{i}");
            assert!(raw.acquire(&key, &tok).await);
            raw.release(&key, &tok).await;
        }
        per_cycle(stats, &format!("cost.{peer}"), out).await;
    }

    let lock = p.rslock.lock("rslock:cost-warm", TTL).await.unwrap();
    p.rslock.unlock(&lock).await;
    stats.reset().await;
    for i in 0..CYCLES {
        let key = format!("rslock:cost:{i}");
        let lock = p.rslock.lock(key.as_str(), TTL).await.unwrap();
        p.rslock.unlock(&lock).await;
    }
    per_cycle(stats, "cost.rslock", out).await;

    if let Some(py) = &p.python {
        stats.reset().await;
        py.run(&["sequential", &p.url, &CYCLES.to_string()]).await;
        per_cycle(stats, "cost.redis-py", out).await;
    }
}

/// Commands per cycle, and the server's script time per cycle as
/// `<name>.usec` (µs).
async fn per_cycle(stats: &ServerStats, name: &str, out: &mut Samples) {
    out.add(name, stats.calls().await as f64 / CYCLES as f64);
    out.add(
        format!("{name}.usec"),
        stats.script_usec().await / CYCLES as f64,
    );
}
