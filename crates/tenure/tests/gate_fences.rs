//! Gate fences (semaphores, read-write leases) never repeat, even when the
//! store forgets its data: every grant's fence is at least the store's clock
//! in microseconds, so a Redis master restarted without persistence (or
//! flushed), or a SQLite file whose gate state was reset, goes on above every
//! fence it handed out before.

#![allow(clippy::unwrap_used, missing_docs)]

mod recipes_common;

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure::{Coordinator, Fence, Lease};

/// The wall clock in microseconds.
fn now_us() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// The three shapes of gate leases on one key each.
fn gates(tenure: &Coordinator) -> Vec<Lease> {
    let sem = tenure.semaphore("g:sem", NonZeroU32::new(2).unwrap());
    let rw = tenure.rw_lease("g:rw").unwrap();
    [sem.unwrap().lease(), rw.read(), rw.write()]
        .into_iter()
        .map(|l| l.watchdog(false).ttl(Duration::from_secs(10)))
        .collect()
}

/// Takes and releases each gate lease `n` times; the fences per lease.
async fn cycle(tenure: &Coordinator, n: usize) -> Vec<Vec<Fence>> {
    let mut all = Vec::new();
    for lease in gates(tenure) {
        let mut fences = Vec::new();
        for _ in 0..n {
            let guard = take(&lease).await;
            fences.push(guard.fence());
            guard.release().await.unwrap();
        }
        all.push(fences);
    }
    all
}

/// Takes `lease`, retrying while a restarted server comes back.
async fn take(lease: &Lease) -> tenure::LeaseGuard {
    for _ in 0..100 {
        match lease.attempt().await {
            Ok(out) => return out.into_guard().expect("the gate is free"),
            Err(e) if e.is_infrastructure() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the store never came back");
}

/// Every fence after the loss is above every fence before it, per gate.
fn assert_increasing(before: &[Vec<Fence>], after: &[Vec<Fence>]) {
    for (b, a) in before.iter().zip(after) {
        let all: Vec<Fence> = b.iter().chain(a).copied().collect();
        for w in all.windows(2) {
            assert!(w[1] > w[0], "fences repeat or go back: {all:?}");
        }
    }
}

/// A fresh gate's first fence is the store's clock (same host) in
/// microseconds, give or take a second.
async fn fences_start_at_the_clock(tenure: &Coordinator) {
    let t0 = now_us();
    for fences in cycle(tenure, 1).await {
        let fence = fences[0].get();
        assert!(fence + 1_000_000 >= t0, "{fence} vs {t0}");
        assert!(fence <= now_us() + 1_000_000, "{fence} vs {t0}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volatile_redis_restart_does_not_restart_gate_fences() {
    let mut fx = recipes_common::redis().await;
    let before = cycle(&fx.tenure, 4).await;
    fx.server.as_mut().unwrap().restart(); // kill -9, start again: every key is gone
    let after = cycle(&fx.tenure, 3).await;
    assert_increasing(&before, &after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_redis_does_not_restart_gate_fences() {
    let fx = recipes_common::redis().await;
    fences_start_at_the_clock(&fx.tenure).await;
    let before = cycle(&fx.tenure, 4).await;
    fx.server.as_ref().unwrap().command("FLUSHALL").unwrap();
    let after = cycle(&fx.tenure, 3).await;
    assert_increasing(&before, &after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_sqlite_file_does_not_restart_gate_fences() {
    let fx = recipes_common::sqlite().await;
    fences_start_at_the_clock(&fx.tenure).await;
    let before = cycle(&fx.tenure, 4).await;
    drop(fx.tenure);
    // The file is lost (restored from an old copy, recreated): a new one.
    let path = fx.dir.as_ref().unwrap().path().join("tenure.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let tenure = Coordinator::connect(&fx.url).await.unwrap();
    let after = cycle(&tenure, 3).await;
    assert_increasing(&before, &after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_memory_store_does_not_restart_gate_fences() {
    let before = cycle(&Coordinator::memory(), 4).await;
    let after = cycle(&Coordinator::memory(), 3).await;
    assert_increasing(&before, &after);
}
