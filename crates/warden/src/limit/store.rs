//! The interface for implementers of a limit store, apart from the user API
//! at [`limit`](super)'s top level: the [`LimitStore`] trait and its
//! [`LimitRequest`]; the per-key [`State`] and the pure [`step`] / [`apply`]
//! functions; and [`read_step_write`], the one read/step/write loop every
//! store that keeps state rows (the in-process and the SQLite store) runs
//! over its own [`StateTable`].
//!
//! The split follows governor's `StateStore::measure_and_replace`: the store
//! owns atomicity (a mutex, a transaction) and opens its table inside it; the
//! loop reads every policy's state, runs the algorithm, and writes what it
//! returns. The Redis store runs the same arithmetic in Lua instead.

use std::fmt::Debug;

use async_trait::async_trait;

use super::decision::{Decision, Mode, Timestamp};
use super::policy::Policy;
use crate::error::{Error, Result};

pub use super::step::{Applied, MAX_STORED, Next, Slot, State, Step, apply, check_cost, step};

/// One request to a limit store: take (or look at) `cost` units of `key` under
/// every policy, atomically.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LimitRequest<'a> {
    /// The user key (already validated).
    pub key: &'a str,
    /// The policies, at least one, distinct, each with a capacity ≥ `cost`.
    pub policies: &'a [Policy],
    /// Units to take, ≥ 1.
    pub cost: u32,
    /// Consume or peek.
    pub mode: Mode,
    /// The instant to decide at instead of the store's clock. For tests and
    /// simulations only: a Redis store then keeps keys at least a minute, since
    /// their TTLs no longer relate to the server's clock.
    pub now: Option<Timestamp>,
}

impl<'a> LimitRequest<'a> {
    /// A request at the store's clock.
    pub fn new(key: &'a str, policies: &'a [Policy], cost: u32, mode: Mode) -> Self {
        LimitRequest {
            key,
            policies,
            cost,
            mode,
            now: None,
        }
    }

    /// Decides at `now` instead of the store's clock (tests, simulations).
    #[must_use]
    pub fn at(mut self, now: Option<Timestamp>) -> Self {
        self.now = now;
        self
    }
}

/// A store of limiter state. Implementations run [`apply`] (or, for
/// Redis, the same logic in Lua) atomically over the request's policies.
///
/// They must return [`Error`] only for infrastructure failures and
/// bad stored data ([`Error::WrongType`]); a refusal is a
/// [`Decision`] with `allowed == false`.
#[async_trait]
pub trait LimitStore: Debug + Send + Sync + 'static {
    /// Applies `request`, returning one decision per policy, in order.
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>>;

    /// The store's clock now: the instant a request without an injected `now`
    /// would be decided at.
    async fn now(&self) -> Result<Timestamp>;

    /// A short description for error messages and logs.
    fn describe(&self) -> String;

    /// Whether the store's counts are shared across processes: `false` for a
    /// store in this process only (the memory store), where every process
    /// starts from a full budget. The default is `true`, since a store is
    /// normally outside the process; an in-process store overrides it.
    fn is_shared(&self) -> bool {
        true
    }
}

/// A store's limit state as seen from inside its atomic section (a locked map,
/// an open transaction): what [`read_step_write`] needs to read and write one
/// key's state.
pub trait StateTable {
    /// The store's own error; warden's errors (bad input, bad stored data)
    /// convert into it.
    type Error: From<Error>;

    /// The state stored under `key`, `None` when there is none (or it expired).
    ///
    /// # Errors
    /// Store failures, or stored data that is not a state.
    fn read(&mut self, key: &str) -> Result<Option<State>, Self::Error>;

    /// Called once before any write with the keys about to be written: a store
    /// with a bound on its size answers `Some(decisions)` to refuse the request
    /// instead of writing. The default admits every write.
    ///
    /// # Errors
    /// Store failures.
    fn admit(
        &mut self,
        _writes: &[&str],
        _now: Timestamp,
        _decisions: &[Decision],
    ) -> Result<Option<Vec<Decision>>, Self::Error> {
        Ok(None)
    }

    /// Stores `state` under `key` until `expires_at`.
    ///
    /// # Errors
    /// Store failures.
    fn write(
        &mut self,
        key: String,
        state: State,
        expires_at: Timestamp,
    ) -> Result<(), Self::Error>;
}

/// Runs `request` at `now` over `table`: reads every policy's state, [`apply`]s
/// the request, and writes the states to keep. The caller holds what makes
/// this atomic in its store around the call.
///
/// # Errors
/// The table's errors, and those of [`apply`] (zero cost, cost over capacity,
/// mismatched state).
pub fn read_step_write<T: StateTable + ?Sized>(
    table: &mut T,
    request: &LimitRequest<'_>,
    now: Timestamp,
) -> Result<Vec<Decision>, T::Error> {
    let keys: Vec<String> = request
        .policies
        .iter()
        .map(|p| p.storage_key("", request.key))
        .collect();
    let mut slots = Vec::with_capacity(keys.len());
    for (policy, key) in request.policies.iter().zip(&keys) {
        let state = table.read(key)?;
        slots.push(Slot { policy, key, state });
    }
    let applied = apply(&slots, now, request.cost, request.mode)?;
    drop(slots);
    let writes: Vec<&str> = keys
        .iter()
        .zip(&applied.writes)
        .filter(|(_, write)| write.is_some())
        .map(|(key, _)| key.as_str())
        .collect();
    if !writes.is_empty()
        && let Some(refusal) = table.admit(&writes, now, &applied.decisions)?
    {
        return Ok(refusal);
    }
    drop(writes);
    for (key, write) in keys.into_iter().zip(applied.writes) {
        if let Some(next) = write {
            table.write(key, next.state, now.plus(next.ttl))?;
        }
    }
    Ok(applied.decisions)
}
