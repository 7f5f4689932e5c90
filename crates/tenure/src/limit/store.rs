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

use std::borrow::Cow;
use std::fmt::Debug;

use async_trait::async_trait;

use super::decision::{Decision, Mode, Timestamp};
use super::policy::Policy;
use crate::error::{Error, Result};

pub use super::step::{
    Applied, MAX_STORED, Next, Slot, State, Step, apply, check_cost, check_request, reserve_delay,
    step,
};
pub(crate) use super::step::{keep, step_in_place};

/// One request to a limit store: take (or look at) `cost` units of `key` under
/// every policy, atomically.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LimitRequest<'a> {
    /// The user key (already validated).
    pub key: &'a str,
    /// The policies, at least one, of distinct algorithm or
    /// [slot](Policy::slot), each with a capacity ≥ `cost` (unless refunding).
    pub policies: &'a [Policy],
    /// Units to take (or give back), ≥ 1.
    pub cost: u32,
    /// Consume, peek, refund or reserve.
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

    /// Forgets the state of `key` under each of `policies` (their
    /// [storage keys](Policy::storage_key)), atomically: the key is fresh.
    ///
    /// # Errors
    /// Store failures; [`Error::Unsupported`] for a store that keeps no limits
    /// (the default).
    async fn reset(&self, key: &str, policies: &[Policy]) -> Result<()> {
        let _ = (key, policies);
        Err(Error::Unsupported {
            store: self.describe(),
            what: "resetting a rate-limit key",
            instead: "keep limits in memory, SQLite or Redis".into(),
        })
    }

    /// The store's clock now: the instant a request without an injected `now`
    /// would be decided at.
    async fn now(&self) -> Result<Timestamp>;

    /// A short description for error messages and logs.
    fn describe(&self) -> String;

    /// The kind of store, the `store` label of tenure's metrics (feature
    /// `metrics`): its URL scheme (`redis`, `sqlite`, `memory`, `quorum`,
    /// …), one value per kind of store rather than per host or file. The
    /// default takes the text of [`describe`](Self::describe) before its
    /// first `:` or `(`; tenure's stores answer without formatting anything.
    fn kind(&self) -> Cow<'static, str> {
        crate::telemetry::store_kind(&self.describe())
    }

    /// For a store that decides without I/O (the in-process store): the
    /// answer to the request right away, without the boxed future an async
    /// trait call costs. `None` (the default) means "use `apply`".
    ///
    /// The answer is the request's combined decision
    /// ([`Decision::combine`] of what `apply` would return).
    fn decide_inline(&self, _request: &LimitRequest<'_>) -> Option<Result<Decision>> {
        None
    }

    /// The store itself when it is this crate's in-process store, which
    /// [`Limiter::check_local`](crate::limit::Limiter::check_local) then
    /// calls directly (no dynamic call, its decision built in place).
    #[doc(hidden)]
    fn as_memory(&self) -> Option<&crate::memory::MemoryLimits> {
        None
    }

    /// Whether the store's counts are shared across processes: `false` for a
    /// store in this process only (the memory store), where every process
    /// starts from a full budget. The default is `true`, since a store is
    /// normally outside the process; an in-process store overrides it.
    fn is_shared(&self) -> bool {
        true
    }
}

/// Where one policy's state of one user key lives: the pair a [`StateTable`]
/// is indexed by. A table that stores rows by name formats
/// [`storage_key`](Self::storage_key); an in-process table can index by the
/// pair and skip the formatting.
#[derive(Debug, Clone, Copy)]
pub struct SlotKey<'a> {
    /// The policy.
    pub policy: &'a Policy,
    /// The user key (already validated).
    pub key: &'a str,
}

impl SlotKey<'_> {
    /// The row's name, as on Redis without the prefix
    /// ([`Policy::storage_key`]).
    pub fn storage_key(&self) -> String {
        self.policy.storage_key("", self.key)
    }
}

