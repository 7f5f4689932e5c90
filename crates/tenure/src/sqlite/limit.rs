//! Rate-limit state in the SQLite file: the `tenure_limits` table is a
//! [`StateTable`] for the shared read/step/write loop, run inside one
//! `BEGIN IMMEDIATE` transaction per request; this file adds the limiter's
//! clock and the pruning of expired rows.
//!
//! # The limiter's clock
//!
//! Windows line up with the Unix epoch (a fixed window "per day" starts at
//! 00:00 UTC), so limiter time must be wall-clock time — yet it must not jump
//! when someone sets the clock, and every process must read the same value.
//! tenure reads the wall clock once per boot and stores it as the *origin* of
//! that boot's store clock (`tenure_clock`; `CLOCK_BOOTTIME` on Linux, see the
//! `clock` module); limiter time is then origin + the store clock, identical in
//! every process and immune to clock steps until
//! the next reboot. (The algorithms also treat a clock that goes back, as
//! across a reboot with a wrong clock, as standing still.)

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::cached::CachedSql;
use super::clock::{self, HostTime};
use super::{Fault, SqliteStore};
use crate::duration::to_i64;
use crate::error::Result;
use crate::limit::store::{LimitRequest, LimitStore, SlotKey, State, StateTable, read_step_write};
use crate::limit::{Decision, Policy, Timestamp};

/// Expired rows deleted per request, at most: keeps the table near the number
/// of live keys without ever making one request slow.
const PRUNE_PER_REQUEST: i64 = 32;

/// Limiter time now: this boot's origin plus the store clock.
fn limiter_now(tx: &Connection, host: &HostTime) -> Result<Timestamp, Fault> {
    let stored: Option<i64> = tx
        .query_row_cached(
            "SELECT origin_us FROM tenure_clock WHERE boot_id = ?1",
            [&*host.boot],
            |r| r.get(0),
        )
        .optional()?;
    let origin = match stored {
        Some(origin) => origin,
        None => {
            let origin = clock::wall_us()
                .map_err(Fault::Clock)?
                .saturating_sub(host.us);
            // Origins of earlier boots are of no use any more.
            tx.execute_cached("DELETE FROM tenure_clock", [])?;
            tx.execute_cached(
                "INSERT INTO tenure_clock (boot_id, origin_us) VALUES (?1, ?2)",
                params![&*host.boot, origin],
            )?;
            origin
        }
    };
    let now = origin.saturating_add(host.us);
    Ok(Timestamp::from_micros(u64::try_from(now).unwrap_or(0)))
}

/// The `tenure_limits` table inside one open transaction, as the shared
/// read/step/write loop sees it.
struct Table<'a> {
    tx: &'a Connection,
    /// The request's instant, in the table's microseconds.
    at: i64,
}

impl StateTable for Table<'_> {
    type Error = Fault;

    fn read(&mut self, slot: SlotKey<'_>) -> Result<Option<State>, Fault> {
        let key = slot.storage_key();
        let blob: Option<Vec<u8>> = self
            .tx
            .query_row_cached(
                "SELECT state FROM tenure_limits WHERE key = ?1 AND expires_at_us > ?2",
                params![key, self.at],
                |r| r.get(0),
            )
            .optional()?;
        Ok(blob.map(|b| State::decode(&b, &key)).transpose()?)
    }

    fn write(
        &mut self,
        slot: SlotKey<'_>,
        state: State,
        expires_at: Timestamp,
    ) -> Result<(), Fault> {
        let key = slot.storage_key();
        self.tx.execute_cached(
            "INSERT INTO tenure_limits (key, state, expires_at_us) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET
               state = excluded.state, expires_at_us = excluded.expires_at_us",
            params![key, state.encode(), to_i64(expires_at.as_micros())],
        )?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl LimitStore for SqliteStore {
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        // The transaction runs on a blocking thread, so it gets its own copy
        // of the request.
        let policies: Vec<Policy> = request.policies.to_vec();
        let key = request.key.to_string();
        let (cost, mode, injected) = (request.cost, request.mode, request.now);
        self.transact(
            "limit",
            request.key,
            TransactionBehavior::Immediate,
            move |tx, host| {
                let now = match injected {
                    Some(now) => now,
                    None => limiter_now(tx, host)?,
                };
                let at = to_i64(now.as_micros());
                let request = LimitRequest::new(&key, &policies, cost, mode);
                let decisions = read_step_write(&mut Table { tx, at }, &request, now)?;
                tx.execute_cached(
                    "DELETE FROM tenure_limits WHERE key IN
                       (SELECT key FROM tenure_limits WHERE expires_at_us <= ?1 LIMIT ?2)",
                    params![at, PRUNE_PER_REQUEST],
                )?;
                Ok(decisions)
            },
        )
        .await
    }

    async fn reset(&self, key: &str, policies: &[Policy]) -> Result<()> {
        let keys: Vec<String> = policies.iter().map(|p| p.storage_key("", key)).collect();
        self.transact(
            "limit reset",
            key,
            TransactionBehavior::Immediate,
            move |tx, _| {
                for key in &keys {
                    tx.execute_cached("DELETE FROM tenure_limits WHERE key = ?1", [key])?;
                }
                Ok(())
            },
        )
        .await
    }

    async fn now(&self) -> Result<Timestamp> {
        self.transact(
            "limiter clock",
            "",
            TransactionBehavior::Immediate,
            limiter_now,
        )
        .await
    }

    fn describe(&self) -> String {
        self.inner.display.clone()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("sqlite")
    }
}
