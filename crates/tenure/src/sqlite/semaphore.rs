//! Expiring semaphores in the SQLite file: table `tenure_permits` (one row per
//! held permit, expiring on the lease clock with the boot id, like a lease) and
//! `tenure_semaphores` (the fence counter per semaphore, never reset). Each
//! operation is one `BEGIN IMMEDIATE` transaction. Waiters poll.

use std::num::NonZeroU32;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::clock::HostTime;
use super::{Fault, SqliteStore};
use crate::error::Result;
use crate::fence::Fence;
use crate::lease::{AcquireReply, ExtendReply, ReleaseOutcome, ReleaseWatch, valid_until};
use crate::semaphore::SemaphoreStore;
use crate::token::OwnerToken;

/// Created on first use (no-ops once the tables exist).
const CREATE: &str = "
CREATE TABLE IF NOT EXISTS tenure_permits (
    key           TEXT NOT NULL,
    token         TEXT NOT NULL,
    boot_id       TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL,  -- store clock ms of boot_id
    PRIMARY KEY (key, token)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tenure_semaphores (
    key   TEXT PRIMARY KEY NOT NULL,
    fence INTEGER NOT NULL           -- last fence handed out; never reset
) STRICT, WITHOUT ROWID;";

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// Drops the expired permits of `key` (other boots' permits are expired).
fn prune(tx: &Connection, key: &str, now: &HostTime) -> Result<(), Fault> {
    tx.execute_batch(CREATE)?;
    tx.execute(
        "DELETE FROM tenure_permits WHERE key = ?1 AND (boot_id != ?2 OR expires_at_ms <= ?3)",
        params![key, &*now.boot, now.ms()],
    )?;
    Ok(())
}

fn fence_of(tx: &Connection, key: &str) -> Result<i64, Fault> {
    Ok(tx
        .query_row(
            "SELECT fence FROM tenure_semaphores WHERE key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

#[async_trait]
impl SemaphoreStore for SqliteStore {
    async fn acquire_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        permits: NonZeroU32,
    ) -> Result<AcquireReply> {
        let sent = crate::clock::now();
        let (owned, token) = (key.to_string(), token.as_str().to_string());
        let ttl = ttl_ms(ttl);
        let reply = self
            .transact(
                "acquire permit",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| {
                    prune(tx, &owned, now)?;
                    let (held, soonest): (i64, Option<i64>) = tx.query_row(
                        "SELECT COUNT(*), MIN(expires_at_ms) FROM tenure_permits WHERE key = ?1",
                        [&owned],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?;
                    if held >= i64::from(permits.get()) {
                        let left = soonest.map_or(1, |s| (s - now.ms()).max(1));
                        return Ok(Err(left));
                    }
                    let last = fence_of(tx, &owned)?;
                    // Floored by the wall clock, like a lease's fence.
                    let fence = super::lease::next_fence(last)
                        .map_err(|_| Fault::Data(format!("semaphore fence counter is {last}")))?;
                    tx.execute(
                        "INSERT INTO tenure_semaphores (key, fence) VALUES (?1, ?2)
                     ON CONFLICT (key) DO UPDATE SET fence = excluded.fence",
                        params![owned, fence],
                    )?;
                    tx.execute(
                        "INSERT OR REPLACE INTO tenure_permits (key, token, boot_id, expires_at_ms)
                     VALUES (?1, ?2, ?3, ?4)",
                        params![owned, token, &*now.boot, now.ms().saturating_add(ttl)],
                    )?;
                    Ok(Ok(fence))
                },
            )
            .await?;
        Ok(match reply {
            Ok(fence) => AcquireReply::Acquired {
                fence: Fence::new(fence.unsigned_abs()),
                valid_until: valid_until(sent, Duration::from_millis(ttl.unsigned_abs())),
            },
            Err(left) => AcquireReply::Held {
                ttl_left: Some(Duration::from_millis(left.unsigned_abs())),
            },
        })
    }

    async fn extend_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let sent = crate::clock::now();
        let (owned, token) = (key.to_string(), token.as_str().to_string());
        let ms = ttl_ms(ttl);
        let renewed = self
            .transact(
                "extend permit",
                key,
                TransactionBehavior::Immediate,
                move |tx, now| {
                    prune(tx, &owned, now)?;
                    let n = tx.execute(
                    "UPDATE tenure_permits SET expires_at_ms = ?3 WHERE key = ?1 AND token = ?2",
                    params![owned, token, now.ms().saturating_add(ms)],
                )?;
                    Ok(n == 1)
                },
            )
            .await?;
        Ok(if renewed {
            ExtendReply::Extended {
                valid_until: valid_until(sent, ttl),
            }
        } else {
            ExtendReply::NotHeld
        })
    }

    async fn release_permit(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let (owned, token) = (key.to_string(), token.as_str().to_string());
        self.transact(
            "release permit",
            key,
            TransactionBehavior::Immediate,
            move |tx, now| {
                prune(tx, &owned, now)?;
                let n = tx.execute(
                    "DELETE FROM tenure_permits WHERE key = ?1 AND token = ?2",
                    params![owned, token],
                )?;
                Ok(if n == 1 {
                    ReleaseOutcome::Released
                } else {
                    ReleaseOutcome::NotHeld
                })
            },
        )
        .await
    }

    async fn permits_held(&self, key: &str) -> Result<(u32, Option<Fence>)> {
        let owned = key.to_string();
        self.transact(
            "count permits",
            key,
            TransactionBehavior::Immediate,
            move |tx, now| {
                prune(tx, &owned, now)?;
                let held: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM tenure_permits WHERE key = ?1",
                    [&owned],
                    |r| r.get(0),
                )?;
                let fence = fence_of(tx, &owned)?;
                Ok((
                    u32::try_from(held).unwrap_or(u32::MAX),
                    u64::try_from(fence).ok().filter(|f| *f > 0).map(Fence::new),
                ))
            },
        )
        .await
    }

    async fn watch_permits(&self, _key: &str) -> ReleaseWatch {
        // Other processes cannot notify this one: waiters poll.
        ReleaseWatch::polling()
    }

    fn describe_semaphores(&self) -> String {
        crate::lease::LeaseStore::describe(self)
    }
}
