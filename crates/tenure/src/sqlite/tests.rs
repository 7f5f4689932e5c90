#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rusqlite::Connection;

use super::*;
use crate::Coordinator;
use crate::fence::Fence;
use crate::lease::{AcquireReply, ExtendReply, LeaseStore, QueuePlace, ReleaseOutcome};
use crate::token::OwnerToken;

async fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default())
        .await
        .unwrap()
}

fn token() -> OwnerToken {
    OwnerToken::generate().unwrap()
}

const LONG: Duration = Duration::from_secs(60);

/// Takes `key` with `token` for [`LONG`]; its fence.
async fn grant(backend: &SqliteStore, key: &str, token: &OwnerToken) -> u64 {
    fence_of(backend.try_acquire(key, token, LONG, None).await.unwrap())
}

fn fence_of(reply: AcquireReply) -> u64 {
    match reply {
        AcquireReply::Acquired { fence, .. } => fence.get(),
        AcquireReply::Held { .. } => panic!("held"),
    }
}

#[tokio::test]
async fn fences_survive_release_expiry_and_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let a = open(&path).await;
    let t = token();
    let first = grant(&a, "k", &t).await;
    assert_eq!(a.release("k", &t).await.unwrap(), ReleaseOutcome::Released);
    let short = Duration::from_millis(30);
    let second = fence_of(a.try_acquire("k", &token(), short, None).await.unwrap());
    assert!(second > first);
    tokio::time::sleep(short * 3).await;
    drop(a);

    let b = open(&path).await;
    let status = b.status("k").await.unwrap();
    assert!(!status.held, "{status:?}");
    assert_eq!(status.fence, Some(Fence::new(second)));
    assert!(grant(&b, "k", &token()).await > second);
    assert_eq!(b.status("other").await.unwrap().fence, None);
}

#[tokio::test]
async fn two_connections_exclude_each_other_like_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let (a, b) = (open(&path).await, open(&path).await);
    let (ta, tb) = (token(), token());
    let first = grant(&a, "k", &ta).await;
    match b.try_acquire("k", &tb, LONG, None).await.unwrap() {
        AcquireReply::Held { ttl_left } => {
            let left = ttl_left.unwrap();
            assert!(left > LONG / 2 && left <= LONG, "{left:?}");
        }
        other => panic!("both connections hold the lease: {other:?}"),
    }
    assert_eq!(b.release("k", &tb).await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(
        b.extend("k", &tb, LONG).await.unwrap(),
        ExtendReply::NotHeld
    );
    assert!(matches!(
        a.extend("k", &ta, LONG).await.unwrap(),
        ExtendReply::Extended { .. }
    ));
    assert_eq!(a.release("k", &ta).await.unwrap(), ReleaseOutcome::Released);
    assert!(grant(&b, "k", &tb).await > first);
}

/// Rewrites a held lease's row as if it had been written in another boot, or
/// with an expiry further away than its TTL (a clock that went backwards).
fn tamper(path: &Path, sql: &str) {
    let conn = Connection::open(path).unwrap();
    assert_eq!(conn.execute(sql, []).unwrap(), 1);
}

#[tokio::test]
async fn a_lease_from_another_boot_is_expired_and_the_fence_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let old = token();
    let first = grant(&backend, "k", &old).await;
    // Written during an earlier boot whose leases have run out on the wall
    // clock too (a reboot longer than the TTL).
    tamper(
        &path,
        "UPDATE tenure_leases SET boot_id = 'an-earlier-boot',
           expires_at_wall_ms = expires_at_wall_ms - 120000",
    );
    assert!(!backend.status("k").await.unwrap().held);
    assert_eq!(
        backend.extend("k", &old, LONG).await.unwrap(),
        ExtendReply::NotHeld
    );
    let next = grant(&backend, "k", &token()).await;
    assert!(next > first);
}

