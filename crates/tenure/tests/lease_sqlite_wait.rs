//! Waiting on the SQLite store without polling: a release wakes waiters at
//! once, in this process (the per-file notifier) and in others (inotify on
//! the database's directory), although the poll interval is set to an hour;
//! and waiting is first-in-first-out (table `tenure_waiters`).

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tenure::Coordinator;
use tenure::lease::store::{
    AcquireReply, ExtendReply, LeaseStore, OwnerToken, QueuePlace, ReleaseWatch,
};
use tenure::lease::{HolderInfo, LeaseStatus, ReleaseOutcome};
use tenure::sqlite::{SqliteOptions, SqliteStore};
use tokio::time::Instant;

mod fifo_common;

/// Longer than any test: a waiter woken within it was woken by a change.
const HOUR: Duration = Duration::from_secs(3600);

async fn open(path: &Path) -> SqliteStore {
    let options = SqliteOptions::default().poll_interval(HOUR);
    SqliteStore::open(path, options).await.unwrap()
}

/// A store that counts the acquire attempts and looks made through it (and
/// passes everything on to the real SQLite store).
#[derive(Debug)]
struct Counting {
    inner: SqliteStore,
    attempts: Arc<AtomicU32>,
}

#[async_trait]
impl LeaseStore for Counting {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> tenure::Result<AcquireReply> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(key, token, ttl, holder).await
    }
    async fn extend(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> tenure::Result<ExtendReply> {
        self.inner.extend(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &OwnerToken) -> tenure::Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn status(&self, key: &str) -> tenure::Result<LeaseStatus> {
        self.inner.status(key).await
    }
    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        self.inner.watch_releases(key).await
    }
    async fn wait_turn(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> tenure::Result<(AcquireReply, Option<QueuePlace>)> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.wait_turn(key, token, ttl, holder, place).await
    }
    async fn leave_line(
        &self,
        key: &str,
        token: &OwnerToken,
        place: Option<&QueuePlace>,
    ) -> tenure::Result<ReleaseOutcome> {
        self.inner.leave_line(key, token, place).await
    }
    async fn watch_turn(&self, key: &str, token: &OwnerToken) -> ReleaseWatch {
        self.inner.watch_turn(key, token).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The places in line for `key`, as `status` counts them.
async fn in_line(tenure: &Coordinator, key: &str) -> usize {
    let waiters = tenure.status(key).await.unwrap().waiters;
    usize::try_from(waiters.expect("SQLite counts its waiting line")).unwrap()
}

/// Waits (up to 10 s) until `n` waiters stand in line for `key`.
async fn until_in_line(tenure: &Coordinator, key: &str, n: usize) {
    fifo_common::until_in_line(&|| in_line(tenure, key), n).await;
}

/// `n` tasks that each wait for `lease` (up to a minute) and release it as
/// soon as they hold it.
fn spawn_waiters(
    lease: &tenure::lease::Lease,
    n: usize,
) -> Vec<tokio::task::JoinHandle<tenure::Result<ReleaseOutcome>>> {
    (0..n)
        .map(|_| {
            let lease = lease.clone();
            tokio::spawn(async move {
                let attempt = lease.attempt_within(Duration::from_secs(60)).await;
                attempt.unwrap().into_guard().unwrap().release().await
            })
        })
        .collect()
}

/// A child process running one of the `#[ignore]`d tests below on `path`.
fn child(test: &str, path: &Path, ttl: Duration) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TENURE_SQLITE_CHILD_DB", path)
        .env("TENURE_SQLITE_CHILD_TTL_MS", ttl.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The next line of the child's stdout that starts with `tag`, split.
fn expect_line(out: &mut impl BufRead, tag: &str) -> Vec<String> {
    let (mut line, mut seen) = (String::new(), String::new());
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "the child ended before {tag:?}; it wrote: {seen}");
        seen.push_str(&line);
        // libtest may print "test NAME ... " before the child's own output.
        if let Some(at) = line.find(tag) {
            return line[at + tag.len()..]
                .split_whitespace()
                .map(String::from)
                .collect();
        }
    }
}

fn child_env() -> Option<(PathBuf, Duration)> {
    let path = std::env::var_os("TENURE_SQLITE_CHILD_DB")?;
    let ttl: u64 = std::env::var("TENURE_SQLITE_CHILD_TTL_MS")
        .ok()?
        .parse()
        .ok()?;
    Some((path.into(), Duration::from_millis(ttl)))
}

/// Child: holds the lease until its stdin closes, then releases it.
#[tokio::test]
#[ignore = "run as a child process by the tests below"]
async fn holder_child() {
    let Some((path, ttl)) = child_env() else {
        return;
    };
    let tenure = Coordinator::with_backend(open(&path).await);
    let guard = tenure
        .lease("k")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap();
    let guard = guard.into_guard().expect("the lease is free");
    println!("held");
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
    println!("releasing {}", wall_ns());
    guard.release().await.unwrap();
}

/// Child: waits for the lease (counting its attempts), reports when it got
/// it, and releases it.
#[tokio::test]
#[ignore = "run as a child process by the tests below"]
async fn waiter_child() {
    let Some((path, ttl)) = child_env() else {
        return;
    };
    let attempts = Arc::new(AtomicU32::new(0));
    let store = Counting {
        inner: open(&path).await,
        attempts: Arc::clone(&attempts),
    };
    let tenure = Coordinator::with_backend(store);
    let out = tenure
        .lease("k")
        .watchdog(false)
        .ttl(ttl)
        .attempt_within(Duration::from_secs(60))
        .await
        .unwrap();
    let acquired = wall_ns();
    let guard = out.into_guard().expect("acquired within 60 s");
    println!("acquired {acquired} {}", attempts.load(Ordering::SeqCst));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_another_process_wakes_a_watcher_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let store = open(&path).await;
    let mut holder = child("holder_child", &path, Duration::from_secs(60));
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    expect_line(&mut out, "held");
    let mut watch = store.watch_releases("k").await;
    assert!(watch.is_push(), "releases are pushed, not polled");
    drop(holder.stdin.take()); // the child releases now
    let woken = tokio::time::timeout(Duration::from_secs(20), watch.wait(HOUR)).await;
    assert_eq!(
        woken,
        Ok(true),
        "the other process's release woke the watch"
    );
    assert!(!store.status("k").await.unwrap().held);
    assert!(holder.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_process_gets_the_lease_without_polling() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let tenure = Coordinator::with_backend(open(&path).await);
    let guard = tenure
        .lease("k")
        .watchdog(false)
        .ttl(Duration::from_secs(60))
        .attempt()
        .await;
    let guard = guard.unwrap().into_guard().unwrap();
    let mut waiter = child("waiter_child", &path, Duration::from_secs(60));
    until_in_line(&tenure, "k", 1).await;
    // Held for a while: a polling waiter would look a dozen times meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let released = wall_ns();
    guard.release().await.unwrap();
    let mut out = BufReader::new(waiter.stdout.take().unwrap());
    let got = expect_line(&mut out, "acquired");
    assert!(waiter.wait().unwrap().success());
    let (acquired, attempts): (u128, u32) = (got[0].parse().unwrap(), got[1].parse().unwrap());
    let latency = Duration::from_nanos(u64::try_from(acquired.saturating_sub(released)).unwrap());
    // The waiter looks on its first refusal, when it stands in line, every
    // 250 ms while it waits (the heartbeat that keeps its place) and when
    // woken: 12 heartbeats in those 3 s, and the release wakes it at once.
    assert!(attempts <= 20, "{attempts} attempts: the waiter polled");
    assert!(
        latency < Duration::from_millis(500),
        "woken {latency:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_this_process_wakes_a_waiter_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    // Two handles on one file, as two libraries of one program would have.
    let (a, b) = (open(&path).await, open(&path).await);
    let attempts = Arc::new(AtomicU32::new(0));
    let holder = Coordinator::with_backend(a);
    let waiter = Coordinator::with_backend(Counting {
        inner: b,
        attempts: Arc::clone(&attempts),
    });
    let guard = holder
        .lease("k")
        .watchdog(false)
        .ttl(Duration::from_secs(60))
        .attempt()
        .await;
    let guard = guard.unwrap().into_guard().unwrap();
    let wait = tokio::spawn(async move {
        let out = waiter
            .lease("k")
            .watchdog(false)
            .attempt_within(Duration::from_secs(60))
            .await;
        (out.unwrap().into_guard().expect("acquired"), Instant::now())
    });
    until_in_line(&holder, "k", 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (got, at) = wait.await.unwrap();
    let latency = at.saturating_duration_since(released);
    let attempts = attempts.load(Ordering::SeqCst);
    // Heartbeats (every 250 ms) are all the looks before the release.
    assert!(attempts <= 20, "{attempts} attempts: the waiter polled");
    assert!(
        latency < Duration::from_millis(500),
        "woken {latency:?} after the release"
    );
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lease_in_the_order_they_stood_in_line() {
    let dir = tempfile::tempdir().unwrap();
    let tenure = Coordinator::with_backend(open(&dir.path().join("w.db")).await);
    let (lease, holder) = fifo_common::held(&tenure, "k").await;
    const WAITERS: usize = 6;
    let count = || in_line(&tenure, "k");
    let within = Duration::from_secs(30);
    let line = fifo_common::stand_in_line(
        &lease,
        WAITERS,
        within,
        &count,
        |guard| async move { guard },
    )
    .await;
    line.served_in_order(holder).await;
    let status = tenure.status("k").await.unwrap();
    assert!(!status.held, "the last waiter's release freed it");
    assert_eq!(status.waiters, Some(0), "nobody is left in line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_or_is_cancelled_leaves_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let tenure = Coordinator::with_backend(open(&dir.path().join("w.db")).await);
    let (lease, holder) = fifo_common::held(&tenure, "k").await;
    let within = Duration::from_millis(300);
    fifo_common::a_wait_that_ends_leaves_no_place(&lease, within, || in_line(&tenure, "k")).await;
    fifo_common::a_cancelled_waiter_leaves_the_line(&lease, holder, || in_line(&tenure, "k")).await;
}

/// How long a place lives without its waiter's heartbeat.
const PLACE_LIFETIME: Duration = Duration::from_secs(1);

/// The TTL of the waiter that is killed.
const KILLED_TTL: Duration = Duration::from_millis(800);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_is_skipped_after_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let tenure = Coordinator::with_backend(open(&path).await);
    let (lease, holder) = fifo_common::held(&tenure, "k").await;
    let killed = child("waiter_child", &path, KILLED_TTL);
    // A place lives a second without a look (the waiter's heartbeat), not
    // its waiter's TTL.
    let dead = fifo_common::DeadPlace::SkippedAfter(PLACE_LIFETIME);
    fifo_common::a_killed_waiter_is_skipped(&lease, holder, killed, dead, || in_line(&tenure, "k"))
        .await;
}

#[tokio::test]
async fn the_waiting_line_table_is_added_to_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    drop(open(&path).await);
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute_batch("DROP TABLE tenure_waiters").unwrap();
    drop(db);
    let store = open(&path).await;
    let t = OwnerToken::generate().unwrap();
    let reply = store.try_acquire("k", &t, HOUR, None).await.unwrap();
    assert!(matches!(reply, AcquireReply::Acquired { .. }), "{reply:?}");
    assert_eq!(store.status("k").await.unwrap().waiters, Some(0));
    assert_eq!(
        store.release("k", &t).await.unwrap(),
        ReleaseOutcome::Released
    );
}

/// The places of one process's waiters are kept alive together, in one
/// transaction per heartbeat, not by a write transaction of each waiter's
/// own: once they all stand in line, their places carry one expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_keeps_its_waiters_places_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let tenure = Coordinator::with_backend(open(&path).await);
    let (lease, holder) = fifo_common::held(&tenure, "k").await;
    const WAITERS: usize = 20;
    // Each releases as soon as it holds the lease: they are served in the
    // order they stood in line.
    let waiters = spawn_waiters(&lease, WAITERS);
    until_in_line(&tenure, "k", WAITERS).await;
    let db = rusqlite::Connection::open(&path).unwrap();
    let expiries = || -> (i64, i64) {
        db.query_row(
            "SELECT count(*), count(DISTINCT expires_at_ms) FROM tenure_waiters WHERE key = 'k'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = expiries();
    while seen != (WAITERS as i64, 1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = expiries();
    }
    assert_eq!(seen, (WAITERS as i64, 1), "(places, distinct expiries)");
    // Still alive a few place lifetimes later, and served in turn.
    tokio::time::sleep(3 * PLACE_LIFETIME).await;
    assert_eq!(in_line(&tenure, "k").await, WAITERS);
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
}

/// A holder that dies without releasing (its guard forgotten) keeps the lease
/// until its TTL runs out; the waiter in line then gets it, though nothing in
/// the file changed to wake it (the process's keeper, or the waiter's own
/// look once its quiet looks no longer stand, serves the line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lease_when_its_holders_ttl_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let tenure = Coordinator::with_backend(open(&dir.path().join("w.db")).await);
    let ttl = Duration::from_millis(800);
    let asked = Instant::now();
    let crashed = tenure.lease("k").watchdog(false).ttl(ttl).attempt().await;
    std::mem::forget(crashed.unwrap().into_guard().unwrap());
    let waiter = tenure
        .lease("k")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let attempt = fifo_common::spawn_wait(&waiter).await.unwrap().unwrap();
    let waited = asked.elapsed();
    let guard = attempt
        .into_guard()
        .expect("the waiter gets the lease once the holder's TTL ran out");
    assert!(waited >= ttl, "granted after {waited:?}, before the TTL");
    assert!(
        waited < ttl + Duration::from_secs(5),
        "granted only after {waited:?}"
    );
    guard.release().await.unwrap();
}

/// The threads of this process (`/proc/self/status`).
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

/// Many waiters standing in line at once do not each take a thread of the
/// blocking pool: the store's operations share one connection, so they wait
/// for it as tasks, and only a few run on the pool at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_standing_at_once_take_few_threads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let tenure = Coordinator::with_backend(open(&path).await);
    let (lease, holder) = fifo_common::held(&tenure, "k").await;
    let before = threads();
    const WAITERS: usize = 300;
    let waiters = spawn_waiters(&lease, WAITERS);
    until_in_line(&tenure, "k", WAITERS).await;
    // Idle pool threads stay for 10 s: every thread the line took is still
    // there to count. Two kinds of operation take two turns each; the pool
    // may start a thread while one that just finished is not yet idle, so
    // the bound leaves room for that (each waiter took a thread before).
    let grown = threads().saturating_sub(before);
    assert!(
        grown < WAITERS / 6,
        "{grown} threads more for {WAITERS} waiters"
    );
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
}
