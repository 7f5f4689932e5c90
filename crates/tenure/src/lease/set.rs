//! Several keys at once, all or nothing: [`LeaseSet`] and [`LeaseSetGuard`].
//!
//! The keys are taken one by one in one canonical order (byte order of the
//! keys), each with the ordinary wait of its lease. Two callers asking for
//! overlapping sets in different orders both take the shared keys in the same
//! order, so neither can hold one while waiting for a key the other holds and
//! waits on: no deadlock, on any store and across Redis Cluster slots. What is
//! taken is given back on every way out — a refusal, an error, a key of the
//! set lost while waiting for the next one, a dropped future — so nobody keeps
//! part of a set.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use super::{Attempt, ExtendOutcome, Lease, LeaseGuard, LeaseStore, LossCause, LostSignal};
use super::{MAX_TTL, ReleaseOutcome};
use crate::error::{Error, Result};
use crate::fence::Fence;

/// Several leases taken together, all or none: see
/// [`Coordinator::lease_all`](crate::Coordinator::lease_all). Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use tenure::Coordinator;
///
/// let tenure = Coordinator::memory();
/// let guard = tenure.lease_all(["acct:2", "acct:1"]).acquire().await?;
/// let keys: Vec<&str> = guard.keys().collect();
/// assert_eq!(keys, ["acct:1", "acct:2"]); // in canonical order
/// let debit = guard.fence("acct:1").expect("in the set");
/// assert!(debit.get() >= 1);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct LeaseSet {
    /// One lease per key, in canonical order, without duplicates.
    leases: Vec<Lease>,
}

/// How long [`LeaseSet::gather`] may wait for each key.
#[derive(Debug, Clone, Copy)]
enum Patience {
    /// One attempt per key.
    Once,
    /// Until this instant, for all keys together.
    Until(Instant),
    /// As long as it takes.
    Forever,
}

/// What [`LeaseSet::gather`] ends with.
enum Gathered {
    All(Vec<LeaseGuard>),
    Held {
        key: String,
        ttl_left: Option<Duration>,
    },
}

impl LeaseSet {
    pub(crate) fn new(backend: &Arc<dyn LeaseStore>, keys: Vec<String>) -> Self {
        let mut keys = keys;
        keys.sort_unstable();
        keys.dedup();
        LeaseSet {
            leases: keys
                .into_iter()
                .map(|key| Lease::new(Arc::clone(backend), key))
                .collect(),
        }
    }

    fn each(mut self, f: impl Fn(Lease) -> Lease) -> Self {
        self.leases = self.leases.into_iter().map(f).collect();
        self
    }