#[tokio::test]
async fn a_lease_further_away_than_its_ttl_is_expired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let first = grant(&backend, "k", &token()).await;
    // As after a restart of the clock on a host without a boot id: the stored
    // expiry is far in this clock's future.
    tamper(
        &path,
        "UPDATE tenure_leases SET expires_at_ms = expires_at_ms + 3600000",
    );
    assert!(!backend.status("k").await.unwrap().held);
    let next = grant(&backend, "k", &token()).await;
    assert!(next > first);
}

async fn open_err(path: &Path) -> String {
    let err = SqliteStore::open(path, SqliteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err:?}");
    err.to_string()
}

#[tokio::test]
async fn unusable_files_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();

    let msg = open_err(&dir.path().join("missing/w.db")).await;
    assert!(msg.contains("does not exist"), "{msg}");

    let msg = open_err(dir.path()).await;
    assert!(msg.contains("is a directory"), "{msg}");

    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "this is not a database, just some text\n".repeat(100),
    )
    .unwrap();
    let msg = open_err(&text).await;
    assert!(msg.contains("not a SQLite database"), "{msg}");
    let unchanged = std::fs::read_to_string(&text).unwrap();
    assert!(unchanged.starts_with("this is not a database"));

    let foreign = dir.path().join("app.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY)")
        .unwrap();
    let msg = open_err(&foreign).await;
    assert!(msg.contains("another application"), "{msg}");

    let other_id = dir.path().join("other.db");
    Connection::open(&other_id)
        .unwrap()
        .pragma_update(None, "application_id", 42)
        .unwrap();
    let msg = open_err(&other_id).await;
    assert!(msg.contains("application_id 0x2a"), "{msg}");

    let newer = dir.path().join("newer.db");
    drop(open(&newer).await);
    Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", schema::SCHEMA_VERSION + 1)
        .unwrap();
    let msg = open_err(&newer).await;
    assert!(msg.contains("newer tenure"), "{msg}");
}

#[tokio::test]
async fn status_names_the_table_and_never_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let tenure = Coordinator::with_backend(open(&dir.path().join("w.db")).await);
    let guard = tenure
        .lease("jobs:1")
        .ttl(LONG)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let status = tenure.status("jobs:1").await.unwrap();
    assert!(status.held);
    assert_eq!(status.storage_key, "tenure_leases/jobs:1");
    assert_eq!(status.fence, Some(guard.fence()));
    assert!(!format!("{status:?}").contains("token"));
    guard.release().await.unwrap();
}

/// Many processes may open a new file at once: whichever creates the tables,
/// the others must see a tenure database, never "tables of another
/// application" from a half-seen creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_opens_all_succeed() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("fresh-{round}.db"));
        let opens: Vec<_> = (0..12)
            .map(|_| {
                let path = path.clone();
                tokio::spawn(async move { SqliteStore::open(path, SqliteOptions::default()).await })
            })
            .collect();
        for open in opens {
            let backend = open.await.unwrap();
            assert!(backend.is_ok(), "round {round}: {:?}", backend.err());
        }
    }
}

/// A row written by a version that stored `CLOCK_MONOTONIC` expiries (with the
/// bare boot id) keeps its expiry on that clock, and an extend moves it to the
/// store clock.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn a_legacy_monotonic_row_keeps_its_expiry() {
    use nix::time::{ClockId, clock_gettime};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let holder = token();
    grant(&backend, "k", &holder).await;
    let mono = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    let mono_ms = mono.tv_sec() * 1000 + mono.tv_nsec() / 1_000_000;
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE tenure_leases SET boot_id = ?1, expires_at_ms = ?2",
        rusqlite::params![&*clock::bare_boot_id(), mono_ms + 60_000],
    )
    .unwrap();
    let status = backend.status("k").await.unwrap();
    let left = status.ttl_left.expect("still held");
    assert!(left > Duration::from_secs(50) && left <= LONG, "{left:?}");
    assert!(matches!(
        backend.extend("k", &holder, LONG).await.unwrap(),
        ExtendReply::Extended { .. }
    ));
    let boot: String = conn
        .query_row("SELECT boot_id FROM tenure_leases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(boot, &*clock::boot_id());
    assert!(backend.status("k").await.unwrap().held);
}

