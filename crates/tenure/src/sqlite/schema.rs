//! Opening a tenure database: checks that the file is ours, creates the tables.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::Rng;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::error::{Error, Result};

/// `PRAGMA application_id` of a tenure database ("WDEN"): tells tenure's files
/// apart from other SQLite databases, so tenure never writes into someone
/// else's.
pub(crate) const APPLICATION_ID: i32 = 0x5744_454E;

/// `PRAGMA user_version` of the current schema. A database with a higher
/// version was written by a newer tenure and is refused rather than misread;
/// one with a lower version is migrated when opened (see [`MIGRATIONS`]).
///
/// - 1: leases, limits, clock.
/// - 2: the holder columns of `tenure_leases`.
pub(crate) const SCHEMA_VERSION: i32 = 2;

/// The table of leases: one row per key, which carries the key's fence
/// counter. A row that is not held and whose last fence is older than the
/// fence retention is deleted by later grants: fences are floored by the
/// host's clock, so the key's next fence is still above its earlier ones.
pub(crate) const LEASES: &str = "tenure_leases";

/// `PRAGMA wal_autocheckpoint`: the log's length in pages at which a commit
/// copies it into the file (SQLite's default is 1000). The first connection
/// to open the file reads the whole log back, so this bounds what a cold
/// start reads (about 128 KB with [`PAGE_SIZE`], against 4 MB); a checkpoint
/// costs two fsyncs, once every sixty-odd `tenure run`s (two pages each).
pub(super) const CHECKPOINT_PAGES: i64 = 128;

/// `PRAGMA page_size` of a file tenure creates (SQLite's default is 4096).
/// A lease's row is a few hundred bytes and a commit writes each page it
/// changed whole into the log, which a cold start reads back and checksums
/// page by page: small pages make both a quarter as long. Files created
/// with another page size keep it.
pub(super) const PAGE_SIZE: i64 = 1024;

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS tenure_leases (
    key           TEXT PRIMARY KEY NOT NULL,
    fence         INTEGER NOT NULL,  -- last fence handed out (floored by the wall clock, µs)
    token         TEXT,              -- owner token; NULL when released
    boot_id       TEXT,              -- boot during which expires_at_ms was read
    expires_at_ms INTEGER,           -- store clock milliseconds (see clock.rs)
    ttl_ms        INTEGER,           -- the TTL that expires_at_ms was set with
    holder_host   TEXT,              -- who holds it, when recorded (never the token)
    holder_pid    INTEGER,
    holder_label  TEXT,
    acquired_at_ms INTEGER,          -- store clock milliseconds at the acquisition
    expires_at_wall_ms INTEGER       -- wall-clock ms since the epoch: the expiry as
                                     -- another boot (or kernel) reads it
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS tenure_limits (
    key           TEXT PRIMARY KEY NOT NULL,  -- a policy's storage key
    state         BLOB NOT NULL,              -- the algorithm's state, encoded
    expires_at_us INTEGER NOT NULL            -- limiter clock; after it, as no state
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tenure_limits_expiry ON tenure_limits (expires_at_us);

-- The waiting lines of leases (see line.rs): one row per waiter, first in
-- line first by rowid. Added without a new schema version: versions that do
-- not know it ignore it (their releases free the lease instead of handing it
-- over, and the first waiter in line takes it when it next looks).
CREATE TABLE IF NOT EXISTS tenure_waiters (
    seq           INTEGER PRIMARY KEY,  -- rowid: the order of arrival
    key           TEXT NOT NULL,
    token         TEXT NOT NULL,        -- the waiter's owner token
    ttl_ms        INTEGER NOT NULL,     -- the TTL it asked for
    boot_id       TEXT NOT NULL,        -- boot during which expires_at_ms was read
    expires_at_ms INTEGER NOT NULL      -- store clock ms; the place dies after it
) STRICT;
CREATE INDEX IF NOT EXISTS tenure_waiters_line ON tenure_waiters (key, seq);
-- A second index, by (key, token), is created by the first waiter to join a
-- line (line.rs, TOKEN_INDEX).

CREATE TABLE IF NOT EXISTS tenure_clock (
    boot_id   TEXT PRIMARY KEY NOT NULL,  -- the boot this origin belongs to
    origin_us INTEGER NOT NULL            -- wall-clock µs at store clock zero
) STRICT;
";

/// Opens (creating if needed) the database at `path`, not yet prepared
/// (see [`prepare_within`]): no lock is taken.
pub(crate) fn connect(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| storage(path, not_opened(path, &e)))?;
    conn.set_prepared_statement_cache_capacity(super::cached::CAPACITY);
    // A plan that does not depend on the values bound to it: otherwise
    // SQLite marks a statement whose `LIMIT ?` or range bound it could
    // fold, and compiles it again each time that parameter is bound, which
    // defeats the cache.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(|e| storage(path, explain(&e)))?;
    Ok(conn)
}

/// Why SQLite could not open `path`, in words a user can act on. The path is
/// looked at only now: each look costs a system call, which a cold start
/// that opens the file would pay for nothing.
fn not_opened(path: &Path, e: &rusqlite::Error) -> String {
    if path.is_dir() {
        return "the path is a directory, not a database file".into();
    }
    if let Some(parent) = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !p.is_dir())
    {
        return format!("its directory {} does not exist", parent.display());
    }
    // Opening it as SQLite does names what the OS refused (permission
    // denied, a read-only file system), which SQLite's message does not.
    // Where it does not exist, a probe file of this process's own beside it
    // is created and removed instead: never the database's own name, which
    // another process may be creating.
    let (probe, exists) = if path.exists() {
        (path.to_path_buf(), true)
    } else {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".probe-{}", std::process::id()));
        (std::path::PathBuf::from(name), false)
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(!exists)
        .open(&probe);
    match opened {
        Err(os) if exists => format!("{}: {os}", explain(e)),
        Err(os) => format!("{}: it cannot be created: {os}", explain(e)),
        Ok(_) => {
            if !exists {
                let _ = std::fs::remove_file(&probe);
            }
            explain(e)
        }
    }
}

