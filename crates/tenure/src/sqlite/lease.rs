//! The [`LeaseStore`] impl of [`SqliteStore`]: one row per key in
//! `tenure_leases`, read, decided on and written in one transaction, with
//! expiry on the store clock of this boot (see the `clock` module). The store
//! itself, its options and the transaction runner are in the parent module.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::cached::CachedSql;
use super::clock::HostTime;
use super::notify::Wanted;
use super::{Commit, Fault, Place, SqliteStore, line, schema};
use crate::duration::millis_i64;
use crate::error::Result;
use crate::fence::{Fence, FloorUnit, wall_clock_us};
use crate::lease::{
    AcquireReply, ExtendReply, Holder, HolderInfo, LeaseStatus, LeaseStore, QueuePlace,
    ReleaseOutcome, ReleaseWatch, elapsed_ms, valid_until,
};
use crate::token::OwnerToken;

/// The lease columns of one row.
pub(super) struct Row {
    pub(super) fence: i64,
    pub(super) token: Option<String>,
    boot: Option<String>,
    expires_at_ms: Option<i64>,
    ttl_ms: Option<i64>,
    host: Option<String>,
    pid: Option<i64>,
    label: Option<String>,
    acquired_at_ms: Option<i64>,
    expires_at_wall_ms: Option<i64>,
}

impl Row {
    /// The remaining TTL if the lease is held at `now`, else `None`.
    ///
    /// A lease is held when it has an owner and has not reached its expiry:
    /// on the store clock when it was written during this boot (or a legacy
    /// row on the clock it was written with), its remaining time at most its
    /// TTL — more than that means the clock went backwards, which only a
    /// restarted clock does.
    ///
    /// A row written under a boot id this kernel does not know comes from a
    /// previous boot of this host — or from another kernel sharing the file
    /// (a VM or container over virtiofs/9p, WSL2 and Windows), which tenure
    /// does not support but must not turn into two holders: it is held until
    /// its wall-clock expiry, for at most its TTL from now. A row without one
    /// (written by an older tenure) is free, as it always was.
    pub(super) fn held_for(&self, now: &HostTime) -> Option<Duration> {
        self.token.as_ref()?;
        let ttl = self.ttl_ms?;
        let left = match now.ms_for(self.boot.as_deref()?) {
            Some(now_ms) => self.expires_at_ms?.checked_sub(now_ms)?,
            None => {
                let wall_ms = i64::try_from(wall_clock_us() / 1000).ok()?;
                self.expires_at_wall_ms?.checked_sub(wall_ms)?.min(ttl)
            }
        };
        if left <= 0 || left > ttl {
            return None;
        }
        u64::try_from(left).ok().map(Duration::from_millis)
    }

    fn held_by(&self, token: &OwnerToken, now: &HostTime) -> bool {
        self.token.as_deref() == Some(token.as_str()) && self.held_for(now).is_some()
    }

    /// The recorded holder, with the time since the acquisition on the store
    /// clock of this boot.
    fn holder(&self, now: &HostTime) -> Option<Holder> {
        let info = HolderInfo {
            host: self.host.clone()?,
            pid: u32::try_from(self.pid?).ok()?,
            label: self.label.clone(),
        };
        let now_ms = self.boot.as_deref().and_then(|b| now.ms_for(b));
        let held_for = self
            .acquired_at_ms
            .zip(now_ms)
            .and_then(|(since, now)| elapsed_ms(since, now));
        Some(Holder::new(info, held_for))
    }

    /// The status of this row at `now`; `storage_key` names the row.
    fn status(&self, now: &HostTime, storage_key: String) -> Result<LeaseStatus, Fault> {
        let fence = u64::try_from(self.fence)
            .map_err(|_| Fault::Data(format!("fence counter is {}", self.fence)))?;
        let mut status = LeaseStatus::free(storage_key, (fence > 0).then(|| Fence::new(fence)));
        if let Some(left) = self.held_for(now) {
            status.held = true;
            status.ttl_left = Some(left);
            status.holder = self.holder(now);
        }
        Ok(status)
    }
}

/// The columns [`Row::from_sql`] reads, in its order: a macro, so that the
/// statements that select them are constants (a cached statement is looked
/// up by its text, which then need not be formatted on every call).
macro_rules! row_columns {
    () => {
        "fence, token, boot_id, expires_at_ms, ttl_ms, holder_host, holder_pid, holder_label, \
         acquired_at_ms, expires_at_wall_ms"
    };
}

