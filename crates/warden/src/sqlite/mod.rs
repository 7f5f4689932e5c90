//! Leases in an embedded SQLite database: the single-host default.

mod clock;
mod limit;
mod record;
mod schema;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use crate::duration::millis_i64;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStatus, LeaseStore, ReleaseOutcome, ReleaseWatch, valid_until,
};
use crate::token::OwnerToken;
use clock::HostTime;

/// How long an operation waits for another process's write lock by default.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of a [`SqliteStore`].
#[derive(Debug, Clone)]
#[must_use]
pub struct SqliteOptions {
    /// How long one operation waits for the write lock held by another
    /// connection before failing with [`Error::Timeout`] (default
    /// [`DEFAULT_BUSY_TIMEOUT`]).
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
        }
    }
}

impl SqliteOptions {
    /// Sets the busy timeout.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }
}

/// Leases in a SQLite file, shared by every process on the host that opens it:
/// no server to run, and the same lease and fence semantics as Redis.
///
/// - **Atomic across processes.** Every change is one `BEGIN IMMEDIATE`
///   transaction: read the row, decide, write. The database is in WAL mode and
///   waits for other writers up to [`SqliteOptions::busy_timeout`].
/// - **Durable fences.** The fence counter lives in the lease's row, which is
///   never deleted: releasing or expiring a lease clears its owner, not its
///   counter. Commits are synchronous (`synchronous=FULL`), so after a crash or a
///   power cut the next fence is still greater than every fence handed out.
/// - **Expiry on the holders' deadline clock** ([`SystemClock`](crate::clock::SystemClock):
///   `CLOCK_BOOTTIME` on Linux, `CLOCK_MONOTONIC` on macOS), which a wall-clock
///   change does not move and a suspend does not stop; with the boot id stored
///   beside it, a reboot expires every lease. See the notes on the clock choice
///   in the `clock` module of the source.
/// - **Blocking calls stay off the async runtime**: each operation runs on
///   tokio's blocking pool.
///
/// Waiters poll (with jittered backoff up to 250 ms): SQLite cannot notify
/// other processes of a release.
///
/// Storage: table `warden_leases`, one row per key (`key`, `fence`, `token`,
/// `boot_id`, `expires_at_ms`, `ttl_ms`). The file is marked with
/// `PRAGMA application_id = 0x5744454E`; warden refuses to write into SQLite files
/// of other applications.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> warden::Result<()> {
/// use std::time::Duration;
/// use warden::sqlite::{SqliteStore, SqliteOptions};
/// use warden::Warden;
///
/// let dir = std::env::temp_dir().join(format!("warden-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).expect("temp dir");
/// let backend = SqliteStore::open(dir.join("warden.db"), SqliteOptions::default()).await?;
/// let warden = Warden::with_backend(backend);
/// let guard = warden.lease("backup").ttl(Duration::from_secs(10)).try_acquire().await?
///     .into_guard().expect("free");
/// assert!(warden.status("backup").await?.held);
/// guard.release().await?;
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    conn: Mutex<Connection>,
    path: PathBuf,
    display: String,
    /// The boot id rows are stamped with (tagged with the clock on Linux).
    boot: Arc<str>,
    /// The bare boot id, which rows of older versions carry.
    bare_boot: Arc<str>,
    busy_timeout: Duration,
}

/// `sqlite:PATH`, as in messages.
fn display(path: &Path) -> String {
    format!("sqlite:{}", path.display())
}

/// Why an operation failed, before the backend adds its context.
enum Fault {
    Sql(rusqlite::Error),
    /// A row warden cannot use (negative fence, counter exhausted).
    Data(String),
    /// The host clock could not be read.
    Clock(String),
    /// An error of warden's own (bad input, bad stored data), passed through.
    Warden(Error),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Self {
        Fault::Sql(e)
    }
}

impl From<Error> for Fault {
    fn from(e: Error) -> Self {
        Fault::Warden(e)
    }
}

/// The lease columns of one row.
struct Row {
    fence: i64,
    token: Option<String>,
    boot: Option<String>,
    expires_at_ms: Option<i64>,
    ttl_ms: Option<i64>,
}

