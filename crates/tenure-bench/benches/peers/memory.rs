//! Server memory per key: `used_memory` (`INFO memory`) before and after
//! holding N lease keys, and after releasing them (the fence counters stay,
//! with their retention); the same for N limiter keys, and after their state
//! expired. On a redis-server of its own, so nothing else is counted.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tenure::Coordinator;
use tenure::limit::{Algorithm, Quota};
use tenure_test::RedisServer;

use crate::samples::Samples;
use crate::server_stats::ServerStats;

/// Tasks that take the keys.
const TASKS: usize = 64;

/// Records `memory.lease.<n>.{held,after}` (bytes per key while held and
/// after release), `memory.lease.<n>.left` (keys left per lease),
/// `memory.fence_retention_s`, and `memory.limit.<n>.{held,after,left}`.
pub async fn run(sizes: &[usize], out: &mut Samples) {
    let mut server = RedisServer::start();
    let stats = ServerStats::connect(&server.url()).await;
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    for &n in sizes {
        leases(&tenure, &stats, n, out).await;
        limits(&tenure, &mut server, &stats, n, out).await;
    }
}

/// Splits `0..n` over `TASKS` tasks running `each(i)`; returns their results.
async fn spread<T, F, Fut>(n: usize, each: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = T> + Send,
{
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let each = each.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for i in (t..n).step_by(TASKS) {
                    got.push(each(i).await);
                }
                got
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

async fn leases(tenure: &Coordinator, stats: &ServerStats, n: usize, out: &mut Samples) {
    stats.flush().await;
    // Loads the scripts: not a per-key cost.
    let warm = tenure.lease("mem-warm").watchdog(false);
    warm.attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap()
        .release()
        .await
        .unwrap();
    stats.flush().await;
    let before = stats.used_memory().await;
    let t = tenure.clone();
    let guards = spread(n, move |i| {
        let lease = t
            .lease(format!("mem:{i}"))
            .watchdog(false)
            .ttl(Duration::from_secs(600));
        async move { lease.attempt().await.unwrap().into_guard().unwrap() }
    })
    .await;
    let held = stats.used_memory().await;
    let fence = format!("tenure:{{{}}}:fence", guards[0].key());
    let guards = Arc::new(std::sync::Mutex::new(
        guards.into_iter().map(Some).collect::<Vec<_>>(),
    ));
    spread(n, move |i| {
        let g = guards.lock().unwrap()[i].take().unwrap();
        async move {
            g.release().await.unwrap();
        }
    })
    .await;
    let after = stats.used_memory().await;
    let per = |m: f64| (m - before) / n as f64;
    out.add(format!("memory.lease.{n}.held"), per(held));
    out.add(format!("memory.lease.{n}.after"), per(after));
    out.add(
        format!("memory.lease.{n}.left"),
        stats.dbsize().await as f64 / n as f64,
    );
    out.add(
        "memory.fence_retention_s",
        stats.pttl(&fence).await as f64 / 1e3,
    );
}

/// Past the life of every limiter key of a quota of 10 per hour: the
/// server's clock is jumped this far to expire them.
const LIMIT_EXPIRY: u32 = 2 * 3600;

async fn limits(
    tenure: &Coordinator,
    server: &mut RedisServer,
    stats: &ServerStats,
    n: usize,
    out: &mut Samples,
) {
    stats.flush().await;
    // Per hour: no key expires while the others are written.
    let limiter = tenure.limiter(
        Quota::per_hour(NonZeroU32::new(10).unwrap()),
        Algorithm::Gcra,
    );
    let _ = limiter.check("mem-warm").await.unwrap();
    stats.flush().await;
    let before = stats.used_memory().await;
    let l = limiter.clone();
    spread(n, move |i| {
        let l = l.clone();
        async move {
            let _ = l.check(&format!("lim:{i}")).await.unwrap();
        }
    })
    .await;
    let held = stats.used_memory().await;
    // Every key's TTL runs out (the harness's clock jump: each TTL shortened
    // by LIMIT_EXPIRY, the keys it ends deleted as their expiry would).
    server.jump_clock(LIMIT_EXPIRY).unwrap();
    let after = stats.used_memory().await;
    let per = |m: f64| (m - before) / n as f64;
    out.add(format!("memory.limit.{n}.held"), per(held));
    out.add(format!("memory.limit.{n}.after"), per(after));
    out.add(
        format!("memory.limit.{n}.left"),
        stats.dbsize().await as f64 / n as f64,
    );
}
