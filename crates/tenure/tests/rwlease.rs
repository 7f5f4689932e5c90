//! Read-write leases on every store: readers share, a writer is alone, a
//! waiting writer is not starved by a stream of readers, fences order
//! writers above everything before them; and semaphore waiters served in
//! arrival order.

#![allow(clippy::unwrap_used, missing_docs)]

mod recipes_common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use recipes_common::Fixture;
use tenure::{Coordinator, Error, Lease};

/// Long enough that no guard is lost on a loaded machine; renewed anyway.
const TTL: Duration = Duration::from_secs(10);

/// Who holds the key now, by the holders' own account.
#[derive(Default)]
struct Inside {
    readers: AtomicI64,
    writers: AtomicI64,
    /// The highest fence any holder was granted, and the last writer's.
    highest: AtomicU64,
    last_writer: AtomicU64,
}

impl Inside {
    fn enter(&self, write: bool, fence: u64) {
        if write {
            assert_eq!(
                self.writers.fetch_add(1, Ordering::SeqCst),
                0,
                "two writers"
            );
            assert_eq!(
                self.readers.load(Ordering::SeqCst),
                0,
                "a writer with readers"
            );
            let highest = self.highest.fetch_max(fence, Ordering::SeqCst);
            assert!(fence > highest, "writer fence {fence} not above {highest}");
            self.last_writer.store(fence, Ordering::SeqCst);
        } else {
            self.readers.fetch_add(1, Ordering::SeqCst);
            assert_eq!(
                self.writers.load(Ordering::SeqCst),
                0,
                "a reader with a writer"
            );
            let writer = self.last_writer.load(Ordering::SeqCst);
            assert!(
                fence > writer,
                "reader fence {fence} not above writer's {writer}"
            );
            self.highest.fetch_max(fence, Ordering::SeqCst);
        }
    }