impl Row {
    /// The remaining TTL if the lease is held at `now`, else `None`.
    ///
    /// A lease is held when it has an owner, was written during this boot (on
    /// the store clock, or a legacy row on the clock it was written with), has
    /// not reached its expiry, and its remaining time is at most its TTL — more
    /// than that means the clock went backwards, which only a restarted clock
    /// does.
    fn held_for(&self, now: &HostTime) -> Option<Duration> {
        self.token.as_ref()?;
        let now_ms = now.ms_for(self.boot.as_deref()?)?;
        let left = self.expires_at_ms?.checked_sub(now_ms)?;
        if left <= 0 || left > self.ttl_ms? {
            return None;
        }
        u64::try_from(left).ok().map(Duration::from_millis)
    }

    fn held_by(&self, token: &OwnerToken, now: &HostTime) -> bool {
        self.token.as_deref() == Some(token.as_str()) && self.held_for(now).is_some()
    }
}

/// One transaction: begin, read the host clock under the lock, run `f`, commit.
fn attempt<T>(
    conn: &mut Connection,
    inner: &Inner,
    behavior: TransactionBehavior,
    f: &impl Fn(&Connection, &HostTime) -> Result<T, Fault>,
) -> Result<T, Fault> {
    let tx = conn.transaction_with_behavior(behavior)?;
    let now = HostTime::read(&inner.boot, &inner.bare_boot).map_err(Fault::Clock)?;
    let out = f(&tx, &now)?;
    tx.commit()?;
    Ok(out)
}

fn ttl_ms(ttl: Duration) -> i64 {
    millis_i64(ttl).max(1)
}

fn read_row(conn: &Connection, key: &str) -> rusqlite::Result<Option<Row>> {
    conn.query_row(
        "SELECT fence, token, boot_id, expires_at_ms, ttl_ms FROM warden_leases WHERE key = ?1",
        [key],
        |r| {
            Ok(Row {
                fence: r.get(0)?,
                token: r.get(1)?,
                boot: r.get(2)?,
                expires_at_ms: r.get(3)?,
                ttl_ms: r.get(4)?,
            })
        },
    )
    .optional()
}

