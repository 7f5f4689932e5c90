//! What a quorum costs: uncontended acquire + release on one key, on one Redis
//! master and on quorums of 3 and 5 masters (all real redis-server processes on
//! loopback), and on 3 masters with one frozen (SIGSTOP) or one slowed by a proxy.
//! Then contention: 20 clients, each running one 50 ms job under one lease with
//! `attempt_within`, on 3 healthy masters and on 3 with one frozen.
//!
//! Prints the median and 99th percentile of each set-up and its ratio to the
//! single master measured in the same run; for contention, the median over three
//! rounds (after one warm-up round) of the whole run's time and of the longest
//! time the lease sat free between two holders. Run with
//! `cargo bench -p tenure --bench quorum`.
//!
//! `quorum count N` (the built bench binary, e.g. under
//! `valgrind --tool=callgrind`) runs only N uncontended acquire + release
//! cycles on a quorum of 3, on one thread: the client's instructions per
//! cycle are the difference of two such runs divided by the difference of
//! their N (the redis-servers are other processes, not counted).

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::Coordinator;
use tenure::quorum::{QuorumOptions, QuorumStore};
use tenure::redis::{RedisOptions, RedisStore};
use tenure_test::{Proxy, RedisServer};
use tokio::time::Instant;

const ROUNDS: usize = 2000;

/// Median and p99 of acquire + release, after a warm-up.
async fn measure(tenure: &Coordinator) -> (Duration, Duration) {
    let lease = tenure
        .lease("bench")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    for _ in 0..100 {
        let g = lease.attempt().await.unwrap().into_guard().unwrap();
        g.release().await.unwrap();
    }
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let g = lease.attempt().await.unwrap().into_guard().unwrap();
        g.release().await.unwrap();
        times.push(start.elapsed());
    }
    times.sort();
    (times[ROUNDS / 2], times[ROUNDS * 99 / 100])
}

const CONTENDERS: usize = 20;
const JOB: Duration = Duration::from_millis(50);

/// One contention round: every client runs one job under the lease. Returns the
/// round's time and the longest gap between a release and the next grant.
async fn contend(clients: &[Coordinator], key: &str) -> (Duration, Duration) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in clients {
        let lease = w
            .lease(key.to_string())
            .watchdog(false)
            .ttl(Duration::from_secs(10));
        let (spans, barrier) = (Arc::clone(&spans), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let guard = lease
                .attempt_within(Duration::from_secs(120))
                .await
                .unwrap()
                .into_guard()
                .unwrap();
            let got = Instant::now();
            tokio::time::sleep(JOB).await;
            let done = Instant::now();
            guard.release().await.unwrap();
            spans.lock().unwrap().push((got, done));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = start.elapsed();
    let mut spans = spans.lock().unwrap().clone();
    spans.sort();
    let gap = spans
        .windows(2)
        .map(|p| p[1].0.saturating_duration_since(p[0].1))
        .max()
        .unwrap_or_default();
    (total, gap)
}

fn clients(urls: &[String]) -> Vec<Coordinator> {
    (0..CONTENDERS)
        .map(|_| {
            Coordinator::with_backend(QuorumStore::new(urls, QuorumOptions::default()).unwrap())
        })
        .collect()
}

/// Median round time and median longest gap over three rounds. Long-lived
/// clients get a warm-up round (which also lets each notice a frozen node
/// once); `fresh` clients are new handles every round, like one `tenure run`
/// process per job.
async fn contention(urls: &[String], key: &str, fresh: bool) -> (Duration, Duration) {
    let long_lived = clients(urls);
    if !fresh {
        contend(&long_lived, &format!("{key}-warm-up")).await;
    }
    let mut totals = Vec::new();
    let mut gaps = Vec::new();
    for round in 0..3 {
        let round_clients = if fresh {
            clients(urls)
        } else {
            long_lived.clone()
        };
        let (t, g) = contend(&round_clients, &format!("{key}-{round}")).await;
        totals.push(t);
        gaps.push(g);
    }
    totals.sort();
    gaps.sort();
    (totals[1], gaps[1])
}

fn quorum(urls: Vec<String>) -> Coordinator {
    let options = QuorumOptions::default().node_timeout(Duration::from_millis(500));
    Coordinator::with_backend(QuorumStore::new(urls, options).unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("count") {
        let n = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(1000);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(count(n));
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run());
}

/// `n` uncontended cycles on a quorum of 3 and nothing else.
async fn count(n: usize) {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let tenure = quorum(servers.iter().map(RedisServer::url).collect());
    let lease = tenure
        .lease("count")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    for _ in 0..n {
        let g = lease.attempt().await.unwrap().into_guard().unwrap();
        g.release().await.unwrap();
    }
    println!("{n} cycles");
}

async fn run() {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let single = Coordinator::with_backend(
        RedisStore::connect(&urls[0], RedisOptions::default())
            .await
            .unwrap(),
    );
    let (base, base99) = measure(&single).await;
    println!("uncontended acquire + release, median (p99) of {ROUNDS}:");
    println!("  one master              {base:>10.2?} ({base99:.2?})  1.00x");
    let report = |name: &str, (m, p): (Duration, Duration)| {
        println!(
            "  {name:<23} {m:>10.2?} ({p:.2?})  {:.2}x",
            m.as_secs_f64() / base.as_secs_f64()
        );
    };
    report("quorum of 3", measure(&quorum(urls[..3].to_vec())).await);
    report("quorum of 5", measure(&quorum(urls.clone())).await);

    let proxy = Proxy::start(&servers[2].addr());
    let slow = quorum(vec![urls[0].clone(), urls[1].clone(), proxy.url()]);
    measure(&slow).await; // connect through the proxy while it is fast
    proxy.delay(Duration::from_millis(50));
    report("3, one 50 ms slower", measure(&slow).await);

    let frozen = quorum(urls[..3].to_vec());
    measure(&frozen).await;
    servers[2].pause();
    report("3, one frozen", measure(&frozen).await);
    servers[2].resume();

    println!(
        "contention: {CONTENDERS} clients x one {JOB:?} job, default node timeout, \
         median of 3 rounds: whole run (longest time the lease sat free)"
    );
    for (fresh, what) in [(false, "long-lived"), (true, "fresh")] {
        let (t, g) = contention(&urls[..3], &format!("contended-{what}"), fresh).await;
        println!("  3, {what:<10} clients   {t:>10.2?} ({g:.2?})");
        servers[2].pause();
        let (t, g) = contention(&urls[..3], &format!("frozen-{what}"), fresh).await;
        println!("  3, {what:<10}, 1 frozen {t:>10.2?} ({g:.2?})");
        servers[2].resume();
    }
}