#[tokio::test]
async fn sqlite_errors_keep_the_rusqlite_error_as_their_source() {
    use std::error::Error as _;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("w.db")).await;
    let mapped = store.error(
        "acquire",
        "k",
        Fault::Sql(rusqlite::Error::QueryReturnedNoRows),
    );
    assert!(
        mapped.to_string().contains("Query returned no rows"),
        "{mapped}"
    );
    let source = mapped.source().expect("a source");
    assert!(
        source.downcast_ref::<rusqlite::Error>().is_some(),
        "{mapped:?}"
    );
}

/// A file of schema version 1 (no holder columns) is migrated when opened:
/// its leases and fences stay, the holder columns appear, and the version
/// moves to the current one.
#[tokio::test]
async fn a_version_1_file_is_migrated_and_keeps_its_fences() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    write_old_file(&path, "", 1);
    let backend = open(&path).await;
    let version: i32 = Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, schema::SCHEMA_VERSION);
    assert_eq!(
        backend.status("old").await.unwrap().fence,
        Some(Fence::new(41))
    );
    let me = crate::HolderInfo::this_process().with_label("migrated");
    let holder = token();
    let fence = fence_of(
        backend
            .try_acquire("old", &holder, LONG, Some(&me))
            .await
            .unwrap(),
    );
    // A counter an earlier version left below the clock jumps forward to it.
    let floor = crate::fence::wall_clock_us() / 1_000_000 * 1_000_000 - 10_000_000;
    assert!(fence > 41 && fence >= floor, "{fence}");
    let status = backend.status("old").await.unwrap();
    assert_eq!(status.holder.unwrap().label.as_deref(), Some("migrated"));
    // Opening it again (already migrated) changes nothing.
    drop(backend);
    let again = open(&path).await;
    assert!(again.status("old").await.unwrap().held);
}

/// A counter set back within the second of the grants after it (a database
/// restored from a copy taken moments before, a power cut that lost the last
/// commits): the next fence is still above every fence handed out.
#[tokio::test]
async fn a_counter_set_back_within_the_second_goes_on_above_its_fences() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("behind.db");
    let backend = open(&path).await;
    let into = crate::fence::wall_clock_us() % 1_000_000;
    if into > 200_000 {
        tokio::time::sleep(Duration::from_micros(1_000_000 - into)).await;
    }
    let mut fences = Vec::new();
    for _ in 0..4 {
        let t = token();
        fences.push(grant(&backend, "k", &t).await);
        backend.release("k", &t).await.unwrap();
    }
    let first = i64::try_from(fences[0]).unwrap();
    let rows = Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE tenure_leases SET fence = ?1 WHERE key = 'k'",
            [first],
        )
        .unwrap();
    assert_eq!(rows, 1);
    let next = grant(&backend, "k", &token()).await;
    assert!(fences.iter().all(|&f| f < next), "{fences:?} then {next}");
}

/// The owner token stays in the row; neither status nor list shows it.
#[tokio::test]
async fn status_and_list_never_show_the_owner_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let holder = token();
    let me = crate::HolderInfo::this_process().with_label("job");
    fence_of(
        backend
            .try_acquire("k", &holder, LONG, Some(&me))
            .await
            .unwrap(),
    );
    let stored: String = Connection::open(&path)
        .unwrap()
        .query_row("SELECT token FROM tenure_leases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, holder.as_str());
    let status = format!("{:?}", backend.status("k").await.unwrap());
    let listed = format!("{:?}", backend.list("").await.unwrap());
    assert!(status.contains("job") && listed.contains("job"), "{listed}");
    assert!(!status.contains(holder.as_str()), "{status}");
    assert!(!listed.contains(holder.as_str()), "{listed}");
}