/// The row of one key.
const SELECT_ROW: &str = concat!(
    "SELECT ",
    row_columns!(),
    " FROM tenure_leases WHERE key = ?1"
);

/// The next rows after a key, for the pruner.
const SELECT_AFTER: &str = concat!(
    "SELECT key, ",
    row_columns!(),
    " FROM tenure_leases WHERE key > ?1 ORDER BY key LIMIT ?2"
);

/// The held rows under a prefix, for `list`.
const SELECT_HELD: &str = concat!(
    "SELECT key, ",
    row_columns!(),
    " FROM tenure_leases
     WHERE token IS NOT NULL AND substr(key, 1, length(?1)) = ?1
     ORDER BY key"
);

impl Row {
    /// A row selected with `row_columns!` from column `at` on.
    fn from_sql(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Row> {
        Ok(Row {
            fence: r.get(at)?,
            token: r.get(at + 1)?,
            boot: r.get(at + 2)?,
            expires_at_ms: r.get(at + 3)?,
            ttl_ms: r.get(at + 4)?,
            host: r.get(at + 5)?,
            pid: r.get(at + 6)?,
            label: r.get(at + 7)?,
            acquired_at_ms: r.get(at + 8)?,
            expires_at_wall_ms: r.get(at + 9)?,
        })
    }
}

fn storage_key(key: &str) -> String {
    format!("{}/{key}", schema::LEASES)
}

fn ttl_ms(ttl: Duration) -> i64 {
    millis_i64(ttl).max(1)
}

pub(super) fn read_row(conn: &Connection, key: &str) -> rusqlite::Result<Option<Row>> {
    conn.prepare_cached(SELECT_ROW)?
        .query_row([key], |r| Row::from_sql(r, 0))
        .optional()
}

/// The fence after `last` (0: no counter), floored by the host's wall clock
/// read now, inside the caller's transaction (see `fence::floor`); an error
/// when the counter is exhausted (or corrupt).
pub(super) fn next_fence(last: i64) -> Result<i64, Fault> {
    let corrupt = || Fault::Data(format!("fence counter is {last}"));
    let last = u64::try_from(last).map_err(|_| corrupt())?;
    crate::fence::next_fence(
        (last > 0).then_some(last),
        wall_clock_us(),
        FloorUnit::Micros,
    )
    .and_then(|f| i64::try_from(f).ok())
    .ok_or_else(corrupt)
}

/// How many rows one grant looks at for idle fence counters.
const PRUNE_BATCH: i64 = 4;

/// Deletes idle fence counters a few rows at a time, after grants: a row
/// that is not held and whose last fence is older than the retention (a
/// fence is at most a second below the wall clock of its grant) goes, and
/// the key's next fence starts from the clock again. Walks the table in key
/// order from the first key it was given, wrapping around, so every row is
/// looked at after a number of grants proportional to the table's size.
#[derive(Debug)]
pub(super) struct Pruner {
    retention_us: i64,
    /// The last key looked at (`None` before the first grant).
    cursor: std::sync::Mutex<Option<String>>,
}

impl Pruner {
    /// A pruner for the fence retention `retention`.
    pub(super) fn new(retention: Duration) -> Self {
        Pruner {
            retention_us: crate::duration::micros_i64(retention),
            cursor: std::sync::Mutex::new(None),
        }
    }