    /// Sets the TTL of every key (see [`Lease::ttl`]).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.each(|l| l.ttl(ttl))
    }

    /// Turns renewal of every key on or off (see [`Lease::watchdog`]).
    pub fn watchdog(self, on: bool) -> Self {
        self.each(|l| l.watchdog(on))
    }

    /// Renews every key at this interval (see [`Lease::renew_every`]).
    pub fn renew_every(self, interval: Duration) -> Self {
        self.each(|l| l.renew_every(interval))
    }

    /// Records the holder with `label` on every key (see [`Lease::label`]).
    pub fn label(self, label: impl Into<String>) -> Self {
        let label = label.into();
        self.each(|l| l.label(label.clone()))
    }

    /// Records the holder on every key, or not (see [`Lease::record_holder`]).
    pub fn record_holder(self, on: bool) -> Self {
        self.each(|l| l.record_holder(on))
    }

    /// Bounds how long the set is kept (see [`Lease::max_hold`]); counted
    /// from the grant of each key, so the first key taken reaches it first
    /// and the whole set is reported lost then.
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.each(|l| l.max_hold(max_hold))
    }

    /// The keys, in the order they are taken (byte order, duplicates removed).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.leases.iter().map(Lease::key)
    }

    /// Acquires every key, waiting as long as it takes (each key FIFO where
    /// the store keeps a waiting line). Cancel it by dropping the future:
    /// the keys taken so far are released.
    pub async fn acquire(&self) -> Result<LeaseSetGuard> {
        match self.traced(Patience::Forever).await? {
            Gathered::All(guards) => Ok(LeaseSetGuard { guards }),
            // Not reached: waiting forever ends with the keys or an error.
            Gathered::Held { key, ttl_left } => Err(Error::Busy {
                key,
                retry_in: ttl_left,
            }),
        }
    }

    /// Acquires every key within `max_wait` (for all keys together). A key
    /// still held then is [`Error::Busy`] naming it; the keys taken meanwhile
    /// are released before this returns.
    pub async fn acquire_timeout(&self, max_wait: Duration) -> Result<LeaseSetGuard> {
        let until = Instant::now() + max_wait.min(MAX_TTL);
        match self.traced(Patience::Until(until)).await? {
            Gathered::All(guards) => Ok(LeaseSetGuard { guards }),
            Gathered::Held { key, ttl_left } => Err(Error::Busy {
                key,
                retry_in: ttl_left,
            }),
        }
    }

    /// Tries each key once, without waiting: `None` when one of them is held
    /// (the keys taken before it are released before this returns).
    pub async fn try_acquire(&self) -> Result<Option<LeaseSetGuard>> {
        match self.traced(Patience::Once).await? {
            Gathered::All(guards) => Ok(Some(LeaseSetGuard { guards })),
            Gathered::Held { .. } => Ok(None),
        }
    }

    /// [`gather`](Self::gather) in an `acquire_set` span.
    async fn traced(&self, patience: Patience) -> Result<Gathered> {
        let span = tracing::debug_span!(
            "acquire_set",
            keys = self.leases.len(),
            first = self.leases.first().map(Lease::key),
            outcome = Empty,
            held_by_other = Empty,
        );
        let result = self.gather(patience).instrument(span.clone()).await;
        let outcome = match &result {
            Ok(Gathered::All(_)) => "acquired",
            Ok(Gathered::Held { key, .. }) => {
                span.record("held_by_other", key.as_str());
                "held"
            }
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        result
    }

    /// Takes the keys in order. Starts over (after giving everything back)
    /// when a key already taken is lost while a later one is awaited.
    async fn gather(&self, patience: Patience) -> Result<Gathered> {
        if self.leases.is_empty() {
            return Err(Error::invalid("keys", "a lease set needs at least one key"));
        }
        // Bad input is refused before anything is taken.
        for lease in &self.leases {
            lease.validate()?;
        }
        loop {
            let mut held: Vec<LeaseGuard> = Vec::with_capacity(self.leases.len());
            let mut restart = false;
            for lease in &self.leases {
                let lost = LostSignal::any(held.iter().map(LeaseGuard::lost));
                let next = match unless_lost(&lost, take(lease, patience)).await {
                    None => {
                        tracing::debug!(
                            key = lease.key(),
                            "a key of the set was lost while waiting for the next one; starting over"
                        );
                        restart = true;
                        break;
                    }
                    Some(Err(e)) => {
                        give_back(held).await;
                        return Err(e);
                    }
                    Some(Ok(next)) => next,
                };
                match next {
                    Attempt::Acquired(guard) => held.push(guard),
                    Attempt::Held { ttl_left } => {
                        give_back(held).await;
                        let key = lease.key().to_string();
                        return Ok(Gathered::Held { key, ttl_left });
                    }
                }
            }
            if !restart {
                return Ok(Gathered::All(held));
            }
            give_back(held).await;
        }
    }
}

/// One key's acquisition, as patient as the set.
async fn take(lease: &Lease, patience: Patience) -> Result<Attempt> {
    match patience {
        Patience::Once => lease.attempt().await,
        Patience::Until(until) => {
            let left = until.saturating_duration_since(Instant::now());
            lease.attempt_within(left).await
        }
        Patience::Forever => lease.acquire().await.map(Attempt::Acquired),
    }
}

/// Runs `work` unless `lost` fires first (`None` then; `work` is dropped,
/// which undoes an attempt in flight). An empty signal never fires.
async fn unless_lost<T>(lost: &LostSignal, work: impl Future<Output = T>) -> Option<T> {
    let mut work = pin!(work);
    let mut fired = pin!(lost.wait());
    poll_fn(|cx| {
        if lost.is_lost() || fired.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        work.as_mut().poll(cx).map(Some)
    })
    .await
}

/// Gives back what a gather took before it ended without the whole set: a
/// failed release is only logged (the TTL frees the key).
async fn give_back(held: Vec<LeaseGuard>) {
    if let Err(e) = release_all(held).await {
        tracing::debug!(error = %e, "giving back part of a lease set failed; the TTL will free the key");
    }
}