impl SqliteStore {
    /// Opens the database at `path`, creating the file (not its directory) and
    /// warden's table if needed.
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
        let busy_timeout = options.busy_timeout;
        let opened = path.clone();
        let conn = tokio::task::spawn_blocking(move || schema::open(&opened, busy_timeout))
            .await
            .map_err(|e| Error::Storage {
                backend: display.clone(),
                reason: format!("opening it failed: {e}"),
            })??;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                path,
                display,
                boot: clock::boot_id(),
                bare_boot: clock::bare_boot_id(),
                busy_timeout,
            }),
        })
    }

    /// Runs `f` in a transaction on the blocking pool, with the host time read
    /// once the transaction holds its lock.
    async fn transact<T: Send + 'static>(
        &self,
        op: &'static str,
        key: &str,
        behavior: TransactionBehavior,
        f: impl Fn(&Connection, &HostTime) -> Result<T, Fault> + Send + 'static,
    ) -> Result<T> {
        let inner = Arc::clone(&self.inner);
        let joined = tokio::task::spawn_blocking(move || {
            // A panic in another operation cannot leave the connection inside a
            // transaction (the Transaction rolls back on drop), so poisoning is
            // ignored.
            let mut conn = inner.conn.lock().unwrap_or_else(|e| e.into_inner());
            // SQLite sometimes answers BUSY without waiting (a lock upgrade that
            // could deadlock, WAL recovery by another process). A failed
            // transaction changed nothing: try again, within the busy timeout.
            let deadline = std::time::Instant::now() + inner.busy_timeout;
            loop {
                match attempt(&mut conn, &inner, behavior, &f) {
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
        let fault = match joined {
            Ok(Ok(out)) => return Ok(out),
            Ok(Err(fault)) => fault,
            Err(join) => Fault::Clock(format!("the blocking task failed: {join}")),
        };
        Err(self.error(op, key, fault))
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
            Fault::Warden(e) => e,
        }
    }

    /// The path of the database, as given to [`open`](Self::open).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<AcquireReply> {
        let sent = crate::clock::now();
        let (owned_key, token) = (key.to_string(), token.as_str().to_string());
        let ttl_ms = ttl_ms(ttl);
        let fence = self
            .transact(
                "acquire",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| {
                    let row = read_row(tx, &owned_key)?;
                    if let Some(left) = row.as_ref().and_then(|r| r.held_for(now)) {
                        return Ok(Err(left));
                    }
                    let last = row.map_or(0, |r| r.fence);
                    let fence = last
                        .checked_add(1)
                        .filter(|f| *f > 0)
                        .ok_or_else(|| Fault::Data(format!("fence counter is {last}")))?;
                    tx.execute(
                        "INSERT INTO warden_leases (key, fence, token, boot_id, expires_at_ms, ttl_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                         ON CONFLICT (key) DO UPDATE SET
                           fence = excluded.fence, token = excluded.token,
                           boot_id = excluded.boot_id, expires_at_ms = excluded.expires_at_ms,
                           ttl_ms = excluded.ttl_ms",
                        params![
                            owned_key,
                            fence,
                            token,
                            &*now.boot,
                            now.ms().saturating_add(ttl_ms),
                            ttl_ms
                        ],
                    )?;
                    Ok(Ok(fence))
                },
            )
            .await?;
        Ok(match fence {
            Ok(fence) => AcquireReply::Acquired {
                // Positive by the check above.
                fence: Fence::new(fence.unsigned_abs()),
                valid_until: valid_until(sent, ttl),
            },
            Err(left) => AcquireReply::Held {
                ttl_left: Some(left),
            },
        })
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        let sent = crate::clock::now();
        let (owned_key, token) = (key.to_string(), token.clone());
        let ttl_ms = ttl_ms(ttl);
        let extended = self
            .transact(
                "extend",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| {
                    match read_row(tx, &owned_key)? {
                        Some(row) if row.held_by(&token, now) => {}
                        _ => return Ok(false),
                    }
                    // Stamps the current boot id too: a legacy row moves to the
                    // store clock with its new expiry.
                    tx.execute(
                        "UPDATE warden_leases SET expires_at_ms = ?2, ttl_ms = ?3, boot_id = ?4
                         WHERE key = ?1",
                        params![
                            owned_key,
                            now.ms().saturating_add(ttl_ms),
                            ttl_ms,
                            &*now.boot
                        ],
                    )?;
                    Ok(true)
                },
            )
            .await?;
        Ok(if extended {
            ExtendReply::Extended {
                valid_until: valid_until(sent, ttl),
            }
        } else {
            ExtendReply::NotHeld
        })
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let (owned_key, token) = (key.to_string(), token.clone());
        self.transact(
            "release",
            key,
            TransactionBehavior::Immediate,
            move |tx, now| {
                match read_row(tx, &owned_key)? {
                    Some(row) if row.held_by(&token, now) => {}
                    _ => return Ok(ReleaseOutcome::NotHeld),
                }
                tx.execute(
                    "UPDATE warden_leases
                     SET token = NULL, boot_id = NULL, expires_at_ms = NULL, ttl_ms = NULL
                     WHERE key = ?1",
                    [&owned_key],
                )?;
                Ok(ReleaseOutcome::Released)
            },
        )
        .await
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let owned_key = key.to_string();
        let (ttl_left, fence) = self
            .transact(
                "status",
                key,
                TransactionBehavior::Deferred,
                move |tx, now| {
                    let Some(row) = read_row(tx, &owned_key)? else {
                        return Ok((None, None));
                    };
                    let fence = u64::try_from(row.fence)
                        .map_err(|_| Fault::Data(format!("fence counter is {}", row.fence)))?;
                    Ok((row.held_for(now), (fence > 0).then(|| Fence::new(fence))))
                },
            )
            .await?;
        Ok(LeaseStatus {
            held: ttl_left.is_some(),
            ttl_left,
            fence,
            storage_key: format!("{}/{key}", schema::LEASES),
        })
    }

    async fn watch_releases(&self, _key: &str) -> ReleaseWatch {
        // Other processes cannot notify this one: waiters poll.
        ReleaseWatch::polling()
    }

    fn describe(&self) -> String {
        self.inner.display.clone()
    }
}

#[cfg(test)]
mod tests;
