//! Waiting-line test bodies shared by the stores that keep a line (one Redis
//! master, etcd, SQLite). Each store's test file says how to count the places
//! in its line (`count`) and how to start a waiter in another process.

#![allow(clippy::unwrap_used, dead_code)]

use std::future::Future;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::{Attempt, Coordinator, Fence, Lease, LeaseGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// `tenure`'s lease of `key` (a 30 s TTL, no watchdog) and a guard that
/// holds it.
pub async fn held(tenure: &Coordinator, key: &str) -> (Lease, LeaseGuard) {
    let lease = tenure
        .lease(key)
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let holder = lease.attempt().await.unwrap().into_guard().unwrap();
    (lease, holder)
}

/// A wait of up to a minute for `lease`, in a task of its own.
pub fn spawn_wait(lease: &Lease) -> JoinHandle<tenure::Result<Attempt>> {
    let lease = lease.clone();
    tokio::spawn(async move { lease.attempt_within(Duration::from_secs(60)).await })
}

/// Waits (up to 10 s) until `count` reports `n` places in line.
pub async fn until_in_line<F, Fut>(count: &F, n: usize)
where
    F: Fn() -> Fut,
    Fut: Future<Output = usize>,
{
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let now = count().await;
        if now == n {
            return;
        }
        assert!(Instant::now() < give_up, "{now} in line, not {n}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The guard a waiter's task ended with.
async fn guard_of(wait: JoinHandle<tenure::Result<Attempt>>) -> LeaseGuard {
    wait.await.unwrap().unwrap().into_guard().expect("acquired")
}

/// Two waiters behind `holder` (a guard of `lease` with a long TTL); the first
/// wait is dropped, which leaves the line at once, so the release hands the
/// lease to the second long before the cancelled waiter's TTL.
pub async fn a_cancelled_waiter_leaves_the_line<F, Fut>(lease: &Lease, holder: LeaseGuard, count: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = usize>,
{
    let first = spawn_wait(lease);
    until_in_line(&count, 1).await;
    let second = spawn_wait(lease);
    until_in_line(&count, 2).await;
    // Dropping the first wait leaves the line (in the background).
    first.abort();
    until_in_line(&count, 1).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let guard = guard_of(second).await;
    let waited = released.elapsed();
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    guard.release().await.unwrap();
}

/// When a killed waiter's place stops counting.
#[derive(Debug, Clone, Copy)]
pub enum DeadPlace {
    /// A release past the place's TTL skips it: released after the TTL, the
    /// next waiter gets the lease within half of it.
    SkippedAfter(Duration),
    /// The place goes with its own TTL even while it is first in line: released
    /// at once, the next waiter gets the lease within the given time of the kill.
    ExpiresWithin(Duration),
    /// A release does not read the clock for the first place: released past
    /// the place's TTL (the first field), the dead waiter is handed the lease
    /// for the claim window, and the next waiter gets it within the second
    /// field of the release.
    HandedOverAfter(Duration, Duration),
}

/// `killed` is a child process standing in line for `lease` behind `holder`;
/// it is SIGKILLed (so it cannot leave the line), a second waiter stands
/// behind it, and the second gets the lease once the dead place no longer
/// counts; no place is left afterwards.
pub async fn a_killed_waiter_is_skipped<F, Fut>(
    lease: &Lease,
    holder: LeaseGuard,
    mut killed: Child,
    dead: DeadPlace,
    count: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = usize>,
{
    until_in_line(&count, 1).await;
    killed.kill().unwrap(); // SIGKILL: the child cannot leave the line
    killed.wait().unwrap();
    let since_kill = Instant::now();
    let second = spawn_wait(lease);
    until_in_line(&count, 2).await;
    if let DeadPlace::SkippedAfter(ttl) | DeadPlace::HandedOverAfter(ttl, _) = dead {
        // Past its TTL the place is dead: the release hands the lease to the
        // next waiter at once, not to one that will never claim it — or, where
        // the release does not read the clock, within the bound.
        tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    }
    let released = Instant::now();
    holder.release().await.unwrap();
    let guard = guard_of(second).await;
    match dead {
        DeadPlace::SkippedAfter(ttl) => {
            let waited = released.elapsed();
            assert!(waited < ttl / 2, "the next waiter waited {waited:?}");
        }
        DeadPlace::HandedOverAfter(_, limit) => {
            let waited = released.elapsed();
            assert!(waited < limit, "the next waiter waited {waited:?}");
        }
        DeadPlace::ExpiresWithin(limit) => {
            let waited = since_kill.elapsed();
            assert!(waited < limit, "the next waiter waited {waited:?}");
        }
    }
    assert_eq!(count().await, 0, "the dead place is gone");
    guard.release().await.unwrap();
}

/// A wait of up to `within` for `lease`, held by `holder`, ends without the
/// lease and leaves no place in line; once `holder` is released, `gone` says
/// the lease key is deleted.
pub async fn a_waiter_whose_wait_ends_leaves_the_line<F, Fut, G, GFut>(
    lease: &Lease,
    holder: LeaseGuard,
    within: Duration,
    count: F,
    gone: G,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = usize>,
    G: FnOnce() -> GFut,
    GFut: Future<Output = bool>,
{
    a_wait_that_ends_leaves_no_place(lease, within, count).await;
    holder.release().await.unwrap();
    assert!(gone().await, "the release deleted the key");
}

/// A wait of up to `within` for `lease` (held by someone else) ends without
/// the lease, and `count` reports no place left in line.
pub async fn a_wait_that_ends_leaves_no_place<F, Fut>(lease: &Lease, within: Duration, count: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = usize>,
{
    let out = lease.attempt_within(within).await.unwrap();
    assert!(!out.is_acquired());
    assert_eq!(count().await, 0);
}

/// The turns the waiters of a [`Line`] got: (place in line, fence).
pub type Turns = Arc<Mutex<Vec<(usize, Fence)>>>;

/// Waiters standing in line, in the order they stood.
pub struct Line {
    /// The waiters' tasks, first in line first.
    pub waiters: Vec<JoinHandle<()>>,
    /// The turns they got, in the order they got them.
    pub turns: Turns,
}

/// Starts `n` waiters on `lease` (each waiting up to `within`) one after the
/// other, each once the one before it stands in line (`count`). Each one
/// that gets the lease passes its guard through `turn` (a check of the
/// store's own), records its place and fence, and releases it.
pub async fn stand_in_line<F, Fut, T, TFut>(
    lease: &Lease,
    n: usize,
    within: Duration,
    count: &F,
    turn: T,
) -> Line
where
    F: Fn() -> Fut,
    Fut: Future<Output = usize>,
    T: Fn(LeaseGuard) -> TFut + Clone + Send + 'static,
    TFut: Future<Output = LeaseGuard> + Send,
{
    let turns = Turns::default();
    let mut waiters = Vec::new();
    for i in 0..n {
        let (lease, turns, turn) = (lease.clone(), Arc::clone(&turns), turn.clone());
        waiters.push(tokio::spawn(async move {
            let out = lease.attempt_within(within).await.unwrap();
            let guard = turn(out.into_guard().expect("acquired")).await;
            turns.lock().unwrap().push((i, guard.fence()));
            guard.release().await.unwrap();
        }));
        until_in_line(count, i + 1).await;
    }
    Line { waiters, turns }
}

impl Line {
    /// Releases `holder` and waits for every waiter: they got the lease in
    /// the order they stood in line, with rising fences.
    pub async fn served_in_order(self, holder: LeaseGuard) {
        let n = self.waiters.len();
        holder.release().await.unwrap();
        for w in self.waiters {
            w.await.unwrap();
        }
        let turns = self.turns.lock().unwrap().clone();
        let order: Vec<usize> = turns.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, (0..n).collect::<Vec<_>>(), "turns: {turns:?}");
        assert!(
            turns.windows(2).all(|w| w[0].1 < w[1].1),
            "fences rise with the turns: {turns:?}"
        );
    }
}

/// Connects to a store named `redis:URL`, `sqlite:PATH` or `etcd:URL`.
pub async fn connect(store: &str) -> Coordinator {
    let (kind, at) = store.split_once(':').unwrap();
    match kind {
        "redis" => Coordinator::connect(at).await.unwrap(),
        "sqlite" => Coordinator::sqlite(at).await.unwrap(),
        #[cfg(feature = "etcd")]
        "etcd" => {
            let options = tenure::etcd::EtcdOptions::default().timeout(Duration::from_secs(2));
            Coordinator::with_backend(tenure::etcd::EtcdStore::connect(at, options).await.unwrap())
        }
        _ => panic!("unknown store {store}"),
    }
}