/// Releases every guard, all at once, and waits for the answers; the first
/// error, or `NotHeld` when any key was no longer ours. (Each release runs in
/// a task of its own: dropping this future does not cut them short.)
async fn release_all(guards: Vec<LeaseGuard>) -> Result<ReleaseOutcome> {
    join_all(guards.into_iter().map(LeaseGuard::release))
        .await
        .into_iter()
        .fold(Ok(ReleaseOutcome::Released), merge)
}

/// Runs `futures` concurrently in this task and returns their outputs in order.
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// The outcome of a set from the outcomes of its keys: the first error, else
/// `NotHeld` if any key was not held.
fn merge(so_far: Result<ReleaseOutcome>, next: Result<ReleaseOutcome>) -> Result<ReleaseOutcome> {
    match (so_far, next) {
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        (Ok(ReleaseOutcome::Released), Ok(next)) => Ok(next),
        (Ok(other), Ok(_)) => Ok(other),
    }
}

/// Every lease of a [`LeaseSet`], held together: one fence per key, lost when
/// any key is lost, released together. Dropping it releases every key in the
/// background.
#[derive(Debug)]
#[must_use = "dropping the guard releases every key"]
pub struct LeaseSetGuard {
    /// One guard per key, in canonical order.
    guards: Vec<LeaseGuard>,
}

impl LeaseSetGuard {
    /// The keys, in canonical order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LeaseGuard::key)
    }

    /// The fence of `key`, if it is in the set. Send it with every write to
    /// the resource `key` protects.
    pub fn fence(&self, key: &str) -> Option<Fence> {
        self.guard(key).map(LeaseGuard::fence)
    }

    /// Each key with its fence, in canonical order.
    pub fn fences(&self) -> impl Iterator<Item = (&str, Fence)> {
        self.guards.iter().map(|g| (g.key(), g.fence()))
    }

    /// The guard of `key`, if it is in the set.
    pub fn guard(&self, key: &str) -> Option<&LeaseGuard> {
        self.guards.iter().find(|g| g.key() == key)
    }

    /// The guards, one per key, in canonical order.
    pub fn guards(&self) -> &[LeaseGuard] {
        &self.guards
    }

    /// How long the holder may still assume it holds every key: the least
    /// [`remaining`](LeaseGuard::remaining) of its keys.
    pub fn remaining(&self) -> Duration {
        self.guards
            .iter()
            .map(LeaseGuard::remaining)
            .min()
            .unwrap_or_default()
    }

    /// Whether any key is known or presumed lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LeaseGuard::is_lost)
    }

    /// Why the first lost key was lost, once one is.
    pub fn loss_cause(&self) -> Option<LossCause> {
        self.guards.iter().find_map(LeaseGuard::loss_cause)
    }

    /// A signal that fires when any key is lost.
    pub fn lost(&self) -> LostSignal {
        LostSignal::any(self.guards.iter().map(LeaseGuard::lost))
    }

    /// Runs `work` while every key is held: if one is lost first, `work` is
    /// dropped and [`Error::LeaseLost`] names that key (as
    /// [`LeaseGuard::run`] does for one key).
    pub async fn run<F: Future>(&self, work: F) -> Result<F::Output> {
        let lost = self.lost();
        match unless_lost(&lost, work).await {
            Some(output) => Ok(output),
            None => Err(Error::LeaseLost {
                key: self
                    .guards
                    .iter()
                    .find(|g| g.is_lost())
                    .map_or_else(String::new, |g| g.key().to_string()),
            }),
        }
    }

    /// Renews every key now (see [`LeaseGuard::extend`]): `NotHeld` when any
    /// key was no longer ours, else the least validity.
    pub async fn extend(&self) -> Result<ExtendOutcome> {
        let mut least: Option<Duration> = None;
        let mut not_held = false;
        for outcome in join_all(self.guards.iter().map(LeaseGuard::extend)).await {
            match outcome? {
                ExtendOutcome::Extended { valid_for } => {
                    least = Some(least.map_or(valid_for, |l| l.min(valid_for)));
                }
                ExtendOutcome::NotHeld => not_held = true,
            }
        }
        Ok(match (not_held, least) {
            (false, Some(valid_for)) => ExtendOutcome::Extended { valid_for },
            _ => ExtendOutcome::NotHeld,
        })
    }

    /// Releases every key at once and waits for the answers: `Released` when
    /// every key was still ours, `NotHeld` when any had expired or been taken
    /// over, or the first error (every key is released either way).
    pub async fn release(self) -> Result<ReleaseOutcome> {
        release_all(self.guards).await
    }
}
