//! Rate-limit state in the SQLite file: the limit algorithms' pure step
//! functions run inside one `BEGIN IMMEDIATE` transaction per request.
//!
//! # The limiter's clock
//!
//! Windows line up with the Unix epoch (a fixed window "per day" starts at
//! 00:00 UTC), so limiter time must be wall-clock time — yet it must not jump
//! when someone sets the clock, and every process must read the same value.
//! warden reads the wall clock once per boot and stores it as the *origin* of
//! that boot's store clock (`warden_clock`; `CLOCK_BOOTTIME` on Linux, see the
//! `clock` module); limiter time is then origin + the store clock, identical in
//! every process and immune to clock steps until
//! the next reboot. (The algorithms also treat a clock that goes back, as
//! across a reboot with a wrong clock, as standing still.)

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::clock::{self, HostTime};
use super::{Fault, SqliteStore};
use crate::error::Result;
use crate::limit::{Decision, LimitRequest, LimitStore, Policy, Slot, State, Timestamp, apply};

/// Expired rows deleted per request, at most: keeps the table near the number
/// of live keys without ever making one request slow.
const PRUNE_PER_REQUEST: i64 = 32;

/// Limiter time now: this boot's origin plus the store clock.
fn limiter_now(tx: &Connection, host: &HostTime) -> Result<Timestamp, Fault> {
    let stored: Option<i64> = tx
        .query_row(
            "SELECT origin_us FROM warden_clock WHERE boot_id = ?1",
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
            tx.execute("DELETE FROM warden_clock", [])?;
            tx.execute(
                "INSERT INTO warden_clock (boot_id, origin_us) VALUES (?1, ?2)",
                params![&*host.boot, origin],
            )?;
            origin
        }
    };
    let now = origin.saturating_add(host.us);
    Ok(Timestamp::from_micros(u64::try_from(now).unwrap_or(0)))
}

fn to_sql(us: u64) -> i64 {
    i64::try_from(us).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl LimitStore for SqliteStore {
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        let policies: Vec<Policy> = request.policies.to_vec();
        let keys: Vec<String> = policies
            .iter()
            .map(|p| p.storage_key("", request.key))
            .collect();
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
                let at = to_sql(now.as_micros());
                let mut states = Vec::with_capacity(keys.len());
                for key in &keys {
                    let blob: Option<Vec<u8>> = tx
                        .query_row(
                            "SELECT state FROM warden_limits WHERE key = ?1 AND expires_at_us > ?2",
                            params![key, at],
                            |r| r.get(0),
                        )
                        .optional()?;
                    let state = blob
                        .map(|b| State::decode(&b, key))
                        .transpose()
                        .map_err(Fault::Warden)?;
                    states.push(state);
                }
                let slots: Vec<Slot<'_>> = policies
                    .iter()
                    .zip(&keys)
                    .zip(states)
                    .map(|((policy, key), state)| Slot { policy, key, state })
                    .collect();
                let applied = apply(&slots, now, cost, mode).map_err(Fault::Warden)?;
                for (key, write) in keys.iter().zip(applied.writes) {
                    if let Some(next) = write {
                        let expires = now.plus(next.ttl).as_micros();
                        tx.execute(
                            "INSERT INTO warden_limits (key, state, expires_at_us) VALUES (?1, ?2, ?3)
                             ON CONFLICT (key) DO UPDATE SET
                               state = excluded.state, expires_at_us = excluded.expires_at_us",
                            params![key, next.state.encode(), to_sql(expires)],
                        )?;
                    }
                }
                tx.execute(
                    "DELETE FROM warden_limits WHERE key IN
                       (SELECT key FROM warden_limits WHERE expires_at_us <= ?1 LIMIT ?2)",
                    params![at, PRUNE_PER_REQUEST],
                )?;
                Ok(applied.decisions)
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
}