/// Why [`prepare_within`] left a file unprepared.
#[derive(Debug)]
pub(crate) enum Unprepared {
    /// Other connections still held the locks it needs (the error says so).
    Locked(Error),
    /// The file cannot be used.
    Unusable(Error),
}

impl From<Unprepared> for Error {
    fn from(e: Unprepared) -> Self {
        match e {
            Unprepared::Locked(e) | Unprepared::Unusable(e) => e,
        }
    }
}

/// Prepares the connection `conn` to `path` (checks that the file is
/// tenure's, creates the tables, sets the pragmas) and tells whether the file
/// is in WAL mode. Waits up to `wait` while other connections hold the locks
/// this needs (it may sleep), which is also the connection's busy timeout
/// from then on.
pub(crate) fn prepare_within(
    conn: &mut Connection,
    path: &Path,
    wait: Duration,
) -> Result<bool, Unprepared> {
    // Switching a new file to WAL upgrades a read lock to an exclusive one, and
    // SQLite answers BUSY at once (without waiting) when two connections try
    // that together. Preparing is idempotent: try again until the deadline.
    let deadline = Instant::now() + wait;
    loop {
        match prepare(conn, wait) {
            Ok(wal) => return Ok(wal),
            Err(Prepare::Sql(e)) if is_busy(&e) && Instant::now() < deadline => {
                let pause = rand::rng().random_range(2..=20);
                std::thread::sleep(Duration::from_millis(pause));
            }
            Err(Prepare::Sql(e)) if is_busy(&e) => {
                return Err(Unprepared::Locked(storage(path, explain(&e))));
            }
            Err(Prepare::Sql(e)) => return Err(Unprepared::Unusable(storage(path, explain(&e)))),
            Err(Prepare::Foreign(reason)) => {
                return Err(Unprepared::Unusable(storage(path, reason)));
            }
        }
    }
}

