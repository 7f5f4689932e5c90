//! The embedded SQLite store, the single-host default: leases and rate limits
//! in one database file shared by every process on the host.
//!
//! This module holds the store itself ([`SqliteStore`]), its options, the
//! transaction runner every operation goes through (on tokio's blocking
//! pool) and the mapping of SQLite failures to [`Error`]s. The rest is one
//! file per concern: `cached` (statements compiled once per connection, and
//! transactions begun and committed by them), `lease` (the lease store),
//! `limit` (the limit store and the limiter's clock), `schema` (tables,
//! pragmas, the file's identity), `clock` (the store clock and boot id),
//! `line` (the waiting line), `notify` (waking waiters), `keeper` (keeping a
//! process's places in line alive) and `file_events` (the OS's change
//! events).

mod cached;
mod clock;
mod file_events;
mod gate;
mod keeper;
mod lease;
mod limit;
mod line;
mod notify;
mod record;
mod schema;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use tokio::sync::Semaphore;

use crate::error::{Error, Result};
use clock::HostTime;

pub use crate::fence::DEFAULT_FENCE_RETENTION;

/// How long an operation waits for another process's write lock by default.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How often waiters re-read the leases they wait for by default, where the
/// OS reports no changes of the database file (see
/// [`SqliteOptions::poll_interval`]).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Settings of a [`SqliteStore`].
#[derive(Debug, Clone)]
#[must_use]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long one operation waits for the write lock held by another
    /// connection before failing with [`Error::Timeout`] (default
    /// [`DEFAULT_BUSY_TIMEOUT`]).
    pub(crate) busy_timeout: Duration,
    /// How often this process re-reads the leases it waits for when the OS
    /// does not report changes of the database file (no inotify: not Linux,
    /// or its instances used up); default [`DEFAULT_POLL_INTERVAL`]. Where
    /// changes are reported, waiters are woken by them and this is unused.
    /// The first store of a file in a process sets it for that file.
    pub(crate) poll_interval: Duration,
    /// How long a fence counter outlives its last grant (default
    /// [`DEFAULT_FENCE_RETENTION`]); see [`fence_retention`](Self::fence_retention).
    pub(crate) fence_retention: Duration,
    /// Whether operations run on the calling thread when they need not wait
    /// (default `false`); see [`inline`](Self::inline).
    pub(crate) inline: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            poll_interval: DEFAULT_POLL_INTERVAL,
            fence_retention: DEFAULT_FENCE_RETENTION,
            inline: false,
        }
    }
}

impl SqliteOptions {
    /// Sets the busy timeout.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets the poll interval used where the OS reports no file changes.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets how long a lease's row (its fence counter) is kept once nobody
    /// holds the lease (default [`DEFAULT_FENCE_RETENTION`], a day). Later
    /// grants delete such rows a few at a time, so keys used once
    /// (`orders:42`) do not leave a row behind for good. Every fence is at
    /// least the host's wall clock, so a key whose row was deleted goes on
    /// above its earlier fences; while the row lives, fences also stay
    /// increasing if the wall clock steps back (see `docs/leases.md`).
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// Runs operations on the calling thread instead of tokio's blocking
    /// pool when they need not wait for another connection (default
    /// `false`).
    ///
    /// Meant for a short-lived program that does one thing at a time, such
    /// as a command line: it saves starting a thread, and two thread switches
    /// per operation. An operation that finds the file locked by another
    /// connection waits on the blocking pool all the same, and renewals
    /// always run there: a holder must keep its lease's deadline while they
    /// run. What runs inline still blocks the calling thread for its disk
    /// writes (a durable commit's or a checkpoint's fsync), so a server that
    /// serves other requests meanwhile should leave this off.
    pub fn inline(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }
}

