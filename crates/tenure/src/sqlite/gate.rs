//! Gates (semaphores, read-write leases) in the SQLite file: table
//! `tenure_gates`, one row per gate holding its state (holders, waiting line,
//! fence counter) as JSON, stamped with the boot id of its expiry instants
//! (a state of another boot keeps its fence and nothing else). Each
//! operation is one `BEGIN IMMEDIATE` transaction running a pure step of
//! [`gate`](crate::gate) on the host clock (fences floored by its wall clock). Waiters poll.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::cached::CachedSql;
use super::clock::HostTime;
use super::{Commit, Fault, Place, SqliteStore};
use crate::error::Result;
use crate::gate::{
    self, GateAsk, GateKind, GateStatus, GateStore, Look, Mode, Now, Request, State,
};
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStore, QueuePlace, ReleaseOutcome, ReleaseWatch,
};
use crate::token::OwnerToken;

/// Created on first use (a no-op once the table exists).
const CREATE: &str = "
CREATE TABLE IF NOT EXISTS tenure_gates (
    kind    TEXT NOT NULL,           -- permits | rw
    key     TEXT NOT NULL,
    boot_id TEXT NOT NULL,           -- the boot of the expiry instants
    state   TEXT NOT NULL,           -- JSON: fence, holders, line
    PRIMARY KEY (kind, key)
) STRICT, WITHOUT ROWID;";

/// The state of a gate, its instants valid for `now`'s boot.
fn load(tx: &Connection, kind: GateKind, key: &str, now: &HostTime) -> Result<State, Fault> {
    tx.execute_batch(CREATE)?;
    let row: Option<(String, String)> = tx
        .query_row_cached(
            "SELECT boot_id, state FROM tenure_gates WHERE kind = ?1 AND key = ?2",
            params![kind.name(), key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((boot, text)) = row else {
        return Ok(State::default());
    };
    let mut state: State = serde_json::from_str(&text)
        .map_err(|e| Fault::Data(format!("gate {key:?} holds unreadable state: {e}")))?;
    if boot != *now.boot {
        // Written during another boot: every holder and place is expired.
        state = State {
            fence: state.fence,
            ..State::default()
        };
    }
    if state.fence >= i64::MAX as u64 {
        return Err(Fault::Data(format!(
            "gate fence counter is {}",
            state.fence
        )));
    }
    Ok(state)
}

fn save(
    tx: &Connection,
    kind: GateKind,
    key: &str,
    state: &State,
    now: &HostTime,
) -> Result<(), Fault> {
    let text = serde_json::to_string(state)
        .map_err(|e| Fault::Data(format!("gate state cannot be written: {e}")))?;
    tx.execute_cached(
        "INSERT INTO tenure_gates (kind, key, boot_id, state) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (kind, key) DO UPDATE SET boot_id = excluded.boot_id, state = excluded.state",
        params![kind.name(), key, &*now.boot, text],
    )?;
    Ok(())
}

impl SqliteStore {
    /// Runs `f` on the state of a gate in one durable write transaction, run
    /// where `place` allows, and saves it.
    async fn gate_step<T: Send + 'static>(
        &self,
        (op, place): (&'static str, Place),
        kind: GateKind,
        key: &str,
        f: impl Fn(&mut State, Now) -> T + Send + 'static,
    ) -> Result<T> {
        let owned = key.to_string();
        let mode = (TransactionBehavior::Immediate, Commit::Durable);
        self.run(place, mode, op, key, move |tx, now| {
            let mut state = load(tx, kind, &owned, now)?;
            let out = f(&mut state, Now::host(now.ms()));
            save(tx, kind, &owned, &state, now)?;
            Ok(out)
        })
        .await
    }
}

#[async_trait]
impl GateStore for SqliteStore {
    async fn look(
        &self,
        key: &str,
        ask: GateAsk<'_>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let (request, look) = (Request::look(&ask), Look::of(&ask));
        let answer = self
            .gate_step(
                ("look", Place::Caller),
                request.kind,
                key,
                move |state, now| state.look(now, &look.step()).0,
            )
            .await?;
        Ok(request.reply(&answer))
    }

    async fn extend(
        &self,
        mode: Mode,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let request = Request::new(mode, ttl);
        let token = token.as_str().to_string();
        let renewed = self
            .gate_step(
                ("extend", Place::Pool),
                request.kind,
                key,
                move |state, now| state.extend(now, &token, request.ttl_ms),
            )
            .await?;
        Ok(request.extended(renewed))
    }

    async fn release(&self, mode: Mode, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let kind = mode.kind();
        let token = token.as_str().to_string();
        let released = self
            .gate_step(("release", Place::Caller), kind, key, move |state, now| {
                state.release(now, &token).0
            })
            .await?;
        Ok(gate::release_outcome(released))
    }

    async fn status(&self, kind: GateKind, key: &str) -> Result<GateStatus> {
        let owned = key.to_string();
        let storage = format!("tenure_gates ({}, {key:?})", kind.name());
        self.transact(
            "status",
            key,
            TransactionBehavior::Immediate,
            move |tx, now| {
                let state = load(tx, kind, &owned, now)?;
                Ok(gate::status_of(&state, now.ms(), storage.clone()))
            },
        )
        .await
    }

    async fn list(&self, kind: GateKind, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        let prefix = prefix.to_string();
        self.transact(
            "list",
            "",
            TransactionBehavior::Immediate,
            move |tx, now| {
                tx.execute_batch(CREATE)?;
                let mut select = tx.prepare_cached(
                    "SELECT key FROM tenure_gates
                 WHERE kind = ?1 AND substr(key, 1, length(?2)) = ?2 ORDER BY key",
                )?;
                let keys = select
                    .query_map(params![kind.name(), &prefix], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let mut held = Vec::new();
                for key in keys {
                    let state = load(tx, kind, &key, now)?;
                    let storage = format!("tenure_gates ({}, {key:?})", kind.name());
                    let status = gate::status_of(&state, now.ms(), storage);
                    if !status.holders.is_empty() {
                        held.push((key, status));
                    }
                }
                Ok(held)
            },
        )
        .await
    }

    async fn watch(
        &self,
        _kind: GateKind,
        _key: &str,
        _token: Option<&OwnerToken>,
    ) -> ReleaseWatch {
        // Gates are not followed by the file watcher: waiters poll.
        ReleaseWatch::polling()
    }

    fn describe_gates(&self) -> String {
        LeaseStore::describe(self)
    }
}