    /// Looks at the next [`PRUNE_BATCH`] rows (after `granted`, the key just
    /// granted, the first time) inside the grant's transaction.
    pub(super) fn run(
        &self,
        tx: &Connection,
        granted: &str,
        now: &HostTime,
    ) -> rusqlite::Result<()> {
        let wall_us = i64::try_from(wall_clock_us()).unwrap_or(i64::MAX);
        let cutoff = wall_us
            .saturating_sub(self.retention_us)
            .saturating_sub(1_000_000);
        let mut cursor = self.cursor.lock().unwrap_or_else(|e| e.into_inner());
        let after = cursor.get_or_insert_with(|| granted.to_string()).clone();
        let mut select = tx.prepare_cached(SELECT_AFTER)?;
        let rows = select
            .query_map(params![after, PRUNE_BATCH], |r| {
                Ok((r.get::<_, String>(0)?, Row::from_sql(r, 1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for (key, row) in &rows {
            if key != granted && row.fence < cutoff && row.held_for(now).is_none() {
                tx.execute_cached("DELETE FROM tenure_leases WHERE key = ?1", [key])?;
            }
        }
        // Fewer rows than asked for: the end of the table, start over.
        *cursor = match rows.last() {
            Some((key, _)) if i64::try_from(rows.len()) == Ok(PRUNE_BATCH) => Some(key.clone()),
            _ => Some(String::new()),
        };
        Ok(())
    }
}

/// The wall-clock expiry of a lease taken or renewed now for `ttl_ms`.
fn wall_expiry(ttl_ms: i64) -> i64 {
    i64::try_from(wall_clock_us() / 1000)
        .unwrap_or(i64::MAX)
        .saturating_add(ttl_ms)
}

/// Writes the lease of `key` for `token`: `fence`, an expiry `ttl_ms` from
/// `now`, and `holder` (or no holder).
pub(super) fn grant(
    tx: &Connection,
    key: &str,
    fence: i64,
    token: &str,
    ttl_ms: i64,
    holder: Option<&HolderInfo>,
    now: &HostTime,
) -> rusqlite::Result<()> {
    // Every column is written, so replacing the key's row is the same as
    // updating it, and REPLACE compiles to a shorter program than an upsert:
    // a cold start pays for every statement it compiles. (The table has no
    // triggers, and no foreign key points at it.)
    tx.prepare_cached(
        "INSERT OR REPLACE INTO tenure_leases (key, fence, token, boot_id, expires_at_ms,
           ttl_ms, holder_host, holder_pid, holder_label, acquired_at_ms, expires_at_wall_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        key,
        fence,
        token,
        &*now.boot,
        now.ms().saturating_add(ttl_ms),
        ttl_ms,
        holder.map(|h| h.host.as_str()),
        holder.map(|h| h.pid),
        holder.and_then(|h| h.label.as_deref()),
        holder.map(|_| now.ms()),
        wall_expiry(ttl_ms),
    ])?;
    Ok(())
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        let sent = crate::clock::now();
        let (owned_key, token) = (key.to_string(), token.as_str().to_string());
        let granted_to = token.clone();
        let holder = holder.cloned();
        let ttl_ms = ttl_ms(ttl);
        let inner = std::sync::Arc::clone(&self.inner);
        // Relaxed (no fsync in WAL mode): a power cut that undoes this grant
        // also ends its holder, and the clock floor keeps the next fence above
        // this one (docs/cli.md, "Durability").
        let fence = self
            .transact_as(
                Commit::Relaxed,
                "acquire",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| {
                    let row = read_row(tx, &owned_key)?;
                    if let Some(left) = row.as_ref().and_then(|r| r.held_for(now)) {
                        return Ok(Err(left));
                    }
                    let fence = next_fence(row.map_or(0, |r| r.fence))?;
                    grant(tx, &owned_key, fence, &token, ttl_ms, holder.as_ref(), now)?;
                    inner.pruner.run(tx, &owned_key, now)?;
                    Ok(Ok(fence))
                },
            )
            .await?;
        if let Ok(fence) = fence {
            self.changed(key, Some((fence, Some(granted_to))));
        }
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
        // Relaxed: a renewal lost in a power cut is moot, the reboot expires
        // the lease anyway.
        let extended = self
            .run(
                Place::Pool,
                (TransactionBehavior::Immediate, Commit::Relaxed),
                "extend",
                key,
                move |tx, now| {
                    match read_row(tx, &owned_key)? {
                        Some(row) if row.held_by(&token, now) => {}
                        _ => return Ok(false),
                    }
                    // Stamps the current boot id too: a legacy row moves to the
                    // store clock with its new expiry.
                    tx.execute_cached(
                        "UPDATE tenure_leases SET expires_at_ms = ?2, ttl_ms = ?3, boot_id = ?4,
                           expires_at_wall_ms = ?5
                         WHERE key = ?1",
                        params![
                            owned_key,
                            now.ms().saturating_add(ttl_ms),
                            ttl_ms,
                            &*now.boot,
                            wall_expiry(ttl_ms)
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
        // Relaxed: a release lost in a power cut is moot (the reboot expires
        // the lease), and a fence handed to the next waiter here reaches its
        // holder only through the holder's own claim, a durable commit that
        // puts this one on disk too.
        let state = self
            .transact_as(
                Commit::Relaxed,
                "release",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| match read_row(tx, &owned_key)? {
                    Some(row) if row.held_by(&token, now) => {
                        line::release_to_next(tx, &owned_key, &row, now).map(Some)
                    }
                    _ => Ok(None),
                },
            )
            .await?;
        Ok(match state {
            Some(state) => {
                self.changed(key, state);
                ReleaseOutcome::Released
            }
            None => ReleaseOutcome::NotHeld,
        })
    }

    async fn holder_token(&self, key: &str) -> Result<Option<OwnerToken>> {
        let owned_key = key.to_string();
        self.transact(
            "holder_token",
            key,
            TransactionBehavior::Deferred,
            move |tx, now| {
                Ok(read_row(tx, &owned_key)?
                    .filter(|row| row.held_for(now).is_some())
                    .and_then(|row| row.token)
                    .map(OwnerToken::from_stored))
            },
        )
        .await
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let owned_key = key.to_string();
        self.transact(
            "status",
            key,
            TransactionBehavior::Deferred,
            move |tx, now| {
                let mut status = match read_row(tx, &owned_key)? {
                    None => LeaseStatus::free(storage_key(&owned_key), None),
                    Some(row) => row.status(now, storage_key(&owned_key))?,
                };
                status.waiters = Some(line::waiting(tx, &owned_key, now)?);
                Ok(status)
            },
        )
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseStatus)>> {
        let prefix = prefix.to_string();
        self.transact("list", "", TransactionBehavior::Deferred, move |tx, now| {
            let mut select = tx.prepare_cached(SELECT_HELD)?;
            let rows = select.query_map([&prefix], |r| {
                Ok((r.get::<_, String>(0)?, Row::from_sql(r, 1)?))
            })?;
            let mut held = Vec::new();
            for found in rows {
                let (key, row) = found?;
                let status = row.status(now, storage_key(&key))?;
                if status.held {
                    held.push((key, status));
                }
            }
            // Counted as `status` counts them, in one pass over the waiters
            // (few, next to the leases a list may print).
            let waiting = line::waiting_by_key(tx, now)?;
            for (key, status) in &mut held {
                status.waiters = Some(waiting.get(key.as_str()).copied().unwrap_or(0));
            }
            Ok(held)
        })
        .await
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        self.watch_key(key, Wanted::Any).await
    }

    async fn wait_turn(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let sent = crate::clock::now();
        let (owned_key, owned_token) = (key.to_string(), token.as_str().to_string());
        let holder = holder.cloned();
        let ttl_ms = ttl_ms(ttl);
        // A place this store did not write is no place: stand in line anew.
        let place = place.and_then(|p| p.as_str().parse::<i64>().ok());
        if let Some(seq) = place
            && let Some(ttl_left) = self.quiet_look(key, token.as_str(), seq)
        {
            let held = AcquireReply::Held {
                ttl_left: Some(ttl_left),
            };
            return Ok((held, Some(QueuePlace::new(seq.to_string()))));
        }
        let start = self.look_starts(key, token.as_str());
        let look = self
            .transact_as(
                Commit::Relaxed,
                "wait",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| {
                    let request = line::Request {
                        key: &owned_key,
                        token: &owned_token,
                        ttl_ms,
                        holder: holder.as_ref(),
                        place,
                    };
                    line::look(tx, &request, now)
                },
            )
            .await?;
        let stands = look.place.zip(look.reply.err().flatten());
        self.look_ends(key, token.as_str(), start, stands);
        if let Some(state) = look.changed.clone() {
            self.changed(key, state);
        }
        let place = look.place.map(|seq| QueuePlace::new(seq.to_string()));
        Ok((line::reply(&look, sent, ttl), place))
    }

    async fn leave_line(
        &self,
        key: &str,
        token: &OwnerToken,
        _place: Option<&QueuePlace>,
    ) -> Result<ReleaseOutcome> {
        let (owned_key, owned_token) = (key.to_string(), token.as_str().to_string());
        let passed = self
            .transact_as(
                Commit::Relaxed,
                "leave",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| line::leave(tx, &owned_key, &owned_token, now),
            )
            .await?;
        Ok(match passed {
            Some(state) => {
                self.changed(key, state);
                ReleaseOutcome::Released
            }
            None => ReleaseOutcome::NotHeld,
        })
    }

    async fn watch_turn(&self, key: &str, token: &OwnerToken) -> ReleaseWatch {
        self.watch_key(key, Wanted::Turn(token.as_str().to_string()))
            .await
    }

    fn ready_turn_watch(&self, key: &str, token: &OwnerToken) -> Option<ReleaseWatch> {
        self.ready_watch(key, Wanted::Turn(token.as_str().to_string()))
    }

    fn describe(&self) -> String {
        self.inner.display.clone()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("sqlite")
    }
}