/// Leases in a SQLite file, shared by every process on the host that opens it:
/// no server to run, and the same lease and fence semantics as Redis.
///
/// - **Atomic across processes.** Every change is one `BEGIN IMMEDIATE`
///   transaction: read the row, decide, write. The database is in WAL mode and
///   waits for other writers up to [`SqliteOptions::busy_timeout`].
/// - **Fences that never repeat.** The fence counter lives in the lease's
///   row: releasing or expiring a lease clears its owner, not its counter.
///   Every fence is `max(last fence + 1, the host's wall clock)` (read in
///   the same transaction; see `docs/leases.md`), so a lost counter — a row
///   deleted by the [fence retention](SqliteOptions::fence_retention), a
///   grant undone by a power cut, a deleted file — still goes on above every
///   fence handed out before, unless the wall clock stepped back by more than
///   the time since that fence. So grants, releases and renewals commit with
///   `synchronous=NORMAL` (WAL mode only; no fsync): a crashed process loses
///   none of them, a power cut may undo the last ones — which frees nothing
///   wrongly, since every holder on the host died with it and the reboot
///   expires every lease (boot id), and repeats no fence (the floor).
/// - **One kernel.** Every process using the file must run on one kernel:
///   expiry is on that kernel's clock. A row written under a boot id this
///   kernel does not know (its previous boot, or another kernel sharing the
///   file: a VM or container over virtiofs/9p, WSL2 and Windows) is held
///   until its wall-clock expiry, so neither case grants a lease twice; the
///   waiting line and wake-ups still work per kernel only.
/// - **Expiry on the holders' deadline clock** ([`SystemClock`](crate::clock::SystemClock):
///   `CLOCK_BOOTTIME` on Linux, `CLOCK_MONOTONIC` on macOS), which a wall-clock
///   change does not move and a suspend does not stop; with the boot id stored
///   beside it, a reboot expires every lease. See the notes on the clock choice
///   in the `clock` module of the source.
/// - **Blocking calls stay off the async runtime**: each operation runs on
///   tokio's blocking pool, unless the store is
///   [inline](SqliteOptions::inline) (for one-shot programs such as the
///   command line).
///
/// **Waiting is FIFO and woken, not polled.** A waiter stands in line (table
/// `tenure_waiters`); a release hands the lease to the first live waiter and
/// wakes only it. Releases in this process wake waiters at once; other
/// processes' commits are seen through inotify on the database's directory
/// (Linux), after which the process re-reads the rows its waiters wait for.
/// Without inotify it re-reads them every [`SqliteOptions::poll_interval`].
/// A process keeps the places of all its waiters of a file alive in one
/// transaction every 250 ms, and a hand-off reads the line only up to its
/// first live place: a hand-off costs the same however many wait.
/// [`LeaseStatus::waiters`](crate::LeaseStatus::waiters) counts the live
/// places in line.
///
/// Storage: table `tenure_leases`, one row per key (`key`, `fence`, `token`,
/// `boot_id`, `expires_at_ms`, `ttl_ms`, and the holder's `holder_host`,
/// `holder_pid`, `holder_label`, `acquired_at_ms` when it recorded itself;
/// a file of schema version 1 gets these columns when opened) and table
/// `tenure_waiters` (the waiting lines). The write-ahead log (`-wal`) stays
/// beside the file when the last connection closes. The file is marked with
/// `PRAGMA application_id = 0x5744454E`; tenure refuses to write into SQLite files
/// of other applications.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// use tenure::sqlite::{SqliteStore, SqliteOptions};
/// use tenure::Coordinator;
///
/// let dir = std::env::temp_dir().join(format!("tenure-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).expect("temp dir");
/// let backend = SqliteStore::open(dir.join("tenure.db"), SqliteOptions::default()).await?;
/// let tenure = Coordinator::with_backend(backend);
/// let guard = tenure.lease("backup").ttl(Duration::from_secs(10)).try_acquire().await?
///     .expect("free");
/// assert!(tenure.status("backup").await?.held);
/// guard.release().await?;
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

/// How a transaction's commit reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// On disk before the call returns (`synchronous=FULL`): records,
    /// permits and everything not named under `Relaxed`.
    Durable,
    /// Handed to the OS at once, on disk with the next durable commit or
    /// checkpoint (`synchronous=NORMAL`, in WAL mode only, where it cannot
    /// corrupt the file): lease grants (acquire, the waiting line's looks
    /// and hand-offs), releases and renewals. A power cut may undo them,
    /// which frees nothing wrongly (the reboot expires every lease, boot id)
    /// and repeats no fence (every fence is floored by the wall clock).
    Relaxed,
}