/// The file at `path` cannot be used, for `reason`.
fn storage(path: &Path, reason: String) -> Error {
    Error::Storage {
        backend: super::display(path),
        reason,
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED: another connection holds the lock.
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

enum Prepare {
    Sql(rusqlite::Error),
    Foreign(String),
}

impl From<rusqlite::Error> for Prepare {
    fn from(e: rusqlite::Error) -> Self {
        Prepare::Sql(e)
    }
}

fn prepare(conn: &mut Connection, busy_timeout: Duration) -> Result<bool, Prepare> {
    conn.busy_timeout(busy_timeout)?;
    // The first read of the header: a file that is not a SQLite database fails
    // here with SQLITE_NOTADB. One query in one read transaction, so that the
    // header and the table list come from one snapshot: another process may be
    // creating the tables right now.
    let snapshot = conn.transaction()?;
    let found = Found::read(&snapshot)?;
    snapshot.finish()?;
    found.check_ownership()?;
    if found.is_empty() {
        // Only before the first write (switching to WAL writes the header).
        conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    }
    // WAL lets readers (status) run while a writer holds the lock, and makes a
    // commit one append. It is a property of the file: set once, kept.
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    let wal = mode.eq_ignore_ascii_case("wal");
    if wal {
        // The log stays beside the file when the last connection closes,
        // instead of being copied into it and deleted: that close would cost
        // two fsyncs, and recreating the log at the next open two more
        // (the log and its directory). Its size stays bounded by SQLite's
        // automatic checkpoints, which commits run.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
        // The first connection to open the file reads the whole log back
        // (SQLite's WAL recovery): a shorter log makes every cold start
        // cheaper, for a checkpoint every hundred-odd commits.
        conn.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_PAGES)?;
    } else {
        tracing::debug!(%mode, "SQLite refused WAL mode; using its default journal");
    }
    // `synchronous` is left to the first transaction, which sets the level
    // its commit needs (see `Commit` in the parent module).
    if found.is_ready() {
        // The usual case: no write (and no fsync) just to open the file. A
        // file found ready stays ready: nothing drops tenure's tables.
        return Ok(wal);
    }
    // FULL: the tables are on disk before the file is used.
    conn.pragma_update(None, "synchronous", "FULL")?;
    // Creating the tables is serialised with other processes opening the same new
    // file; the ownership check is repeated under the write lock.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    Found::read(&tx)?.check_ownership()?;
    tx.execute_batch(CREATE)?;
    migrate(&tx)?;
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(wal)
}

/// The columns later schema versions added to a table, with their types: a
/// file of an older version gets the ones it lacks when opened (existing rows
/// read them as NULL: no holder recorded, no wall-clock expiry). The last one
/// came without a new schema version (versions that do not know it ignore
/// it), so [`Found`] looks for it.
const MIGRATIONS: [(&str, &str, &str); 5] = [
    ("tenure_leases", "holder_host", "TEXT"),
    ("tenure_leases", "holder_pid", "INTEGER"),
    ("tenure_leases", "holder_label", "TEXT"),
    ("tenure_leases", "acquired_at_ms", "INTEGER"),
    ("tenure_leases", "expires_at_wall_ms", "INTEGER"),
];

/// Whether `table` has `column`.
fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    let present: i64 = conn.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |row| row.get(0),
    )?;
    Ok(present > 0)
}

/// Adds the columns of [`MIGRATIONS`] that the file lacks (inside the
/// caller's write transaction, so a failure leaves the file as it was).
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column, kind) in MIGRATIONS {
        if !has_column(conn, table, column)? {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))?;
        }
    }
    Ok(())
}

/// Every object of [`CREATE`], for [`Found::read_all`].
const OBJECTS: [&str; 6] = [
    "tenure_leases",
    "tenure_limits",
    "tenure_limits_expiry",
    "tenure_waiters",
    "tenure_waiters_line",
    "tenure_clock",
];

/// The tables of [`CREATE`], for [`Found::read`]. Each index of [`CREATE`]
/// is created in the transaction that creates its table, and nothing drops
/// either: a file that has the tables has the indexes.
const TABLES: [&str; 4] = [
    "tenure_leases",
    "tenure_limits",
    "tenure_waiters",
    "tenure_clock",
];

/// What one read of a file's header and schema found.
struct Found {
    /// `PRAGMA application_id`.
    app: i32,
    /// `PRAGMA user_version`.
    version: i32,
    /// Whether the file's schema has any object.
    has_objects: bool,
    /// Whether it has every object of [`OBJECTS`] and the column of the last
    /// [`MIGRATIONS`] entry.
    complete: bool,
}