/// A row written under a boot id this kernel does not know is a lease of
/// another kernel sharing the file (a VM or container over virtiofs/9p, WSL2
/// and Windows), or of this host's previous boot: either way it is held until
/// its wall-clock expiry, never granted twice at once.
#[tokio::test]
async fn a_lease_written_by_another_kernel_is_held_until_its_wall_clock_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let theirs = token();
    grant(&backend, "k", &theirs).await;
    tamper(&path, "UPDATE tenure_leases SET boot_id = 'another-kernel'");
    let mine = token();
    let reply = backend.try_acquire("k", &mine, LONG, None).await.unwrap();
    let AcquireReply::Held { ttl_left } = reply else {
        panic!("granted a lease another kernel holds: {reply:?}");
    };
    let left = ttl_left.expect("a TTL");
    assert!(
        left > LONG - Duration::from_secs(10) && left <= LONG,
        "{left:?}"
    );
    assert!(backend.status("k").await.unwrap().held);
    // Once its wall-clock expiry has passed, it is free.
    tamper(
        &path,
        "UPDATE tenure_leases SET expires_at_wall_ms = expires_at_wall_ms - 120000",
    );
    grant(&backend, "k", &mine).await;
}

/// The store can lose its file (deleted, restored from an old backup): the
/// next fences start from the host's clock, above every fence handed out
/// before.
#[tokio::test]
async fn fences_go_on_after_the_file_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let mut fences = Vec::new();
    for _ in 0..3 {
        let t = token();
        fences.push(grant(&backend, "k", &t).await);
        backend.release("k", &t).await.unwrap();
    }
    drop(backend);
    for side in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", path.display()));
    }
    let backend = open(&path).await;
    fences.push(grant(&backend, "k", &token()).await);
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
}

/// Counters of keys nobody took for longer than the fence retention are
/// deleted a few at a time by later grants; held leases and recent counters
/// stay.
#[tokio::test]
async fn idle_fence_counters_are_pruned_by_later_grants() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let held = token();
    grant(&backend, "b-held", &held).await;
    let recent = token();
    grant(&backend, "b-recent", &recent).await;
    backend.release("b-recent", &recent).await.unwrap();
    // Counters as an earlier version left them: small fences, long idle.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "INSERT INTO tenure_leases (key, fence) VALUES ('b-idle-1', 5), ('b-idle-2', 7);
         UPDATE tenure_leases SET fence = 3 WHERE key = 'b-held';",
    )
    .unwrap();
    for i in 0..4 {
        let t = token();
        grant(&backend, &format!("a{i}"), &t).await;
        backend.release(&format!("a{i}"), &t).await.unwrap();
    }
    let keys: Vec<String> = conn
        .prepare("SELECT key FROM tenure_leases WHERE key LIKE 'b-%' ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(keys, ["b-held", "b-recent"]);
    assert!(backend.status("b-held").await.unwrap().held);
}

/// Grants commit without an fsync in WAL mode (`synchronous=NORMAL`): after
/// a power cut every holder on the host is gone, and the clock floor keeps
/// the next fences above any grant the cut undid.
#[tokio::test]
async fn grants_commit_without_an_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let backend = open(&dir.path().join("w.db")).await;
    let synchronous = |backend: &SqliteStore| {
        let conn = backend.inner.conn.lock().unwrap();
        let level: i64 = conn
            .db
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        (conn.commit, level)
    };
    let t = token();
    grant(&backend, "k", &t).await;
    // 1: NORMAL.
    assert_eq!(synchronous(&backend), (Some(Commit::Relaxed), 1));
    // Everything else commits durably (2: FULL), whatever came before.
    backend.status("k").await.unwrap();
    assert_eq!(synchronous(&backend), (Some(Commit::Durable), 2));
}