/// A store's limit state as seen from inside its atomic section (a locked map,
/// an open transaction): what [`read_step_write`] needs to read and write one
/// policy's state of one key.
pub trait StateTable {
    /// The store's own error; tenure's errors (bad input, bad stored data)
    /// convert into it.
    type Error: From<Error>;

    /// The state stored at `slot`, `None` when there is none (or it expired).
    ///
    /// # Errors
    /// Store failures, or stored data that is not a state.
    fn read(&mut self, slot: SlotKey<'_>) -> Result<Option<State>, Self::Error>;

    /// Called once before any write with the slots about to be written: a
    /// store with a bound on its size answers `Some(decisions)` to refuse the
    /// request instead of writing. The default admits every write.
    ///
    /// # Errors
    /// Store failures.
    fn admit(
        &mut self,
        _writes: &[SlotKey<'_>],
        _now: Timestamp,
        _decisions: &[Decision],
    ) -> Result<Option<Vec<Decision>>, Self::Error> {
        Ok(None)
    }

    /// Stores `state` at `slot` until `expires_at`.
    ///
    /// # Errors
    /// Store failures.
    fn write(
        &mut self,
        slot: SlotKey<'_>,
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
    let slot = |policy| SlotKey {
        policy,
        key: request.key,
    };
    check_request(request.policies, request.cost, request.mode)?;
    if let [policy] = request.policies {
        return Ok(vec![read_step_write_one(
            table,
            request,
            slot(policy),
            now,
        )?]);
    }
    let mut slots = Vec::with_capacity(request.policies.len());
    for policy in request.policies {
        let state = table.read(slot(policy))?;
        slots.push(Slot {
            policy,
            key: request.key,
            state,
        });
    }
    let applied = apply(&slots, now, request.cost, request.mode)?;
    drop(slots);
    let writes: Vec<SlotKey<'_>> = request
        .policies
        .iter()
        .zip(&applied.writes)
        .filter(|(_, write)| write.is_some())
        .map(|(policy, _)| slot(policy))
        .collect();
    if !writes.is_empty()
        && let Some(refusal) = table.admit(&writes, now, &applied.decisions)?
    {
        return Ok(refusal);
    }
    for (at, next) in writes.into_iter().zip(applied.writes.into_iter().flatten()) {
        table.write(at, next.state, now.plus(next.ttl))?;
    }
    Ok(applied.decisions)
}

/// [`read_step_write`] answering with the request's combined decision
/// ([`Decision::combine`]); a limiter of one policy allocates nothing for it.
///
/// # Errors
/// As [`read_step_write`].
pub fn read_step_write_combined<T: StateTable + ?Sized>(
    table: &mut T,
    request: &LimitRequest<'_>,
    now: Timestamp,
) -> Result<Decision, T::Error> {
    if let [policy] = request.policies {
        let slot = SlotKey {
            policy,
            key: request.key,
        };
        return read_step_write_one(table, request, slot, now);
    }
    let decisions = read_step_write(table, request, now)?;
    Ok(Decision::combine(&decisions).ok_or_else(|| Error::invalid("policy", "no policy"))?)
}

/// [`read_step_write`] for a limiter of one policy, the common case: the same
/// steps as [`apply`] for one slot, without its vectors.
fn read_step_write_one<T: StateTable + ?Sized>(
    table: &mut T,
    request: &LimitRequest<'_>,
    slot: SlotKey<'_>,
    now: Timestamp,
) -> Result<Decision, T::Error> {
    check_request(
        std::slice::from_ref(slot.policy),
        request.cost,
        request.mode,
    )?;
    let state = table.read(slot)?;
    let stepped = step(
        slot.policy,
        slot.key,
        state.as_ref(),
        now,
        request.cost,
        request.mode,
    )?;
    let decision = stepped.decision;
    let commit = decision.allowed || request.mode == Mode::Refund;
    if let Some(next) = keep(stepped.next, slot.policy, commit) {
        if let Some(mut refusal) = table.admit(&[slot], now, &[decision])? {
            return Ok(refusal.pop().unwrap_or(decision));
        }
        table.write(slot, next.state, now.plus(next.ttl))?;
    }
    Ok(decision)
}
