//! Fenced records in the SQLite file: table `tenure_records`.
//!
//! Retention is measured on the wall clock (a record's retention is hours or
//! days, and must outlive a reboot, unlike a lease's expiry on the boot-time
//! clock).

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::cached::CachedSql;
use super::{Fault, SqliteStore, clock};
use crate::error::Result;
use crate::fence::Fence;
use crate::record::{PutOutcome, PutRule, Record, RecordStore};

/// Created on first use, so files of older versions gain it without a
/// migration (the statement is a no-op once the table exists).
const CREATE: &str = "CREATE TABLE IF NOT EXISTS tenure_records (
    key           TEXT PRIMARY KEY NOT NULL,
    fence         INTEGER NOT NULL,
    value         BLOB NOT NULL,
    expires_at_ms INTEGER            -- wall-clock ms since the epoch; NULL: kept
) STRICT, WITHOUT ROWID";

fn wall_ms() -> Result<i64, Fault> {
    clock::wall_us().map(|us| us / 1000).map_err(Fault::Clock)
}

/// The live record of `key`, deleting an expired one first.
fn live(tx: &Connection, key: &str) -> Result<Option<Record>, Fault> {
    tx.execute_cached(CREATE, [])?;
    let now = wall_ms()?;
    tx.execute_cached(
        "DELETE FROM tenure_records WHERE key = ?1 AND expires_at_ms <= ?2",
        params![key, now],
    )?;
    let row: Option<(i64, Vec<u8>)> = tx
        .query_row_cached(
            "SELECT fence, value FROM tenure_records WHERE key = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    row.map(|(fence, value)| {
        let fence =
            u64::try_from(fence).map_err(|_| Fault::Data(format!("record fence is {fence}")))?;
        Ok(Record {
            fence: Fence::new(fence),
            value,
        })
    })
    .transpose()
}

fn to_i64(fence: Fence) -> Result<i64, Fault> {
    i64::try_from(fence.get()).map_err(|_| Fault::Data(format!("fence {fence} is too large")))
}

#[async_trait]
impl RecordStore for SqliteStore {
    async fn get_record(&self, key: &str) -> Result<Option<Record>> {
        let owned = key.to_string();
        self.transact(
            "read record",
            key,
            TransactionBehavior::Immediate,
            move |tx, _| live(tx, &owned),
        )
        .await
    }

    async fn put_record(
        &self,
        key: &str,
        record: &Record,
        ttl: Option<Duration>,
        rule: PutRule,
    ) -> Result<PutOutcome> {
        let (owned, record) = (key.to_string(), record.clone());
        let ttl_ms = ttl.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX).max(1));
        self.transact(
            "write record",
            key,
            TransactionBehavior::Immediate,
            move |tx, _| {
                if let Some(current) = live(tx, &owned)? {
                    let keep = match rule {
                        PutRule::IfAbsent => true,
                        PutRule::IfNotOlder => current.fence > record.fence,
                    };
                    if keep {
                        return Ok(PutOutcome::Kept(current));
                    }
                }
                let expires = match ttl_ms {
                    Some(ms) => Some(wall_ms()?.saturating_add(ms)),
                    None => None,
                };
                tx.execute_cached(
                    "INSERT OR REPLACE INTO tenure_records (key, fence, value, expires_at_ms)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![owned, to_i64(record.fence)?, record.value, expires],
                )?;
                Ok(PutOutcome::Written)
            },
        )
        .await
    }

    async fn delete_record(&self, key: &str, fence: Fence) -> Result<bool> {
        let owned = key.to_string();
        self.transact(
            "delete record",
            key,
            TransactionBehavior::Immediate,
            move |tx, _| {
                tx.execute_cached(CREATE, [])?;
                let n = tx.execute_cached(
                    "DELETE FROM tenure_records WHERE key = ?1 AND fence = ?2",
                    params![owned, to_i64(fence)?],
                )?;
                Ok(n == 1)
            },
        )
        .await
    }
}