    fn leave(&self, write: bool) {
        let count = if write { &self.writers } else { &self.readers };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Holds `lease` `rounds` times for `hold` each, checking who else is in.
async fn hold_rounds(lease: Lease, write: bool, rounds: u32, hold: Duration, inside: Arc<Inside>) {
    for _ in 0..rounds {
        let guard = lease
            .acquire_timeout(Duration::from_secs(60))
            .await
            .expect("granted within a minute");
        inside.enter(write, guard.fence().get());
        tokio::time::sleep(hold).await;
        inside.leave(write);
        guard.release().await.unwrap();
    }
}

/// A second handle on the same store, as another client would have.
async fn client(fx: &Fixture) -> Coordinator {
    if fx.url.starts_with("memory:") {
        return fx.tenure.clone();
    }
    Coordinator::connect(&fx.url).await.unwrap()
}

async fn readers_and_writers_never_overlap(fx: &Fixture) {
    let inside = Arc::new(Inside::default());
    let mut tasks = Vec::new();
    for i in 0..9 {
        let rw = client(fx).await.rw_lease("rw:overlap").unwrap();
        let write = i % 3 == 0;
        let lease = if write { rw.write() } else { rw.read() }.ttl(TTL);
        let hold = Duration::from_millis(5 + (i * 3) % 11);
        tasks.push(tokio::spawn(hold_rounds(
            lease,
            write,
            6,
            hold,
            Arc::clone(&inside),
        )));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let status = fx
        .tenure
        .rw_lease("rw:overlap")
        .unwrap()
        .status()
        .await
        .unwrap();
    assert!(status.holders.is_empty(), "{status:?}");
    assert!(status.waiting.is_empty(), "{status:?}");
}

async fn a_waiting_writer_is_not_starved_by_readers(fx: &Fixture) {
    let rw = fx.tenure.rw_lease("rw:starve").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    // Four readers that overlap: the key is never free of readers.
    for _ in 0..4 {
        let read = client(fx)
            .await
            .rw_lease("rw:starve")
            .unwrap()
            .read()
            .ttl(TTL);
        let stop = Arc::clone(&stop);
        readers.push(tokio::spawn(async move {
            let mut rounds = 0_u32;
            while !stop.load(Ordering::SeqCst) {
                let guard = read.acquire_timeout(Duration::from_secs(60)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(60)).await;
                guard.release().await.unwrap();
                rounds += 1;
            }
            rounds
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let writer = rw
        .write()
        .ttl(TTL)
        .acquire_timeout(Duration::from_secs(20))
        .await
        .expect("the writer gets in while readers keep coming");
    let waited = started.elapsed();
    assert!(
        rw.status().await.unwrap().holders.len() == 1,
        "the writer is alone"
    );
    writer.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    let mut rounds = 0;
    for r in readers {
        rounds += r.await.unwrap();
    }
    // The readers held for 60 ms at a time: the writer waited for the
    // readers in before it, not for the stream.
    assert!(waited < Duration::from_secs(5), "writer waited {waited:?}");
    assert!(rounds >= 4, "the readers ran ({rounds} rounds)");
}

async fn semaphore_waiters_are_served_in_arrival_order(fx: &Fixture) {
    let n = NonZeroU32::new(1).unwrap();
    let sem = fx.tenure.semaphore("sem:fifo", n).unwrap();
    let holder = sem.lease().ttl(TTL).acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let lease = client(fx)
            .await
            .semaphore("sem:fifo", n)
            .unwrap()
            .lease()
            .ttl(TTL);
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = lease
                .acquire_timeout(Duration::from_secs(60))
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            guard.release().await.unwrap();
        }));
        // The next waiter arrives once this one stands in line.
        let deadline = Instant::now() + Duration::from_secs(10);
        while sem.status().await.unwrap().waiting.len() < i + 1 {
            assert!(Instant::now() < deadline, "waiter {i} never stood in line");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // A newcomer's single attempt does not pass the line.
    assert!(sem.lease().ttl(TTL).try_acquire().await.unwrap().is_none());
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(sem.held().await.unwrap(), 0);
}

async fn a_single_attempt_reports_readers_and_writers(fx: &Fixture) {
    let rw = fx.tenure.rw_lease("rw:try").unwrap();
    let r1 = rw.read().ttl(TTL).try_acquire().await.unwrap().unwrap();
    let r2 = rw
        .read()
        .ttl(TTL)
        .label("r2")
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    assert!(rw.write().ttl(TTL).try_acquire().await.unwrap().is_none());
    let status = rw.status().await.unwrap();
    assert_eq!(status.holders.len(), 2, "{status:?}");
    assert!(
        status
            .holders
            .iter()
            .all(|h| h.mode == tenure::gate::Mode::Read)
    );
    assert!(
        status.holders.iter().any(|h| h
            .holder
            .as_ref()
            .is_some_and(|h| h.label.as_deref() == Some("r2"))),
        "{status:?}"
    );
    let read_fence = r2.fence();
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = rw.write().ttl(TTL).try_acquire().await.unwrap().unwrap();
    assert!(w.fence() > read_fence);
    assert!(rw.read().ttl(TTL).try_acquire().await.unwrap().is_none());
    w.release().await.unwrap();
}

on_store!(memory: readers_and_writers_never_overlap, a_waiting_writer_is_not_starved_by_readers,
    semaphore_waiters_are_served_in_arrival_order, a_single_attempt_reports_readers_and_writers);
on_store!(sqlite: readers_and_writers_never_overlap, a_waiting_writer_is_not_starved_by_readers,
    semaphore_waiters_are_served_in_arrival_order, a_single_attempt_reports_readers_and_writers);
on_store!(redis: readers_and_writers_never_overlap, a_waiting_writer_is_not_starved_by_readers,
    semaphore_waiters_are_served_in_arrival_order, a_single_attempt_reports_readers_and_writers);
on_store!(cluster: readers_and_writers_never_overlap, a_waiting_writer_is_not_starved_by_readers,
    semaphore_waiters_are_served_in_arrival_order, a_single_attempt_reports_readers_and_writers);
#[cfg(feature = "etcd")]
on_store!(etcd: readers_and_writers_never_overlap, a_waiting_writer_is_not_starved_by_readers,
    semaphore_waiters_are_served_in_arrival_order, a_single_attempt_reports_readers_and_writers);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_refuses_read_write_leases_naming_the_alternative() {
    let fx = recipes_common::quorum().await;
    let e = fx.tenure.rw_lease("rw:q").unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what: "read-write leases", instead, .. } if instead.contains("SQLite")),
        "{e}"
    );
}
