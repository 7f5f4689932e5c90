//! Metrics through the `metrics` facade (cargo feature `metrics`): whatever
//! recorder the program installed receives them; without one they cost a
//! check of the facade's global recorder.

use std::borrow::Cow;
use std::time::Duration;

use metrics::{SharedString, counter, histogram};

use super::names::{
    CAUSE, LEASE_ACQUISITIONS, LEASE_HANDOFF_SECONDS, LEASE_HOLD_SECONDS, LEASE_LOSSES,
    LEASE_RENEWALS, LEASE_WAIT_SECONDS, LIMIT_DECISIONS, LIMIT_STORE_SECONDS, OUTCOME, STORE,
};

/// Where a latency metric starts.
pub(crate) type Stopwatch = tokio::time::Instant;

/// Starts a latency metric's stopwatch.
pub(crate) fn stopwatch() -> Stopwatch {
    tokio::time::Instant::now()
}

/// A stopwatch started at `at`, a reading taken anyway.
pub(crate) fn stopwatch_at(at: tokio::time::Instant) -> Stopwatch {
    at
}

/// An acquire call that started at `started` ended with `outcome`.
pub(crate) fn acquisition(
    store: impl FnOnce() -> Cow<'static, str>,
    outcome: &'static str,
    started: tokio::time::Instant,
) {
    let took = started.elapsed();
    let store = SharedString::from(store());
    counter!(LEASE_ACQUISITIONS, STORE => store.clone(), OUTCOME => outcome).increment(1);
    histogram!(LEASE_WAIT_SECONDS, STORE => store, OUTCOME => outcome).record(took);
}

/// A guard granted at `granted_at` let go of its lease.
pub(crate) fn hold(store: impl FnOnce() -> Cow<'static, str>, granted_at: tokio::time::Instant) {
    histogram!(LEASE_HOLD_SECONDS, STORE => store()).record(granted_at.elapsed());
}

/// A renewal ended with `outcome`.
pub(crate) fn renewal(store: impl FnOnce() -> Cow<'static, str>, outcome: &'static str) {
    counter!(LEASE_RENEWALS, STORE => store(), OUTCOME => outcome).increment(1);
}

/// A holder lost its lease for `cause`.
pub(crate) fn loss(store: impl FnOnce() -> Cow<'static, str>, cause: &'static str) {
    counter!(LEASE_LOSSES, STORE => store(), CAUSE => cause).increment(1);
}

/// A waiter woken by a release got the lease `took` later.
pub(crate) fn handoff(store: impl FnOnce() -> Cow<'static, str>, took: Duration) {
    histogram!(LEASE_HANDOFF_SECONDS, STORE => store()).record(took);
}

/// A rate-limit check ended with `outcome`.
pub(crate) fn limit_decision(store: impl FnOnce() -> Cow<'static, str>, outcome: &'static str) {
    counter!(LIMIT_DECISIONS, STORE => store(), OUTCOME => outcome).increment(1);
}

/// A rate-limit store call took `took`.
pub(crate) fn limit_store(store: impl FnOnce() -> Cow<'static, str>, took: Duration) {
    histogram!(LIMIT_STORE_SECONDS, STORE => store()).record(took);
}

/// Quorum node `node` answered `op` with `outcome`.
#[cfg(feature = "quorum")]
pub(crate) fn quorum_reply(node: &str, op: &'static str, outcome: &'static str) {
    use super::names::{NODE, OP, QUORUM_NODE_REPLIES};
    counter!(QUORUM_NODE_REPLIES, NODE => node.to_string(), OP => op, OUTCOME => outcome)
        .increment(1);
}
