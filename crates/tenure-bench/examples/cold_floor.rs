//! The least a one-shot lease run on SQLite does, for the cold-start bench
//! (`benches/peers/cli.rs`): no argument parser, no async runtime, no signal
//! forwarding, no waiting line, one table. It opens the file as tenure does
//! (WAL, 1 KiB pages, a log checkpointed every 128 pages and kept at close,
//! commits without fsync), takes the lease with a fence floored by the
//! clock (as tenure's are) in one write transaction, runs the command, and
//! deletes the lease by its token in a second. `scripts/bench` builds it
//! with the release profile, as it builds `tenure`.
//!
//! Usage: `cold_floor FILE COMMAND`; exits with the command's code, or 64
//! with a one-line message when it cannot run it.

// Linked for what its build script adds: GCC's unwinder from its static
// archive, as `tenure` links it.
extern crate tenure_bench;

use std::error::Error;
use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};

/// The lease's key and its time to live.
const KEY: &str = "bench";
const TTL_US: i64 = 30_000_000;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cold_floor: {e}");
            ExitCode::from(64)
        }
    }
}

/// The run: the command's exit code, or why there was none.
fn run() -> Result<ExitCode, Box<dyn Error>> {
    let mut args = std::env::args_os().skip(1);
    let (Some(file), Some(command)) = (args.next(), args.next()) else {
        return Err("usage: cold_floor FILE COMMAND".into());
    };
    let mut db = open(&file)?;
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros())?;
    let token = format!("{:x}-{now:x}", std::process::id());
    let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let taken = tx.execute(
        "INSERT INTO leases(key, token, fence, expires_us) VALUES (?1, ?2, ?4, ?3) \
         ON CONFLICT(key) DO UPDATE SET token = excluded.token, \
         fence = max(fence + 1, ?4), expires_us = excluded.expires_us \
         WHERE expires_us < ?4",
        (KEY, &token, now + TTL_US, now),
    )?;
    tx.commit()?;
    if taken != 1 {
        return Err("the lease is held".into());
    }
    // Released whether or not the command started.
    let status = Command::new(command).status();
    let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "DELETE FROM leases WHERE key = ?1 AND token = ?2",
        (KEY, &token),
    )?;
    tx.commit()?;
    Ok(ExitCode::from(
        u8::try_from(status?.code().unwrap_or(1)).unwrap_or(1),
    ))
}

/// The file, opened and set up as tenure's SQLite store sets up its own.
fn open(file: &std::ffi::OsStr) -> rusqlite::Result<Connection> {
    let db = Connection::open(file)?;
    db.busy_timeout(Duration::from_secs(10))?;
    db.pragma_update(None, "page_size", 1024)?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    db.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    db.pragma_update(None, "wal_autocheckpoint", 128)?;
    db.pragma_update(None, "synchronous", "NORMAL")?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS leases(key TEXT PRIMARY KEY, token TEXT NOT NULL, \
         fence INTEGER NOT NULL, expires_us INTEGER NOT NULL)",
    )?;
    Ok(db)
}