/// Writes a file as an older version of tenure left it: schema `version`,
/// the lease table with `extra_lease_columns` (SQL, after the first six),
/// the limit and clock tables, and the lease `old` at fence 41.
fn write_old_file(path: &std::path::Path, extra_lease_columns: &str, version: i32) {
    Connection::open(path)
        .unwrap()
        .execute_batch(&format!(
            "CREATE TABLE tenure_leases (
                key TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL, token TEXT,
                boot_id TEXT, expires_at_ms INTEGER, ttl_ms INTEGER{extra_lease_columns}
             ) STRICT, WITHOUT ROWID;
             CREATE TABLE tenure_limits (
                key TEXT PRIMARY KEY NOT NULL, state BLOB NOT NULL, expires_at_us INTEGER NOT NULL
             ) STRICT, WITHOUT ROWID;
             CREATE INDEX tenure_limits_expiry ON tenure_limits (expires_at_us);
             CREATE TABLE tenure_clock (boot_id TEXT PRIMARY KEY NOT NULL, origin_us INTEGER NOT NULL) STRICT;
             INSERT INTO tenure_leases (key, fence) VALUES ('old', 41);
             PRAGMA application_id = 1464091982;
             PRAGMA user_version = {version};"
        ))
        .unwrap();
}

/// A file of schema version 2 written before the waiting line and the
/// wall-clock expiry existed gets them when opened, and keeps its rows.
#[tokio::test]
async fn a_version_2_file_without_the_waiting_line_gets_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    write_old_file(
        &path,
        ", holder_host TEXT, holder_pid INTEGER, holder_label TEXT, acquired_at_ms INTEGER",
        2,
    );
    let backend = open(&path).await;
    let conn = Connection::open(&path).unwrap();
    assert!(conn.table_exists(Some("main"), "tenure_waiters").unwrap());
    assert!(
        conn.column_exists(Some("main"), "tenure_leases", "expires_at_wall_ms")
            .unwrap()
    );
    let indexes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'tenure_waiters_line'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 1);
    let fence = grant(&backend, "old", &token()).await;
    assert!(fence > 41, "{fence}");
}

/// The log stays short: the first connection to open the file reads all of
/// it back (WAL recovery), so its length is what every cold start pays.
#[tokio::test]
async fn the_log_a_cold_start_reads_back_stays_short() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    for _ in 0..200 {
        let t = token();
        grant(&backend, "k", &t).await;
        backend.release("k", &t).await.unwrap();
    }
    drop(backend);
    let log = std::fs::metadata(format!("{}-wal", path.display())).unwrap();
    // (Closing this last connection then copies the log into the file.)
    let page: i64 = Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "page_size", |r| r.get(0))
        .unwrap();
    assert_eq!(page, schema::PAGE_SIZE);
    // A frame is a page and its 24-byte header, after the log's own 32.
    let frames = (log.len().saturating_sub(32) / (page.unsigned_abs() + 24)) as i64;
    assert!(
        frames <= schema::CHECKPOINT_PAGES + 8,
        "{frames} frames in the log"
    );
}

async fn open_inline(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default().inline(true))
        .await
        .unwrap()
}

/// The thread an operation of `backend` ran on, where `place` allows.
async fn thread_of(backend: &SqliteStore, place: Place) -> std::thread::ThreadId {
    let mode = (TransactionBehavior::Immediate, Commit::Relaxed);
    backend
        .run(place, mode, "probe", "k", |_, _| {
            Ok(std::thread::current().id())
        })
        .await
        .unwrap()
}

/// An inline store runs an operation on the caller's thread when the file
/// is free, and a renewal on the blocking pool all the same; a store that is
/// not inline runs everything on the pool.
#[tokio::test]
async fn inline_operations_run_on_the_callers_thread_and_renewals_on_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let here = std::thread::current().id();
    let inline = open_inline(&dir.path().join("i.db")).await;
    assert_eq!(thread_of(&inline, Place::Caller).await, here);
    assert_ne!(thread_of(&inline, Place::Pool).await, here);
    let pooled = open(&dir.path().join("p.db")).await;
    assert_ne!(thread_of(&pooled, Place::Caller).await, here);
}