impl Found {
    /// Reads the header, and the schema as far as needed, inside the caller's
    /// transaction (one snapshot). A cold start pays for every statement
    /// compiled here, so a current file costs two small ones: the header's
    /// two fields, then the tables and the last column looked up in the
    /// schema SQLite loads anyway (no SQL). Anything else is read in full
    /// by [`read_all`](Self::read_all).
    fn read(conn: &Connection) -> rusqlite::Result<Self> {
        let app: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
        let version: i32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if app == APPLICATION_ID && version == SCHEMA_VERSION && Self::has_all(conn)? {
            return Ok(Found {
                app,
                version,
                has_objects: true,
                complete: true,
            });
        }
        Self::read_all(conn)
    }

    /// Whether the file has every table of [`TABLES`] and the column of the
    /// last [`MIGRATIONS`] entry.
    fn has_all(conn: &Connection) -> rusqlite::Result<bool> {
        let (table, column, _) = MIGRATIONS[MIGRATIONS.len() - 1];
        for name in TABLES {
            if !conn.table_exists(Some("main"), name)? {
                return Ok(false);
            }
        }
        conn.column_exists(Some("main"), table, column)
    }

    /// Reads the header and counts the schema's objects, in one statement.
    fn read_all(conn: &Connection) -> rusqlite::Result<Self> {
        let (table, column, _) = MIGRATIONS[MIGRATIONS.len() - 1];
        let names = vec!["?"; OBJECTS.len()].join(", ");
        let sql = format!(
            "SELECT (SELECT application_id FROM pragma_application_id), \
                    (SELECT user_version FROM pragma_user_version), \
                    (SELECT count(*) FROM sqlite_schema), \
                    (SELECT count(*) FROM sqlite_schema WHERE name IN ({names})), \
                    (SELECT count(*) FROM pragma_table_info(?) WHERE name = ?)"
        );
        let mut params: Vec<&str> = OBJECTS.to_vec();
        params.extend([table, column]);
        conn.query_row(&sql, rusqlite::params_from_iter(params), |row| {
            let ours: i64 = row.get(3)?;
            Ok(Found {
                app: row.get(0)?,
                version: row.get(1)?,
                has_objects: row.get::<_, i64>(2)? > 0,
                complete: usize::try_from(ours) == Ok(OBJECTS.len()) && row.get::<_, i64>(4)? > 0,
            })
        })
    }

    /// Whether the file is new: no header fields set, no objects.
    fn is_empty(&self) -> bool {
        self.app == 0 && self.version == 0 && !self.has_objects
    }

    /// Whether the file is a tenure database of this schema with all its objects.
    fn is_ready(&self) -> bool {
        self.app == APPLICATION_ID && self.version == SCHEMA_VERSION && self.complete
    }

    /// Refuses databases that belong to another application or a newer tenure.
    fn check_ownership(&self) -> Result<(), Prepare> {
        let (app, version) = (self.app, self.version);
        if app == APPLICATION_ID {
            if version > SCHEMA_VERSION {
                return Err(Prepare::Foreign(format!(
                    "the file was written by a newer tenure (schema version {version}, this one knows {SCHEMA_VERSION})"
                )));
            }
            return Ok(());
        }
        if app != 0 {
            return Err(Prepare::Foreign(format!(
                "the file belongs to another application (application_id {app:#x}); tenure will not write into it"
            )));
        }
        if self.has_objects {
            return Err(Prepare::Foreign(
                "the file is a SQLite database of another application (it has tables tenure did not create); \
                 tenure will not write into it"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A SQLite error in words a user can act on.
pub(crate) fn explain(e: &rusqlite::Error) -> String {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => {
            "the file is not a SQLite database (or is encrypted)".into()
        }
        Some(ErrorCode::DatabaseCorrupt) => format!("the file is corrupt: {e}"),
        Some(ErrorCode::CannotOpen) => format!("the file cannot be opened: {e}"),
        Some(ErrorCode::ReadOnly) | Some(ErrorCode::PermissionDenied) => {
            format!("the file is not writable: {e}")
        }
        Some(ErrorCode::DiskFull) => format!("the file cannot grow, the disk is full: {e}"),
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => {
            format!("the file stayed locked by another process: {e}")
        }
        _ => e.to_string(),
    }
}