/// The connection, and the commit mode and busy timeout it is set to.
#[derive(Debug)]
struct Conn {
    db: Connection,
    /// The commit mode `synchronous` is set to; `None` until the first
    /// transaction sets it (opening the file leaves it alone).
    commit: Option<Commit>,
    /// Whether the file is in WAL mode (only there is [`Commit::Relaxed`]
    /// used).
    wal: bool,
    /// How long SQLite waits for another connection's lock: zero for an
    /// operation tried on the calling thread, the busy timeout on the pool.
    wait: Duration,
}

/// Where an operation may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// On the calling thread when the store is [inline](SqliteOptions::inline)
    /// and the file is free, else on the blocking pool.
    Caller,
    /// Always on the blocking pool: renewals, during which a holder must go
    /// on keeping its deadline.
    Pool,
}

#[derive(Debug)]
struct Inner {
    conn: Mutex<Conn>,
    path: PathBuf,
    /// The canonical path, resolved when first needed: one notifier per
    /// file and process (`notify`).
    file: OnceLock<PathBuf>,
    display: String,
    /// The boot id rows are stamped with (tagged with the clock on Linux).
    boot: Arc<str>,
    /// The bare boot id, which rows of older versions carry.
    bare_boot: Arc<str>,
    busy_timeout: Duration,
    poll_interval: Duration,
    /// Whether operations are tried on the calling thread first
    /// ([`SqliteOptions::inline`]).
    inline: bool,
    /// Deletes idle fence counters after grants.
    pruner: lease::Pruner,
    /// Turns on the blocking pool for operations that may run on the
    /// caller's thread ([`Place::Caller`]), and apart for renewals
    /// ([`Place::Pool`]), so these never queue behind the others.
    turns: [Semaphore; 2],
}

/// How many operations of one [`Place`] run on the blocking pool at a
/// time. They all need the store's one connection, so more would only wait
/// for it on threads of their own (a thousand waiters standing in line at
/// once took hundreds of threads); the second lets the next one start as
/// soon as the first is done.
const POOL_TURNS: usize = 2;

/// `sqlite:PATH`, as in messages.
fn display(path: &Path) -> String {
    format!("sqlite:{}", path.display())
}

/// Why an operation failed, before the backend adds its context.
enum Fault {
    Sql(rusqlite::Error),
    /// A row tenure cannot use (negative fence, counter exhausted).
    Data(String),
    /// The host clock could not be read.
    Clock(String),
    /// An error of tenure's own (bad input, bad stored data), passed through.
    Own(Error),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Self {
        Fault::Sql(e)
    }
}

impl From<Error> for Fault {
    fn from(e: Error) -> Self {
        Fault::Own(e)
    }
}

/// One transaction: begin, read the host clock under the lock, run `f`,
/// commit; waiting up to `wait` for another connection's lock.
fn attempt<T>(
    conn: &mut Conn,
    inner: &Inner,
    (behavior, commit, wait): (TransactionBehavior, Commit, Duration),
    f: &impl Fn(&Connection, &HostTime) -> Result<T, Fault>,
) -> Result<T, Fault> {
    if conn.wait != wait {
        conn.db.busy_timeout(wait)?;
        conn.wait = wait;
    }
    let commit = if conn.wal { commit } else { Commit::Durable };
    if conn.commit != Some(commit) {
        let level = match commit {
            Commit::Durable => "FULL",
            Commit::Relaxed => "NORMAL",
        };
        conn.db.pragma_update(None, "synchronous", level)?;
        conn.commit = Some(commit);
    }
    let tx = cached::Tx::begin(&conn.db, behavior)?;
    let now = HostTime::read(&inner.boot, &inner.bare_boot).map_err(Fault::Clock)?;
    let out = f(&tx, &now)?;
    tx.commit()?;
    Ok(out)
}