/// An inline store whose file another connection holds waits for it on the
/// blocking pool: the caller's runtime goes on meanwhile (a timer task of
/// this one-thread runtime ticks), and the grant comes once the file is free.
#[tokio::test]
async fn an_inline_store_waits_for_a_locked_file_off_the_callers_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open_inline(&path).await;
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let other = path.clone();
    let holder = std::thread::spawn(move || {
        let conn = Connection::open(other).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(400));
        conn.execute_batch("COMMIT").unwrap();
    });
    locked_rx.recv().unwrap();
    let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = Arc::clone(&ticks);
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let fence = grant(&backend, "k", &token()).await;
    let during = ticks.load(std::sync::atomic::Ordering::Relaxed);
    ticker.abort();
    holder.join().unwrap();
    assert!(fence > 0);
    assert!(
        during >= 5,
        "the runtime ticked {during} times while waiting"
    );
}

/// Adds a dead place (written during another boot) to the end of `key`'s
/// line.
fn dead_place(conn: &Connection, key: &str) {
    conn.execute(
        "INSERT INTO tenure_waiters (key, token, ttl_ms, boot_id, expires_at_ms)
         VALUES (?1, 'dead', 60000, 'an-earlier-boot', 0)",
        [key],
    )
    .unwrap();
}

/// Stands `token` in `key`'s line (the lease is held).
async fn stand(backend: &SqliteStore, key: &str, token: &OwnerToken) {
    let (reply, place) = backend
        .wait_turn(key, token, LONG, None, None)
        .await
        .unwrap();
    assert!(matches!(reply, AcquireReply::Held { .. }), "{reply:?}");
    assert!(place.is_some());
}

/// The places of `token` in `key`'s line.
fn places_of(conn: &Connection, key: &str, token: &str) -> i64 {
    conn.query_row(
        "SELECT count(*) FROM tenure_waiters WHERE key = ?1 AND token = ?2",
        [key, token],
        |r| r.get(0),
    )
    .unwrap()
}

/// The places [`dead_place`] stood in `key`'s line.
fn dead_places(conn: &Connection, key: &str) -> i64 {
    places_of(conn, key, "dead")
}

/// A hand-off reads the line only up to its first live place: the dead
/// places before it go, the ones behind it are left until they reach the
/// front, however long the line.
#[tokio::test]
async fn a_hand_off_reads_the_line_only_up_to_its_first_live_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let holder = token();
    grant(&backend, "k", &holder).await;
    let conn = Connection::open(&path).unwrap();
    for _ in 0..50 {
        dead_place(&conn, "k");
    }
    let (first, second) = (token(), token());
    stand(&backend, "k", &first).await;
    dead_place(&conn, "k");
    stand(&backend, "k", &second).await;

    assert_eq!(
        backend.release("k", &holder).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        backend.holder_token("k").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(dead_places(&conn, "k"), 1, "only the dead place ahead went");
    assert_eq!(backend.status("k").await.unwrap().waiters, Some(1));

    assert_eq!(
        backend.release("k", &first).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(backend.holder_token("k").await.unwrap(), Some(second));
    assert_eq!(dead_places(&conn, "k"), 0, "it reached the front");
}

/// A waiter that takes a lease handed to it removes the place it knows, by
/// its number, without reading the rest of the line: a place of its token
/// it never learnt of (left by a look it gave up on) stays, for that look's
/// undo to remove or to lapse.
#[tokio::test]
async fn a_claim_removes_the_place_the_waiter_knows_and_reads_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    let holder = token();
    grant(&backend, "k", &holder).await;
    let waiter = token();
    let (_, known) = backend
        .wait_turn("k", &waiter, LONG, None, None)
        .await
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    // The place a look given up on would have left, behind the known one.
    conn.execute(
        "INSERT INTO tenure_waiters (key, token, ttl_ms, boot_id, expires_at_ms)
         SELECT key, token, ttl_ms, boot_id, expires_at_ms FROM tenure_waiters
         WHERE token = ?1",
        [waiter.as_str()],
    )
    .unwrap();
    assert_eq!(places_of(&conn, "k", waiter.as_str()), 2);

    assert_eq!(
        backend.release("k", &holder).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        places_of(&conn, "k", waiter.as_str()),
        1,
        "handed over from the first"
    );
    let (reply, place) = backend
        .wait_turn("k", &waiter, LONG, None, known.as_ref())
        .await
        .unwrap();
    assert!(matches!(reply, AcquireReply::Acquired { .. }), "{reply:?}");
    assert!(place.is_none());
    assert_eq!(
        places_of(&conn, "k", waiter.as_str()),
        1,
        "the unknown place is left"
    );

    // Leaving the line, as that look's undo does, removes it.
    backend.leave_line("k", &waiter, None).await.unwrap();
    assert_eq!(places_of(&conn, "k", waiter.as_str()), 0);
}

/// A waiter first in line that finds the lease free takes it, and removes
/// both the place it took it from and the place it knows when they differ
/// (a look it gave up on stood ahead of its own): the place it knows would
/// otherwise stay in line behind its own lease.
#[tokio::test]
async fn a_waiter_first_in_line_removes_its_first_place_and_the_one_it_knows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    grant(&backend, "k", &token()).await;
    let waiter = token();
    // The first place stands for a look the waiter gave up on.
    backend
        .wait_turn("k", &waiter, LONG, None, None)
        .await
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO tenure_waiters (key, token, ttl_ms, boot_id, expires_at_ms)
         SELECT key, token, ttl_ms, boot_id, expires_at_ms FROM tenure_waiters
         WHERE token = ?1",
        [waiter.as_str()],
    )
    .unwrap();
    let known: i64 = conn
        .query_row("SELECT max(seq) FROM tenure_waiters", [], |r| r.get(0))
        .unwrap();
    // The holder's lease ran out: free, with the waiter first in line.
    tamper(
        &path,
        "UPDATE tenure_leases SET expires_at_ms = 0 WHERE key = 'k'",
    );

    let known = QueuePlace::new(known.to_string());
    let (reply, place) = backend
        .wait_turn("k", &waiter, LONG, None, Some(&known))
        .await
        .unwrap();
    assert!(matches!(reply, AcquireReply::Acquired { .. }), "{reply:?}");
    assert!(place.is_none());
    assert_eq!(places_of(&conn, "k", waiter.as_str()), 0);
}

/// A waiter leaving the line finds its places by the index of key and
/// token, which the first waiter to join creates (in an older file too),
/// not by reading the whole line: a line that gives up at once costs
/// a leave each, not a read of the line each.
#[tokio::test]
async fn a_waiter_leaving_finds_its_places_without_reading_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let backend = open(&path).await;
    grant(&backend, "k", &token()).await;
    let conn = Connection::open(&path).unwrap();
    for _ in 0..200 {
        dead_place(&conn, "k");
    }
    let waiter = token();
    stand(&backend, "k", &waiter).await;

    // A connection of its own: one opened before the index read the schema
    // without it, and a plan is made from the schema as read.
    let plan: Vec<String> = Connection::open(&path)
        .unwrap()
        .prepare(&format!("EXPLAIN QUERY PLAN {}", line::REMOVE_PLACES))
        .unwrap()
        .query_map(["k", waiter.as_str()], |r| r.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|step| step.contains("tenure_waiters_token (key=? AND token=?)")),
        "{plan:?}"
    );
    assert_eq!(
        backend.leave_line("k", &waiter, None).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(places_of(&conn, "k", waiter.as_str()), 0);
    assert_eq!(dead_places(&conn, "k"), 200);
}