/// Opens and prepares the connection to `path`: on the calling thread when
/// `inline` and no other connection holds the locks that needs, else on the
/// blocking pool, waiting up to `busy_timeout` for them.
async fn connect(path: PathBuf, busy_timeout: Duration, inline: bool) -> Result<Conn> {
    let conn = |db, wal, wait| Conn {
        db,
        commit: None,
        wal,
        wait,
    };
    let mut started = None;
    if inline {
        let mut db = schema::connect(&path)?;
        match schema::prepare_within(&mut db, &path, Duration::ZERO) {
            Ok(wal) => return Ok(conn(db, wal, Duration::ZERO)),
            Err(schema::Unprepared::Locked(_)) => started = Some(db),
            Err(e) => return Err(e.into()),
        }
    }
    let backend = display(&path);
    tokio::task::spawn_blocking(move || {
        let mut db = match started {
            Some(db) => db,
            None => schema::connect(&path)?,
        };
        let wal = schema::prepare_within(&mut db, &path, busy_timeout)?;
        Ok(conn(db, wal, busy_timeout))
    })
    .await
    .map_err(|e| Error::Storage {
        backend,
        reason: format!("opening it failed: {e}"),
    })?
}

impl SqliteStore {
    /// Opens the database at `path`, creating the file (not its directory) and
    /// tenure's table if needed.
    ///
    /// Fails with [`Error::Storage`] when the file cannot be opened or created,
    /// is not a SQLite database, is corrupt, or belongs to another application.
    pub async fn open(path: impl Into<PathBuf>, options: SqliteOptions) -> Result<Self> {
        let path = path.into();
        let display = display(&path);
        if options.busy_timeout.is_zero() {
            return Err(Error::invalid(
                "busy timeout",
                "must be greater than zero, or every contended write fails at once",
            ));
        }
        if options.poll_interval.is_zero() {
            return Err(Error::invalid(
                "poll interval",
                "must be greater than zero, or waiters would spin",
            ));
        }
        let busy_timeout = crate::duration::capped(options.busy_timeout);
        let conn = connect(path.clone(), busy_timeout, options.inline).await?;
        let bare_boot = clock::bare_boot_id();
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                path,
                file: OnceLock::new(),
                display,
                boot: clock::boot_id_of(&bare_boot),
                bare_boot,
                busy_timeout,
                poll_interval: crate::duration::capped(options.poll_interval),
                inline: options.inline,
                pruner: lease::Pruner::new(options.fence_retention),
                turns: [(); 2].map(|()| Semaphore::new(POOL_TURNS)),
            }),
        })
    }

    /// Runs `f` in a transaction on the blocking pool (or on the calling
    /// thread, see [`SqliteOptions::inline`]), with the host time read once
    /// the transaction holds its lock; its commit is durable.
    async fn transact<T: Send + 'static>(
        &self,
        op: &'static str,
        key: &str,
        behavior: TransactionBehavior,
        f: impl Fn(&Connection, &HostTime) -> Result<T, Fault> + Send + 'static,
    ) -> Result<T> {
        self.transact_as(Commit::Durable, op, key, behavior, f)
            .await
    }

    /// [`transact`](Self::transact) with the commit mode `commit`.
    async fn transact_as<T: Send + 'static>(
        &self,
        commit: Commit,
        op: &'static str,
        key: &str,
        behavior: TransactionBehavior,
        f: impl Fn(&Connection, &HostTime) -> Result<T, Fault> + Send + 'static,
    ) -> Result<T> {
        self.run(Place::Caller, (behavior, commit), op, key, f)
            .await
    }

    /// Runs `f` in one transaction where `place` allows (a renewal:
    /// [`Place::Pool`]).
    async fn run<T: Send + 'static>(
        &self,
        place: Place,
        mode: (TransactionBehavior, Commit),
        op: &'static str,
        key: &str,
        f: impl Fn(&Connection, &HostTime) -> Result<T, Fault> + Send + 'static,
    ) -> Result<T> {
        let here = match place {
            Place::Caller if self.inner.inline => self.try_here(mode, &f),
            _ => None,
        };
        let done = match here {
            Some(done) => done,
            None => self.on_pool(place, mode, f).await,
        };
        done.map_err(|fault| self.error(op, key, fault))
    }

    /// One attempt on the calling thread that waits for nothing: `None`
    /// when another connection holds a lock it needs (or this store's
    /// connection is busy on the pool), and it changed nothing.
    fn try_here<T>(
        &self,
        (behavior, commit): (TransactionBehavior, Commit),
        f: &impl Fn(&Connection, &HostTime) -> Result<T, Fault>,
    ) -> Option<Result<T, Fault>> {
        let mut conn = match self.inner.conn.try_lock() {
            Ok(conn) => conn,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        match attempt(
            &mut conn,
            &self.inner,
            (behavior, commit, Duration::ZERO),
            f,
        ) {
            Err(Fault::Sql(e)) if schema::is_busy(&e) => None,
            other => Some(other),
        }
    }

    /// Runs `f` in one transaction on the blocking pool, once one of
    /// `place`'s turns is free, waiting up to the busy timeout for other
    /// connections' locks.
    async fn on_pool<T: Send + 'static>(
        &self,
        place: Place,
        (behavior, commit): (TransactionBehavior, Commit),
        f: impl Fn(&Connection, &HostTime) -> Result<T, Fault> + Send + 'static,
    ) -> Result<T, Fault> {
        // Never closed: the store owns its semaphores.
        let turn = self.inner.turns[usize::from(place == Place::Pool)]
            .acquire()
            .await
            .map_err(|e| Fault::Clock(format!("the blocking pool's turns: {e}")))?;
        let inner = Arc::clone(&self.inner);
        let joined = tokio::task::spawn_blocking(move || {
            // A panic in another operation cannot leave the connection inside a
            // transaction (`cached::Tx` rolls back on drop), so poisoning is
            // ignored.
            let mut conn = inner.conn.lock().unwrap_or_else(|e| e.into_inner());
            // SQLite sometimes answers BUSY without waiting (a lock upgrade that
            // could deadlock, WAL recovery by another process). A failed
            // transaction changed nothing: try again, within the busy timeout.
            let wait = inner.busy_timeout;
            let deadline = std::time::Instant::now() + wait;
            loop {
                match attempt(&mut conn, &inner, (behavior, commit, wait), &f) {
                    Err(Fault::Sql(e))
                        if schema::is_busy(&e) && std::time::Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(rand::random_range(1..=10)));
                    }
                    other => return other,
                }
            }
        })
        .await;
        // Given back once the thread is done, so the next operation finds
        // it idle rather than starting another. A caller that stops waiting
        // gives its turn back early: the pool may then run one more for a
        // while, which the connection's lock still serialises.
        drop(turn);
        joined.unwrap_or_else(|join| Err(Fault::Clock(format!("the blocking task failed: {join}"))))
    }

    fn error(&self, op: &'static str, key: &str, fault: Fault) -> Error {
        let backend = self.inner.display.clone();
        let key = key.to_string();
        match fault {
            Fault::Sql(e) => match e.sqlite_error_code() {
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Timeout {
                    backend,
                    op,
                    key,
                    after: self.inner.busy_timeout,
                },
                Some(
                    ErrorCode::NotADatabase
                    | ErrorCode::DatabaseCorrupt
                    | ErrorCode::CannotOpen
                    | ErrorCode::ReadOnly
                    | ErrorCode::PermissionDenied
                    | ErrorCode::DiskFull
                    | ErrorCode::SystemIoFailure,
                ) => Error::Storage {
                    backend,
                    reason: format!("{op} on key {key:?} failed: {}", schema::explain(&e)),
                },
                _ => Error::Backend {
                    backend,
                    op,
                    key,
                    cause: Box::new(e),
                },
            },
            Fault::Data(detail) => Error::WrongType {
                key: format!("{}/{key}", schema::LEASES),
                detail,
            },
            Fault::Clock(cause) => Error::Backend {
                backend,
                op,
                key,
                cause: cause.into(),
            },
            Fault::Own(e) => e,
        }
    }

    /// The path of the database, as given to [`open`](Self::open).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The canonical path of the database, resolved the first time waiters
    /// need it (a process that only takes and releases leases never does).
    /// A path that cannot be resolved still names the file: only two stores
    /// of one file under different names would then not share their
    /// waiters' wake-ups.
    fn file(&self) -> &Path {
        self.inner.file.get_or_init(|| {
            std::fs::canonicalize(&self.inner.path).unwrap_or_else(|_| self.inner.path.clone())
        })
    }
}

#[cfg(test)]
mod tests;
