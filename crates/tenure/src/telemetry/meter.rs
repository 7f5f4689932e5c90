//! Metrics through the `metrics` facade (cargo feature `metrics`): whatever
//! recorder the program installed receives them; without one they cost a
//! check of the facade's global recorder.

use std::time::Duration;

use metrics::{counter, histogram};

use super::names::{
    CAUSE, LEASE_ACQUISITIONS, LEASE_HANDOFF_SECONDS, LEASE_HOLD_SECONDS, LEASE_LOSSES,
    LEASE_RENEWALS, LEASE_WAIT_SECONDS, LIMIT_DECISIONS, LIMIT_STORE_SECONDS, OUTCOME, STORE,
};

/// The kind of a store from its description: the scheme (`redis`, `sqlite`,
/// `memory`, `quorum`, …), so a label has one value per kind of store, not one
/// per host or file.
fn kind(description: String) -> String {
    match description.find([':', '(']) {
        Some(end) => description[..end].to_string(),
        None => description,
    }
}

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
    store: impl FnOnce() -> String,
    outcome: &'static str,
    started: tokio::time::Instant,
) {
    let took = started.elapsed();
    let store = kind(store());
    counter!(LEASE_ACQUISITIONS, STORE => store.clone(), OUTCOME => outcome).increment(1);
    histogram!(LEASE_WAIT_SECONDS, STORE => store, OUTCOME => outcome).record(took);
}

/// A guard granted at `granted_at` let go of its lease.
pub(crate) fn hold(store: impl FnOnce() -> String, granted_at: tokio::time::Instant) {
    histogram!(LEASE_HOLD_SECONDS, STORE => kind(store())).record(granted_at.elapsed());
}

/// A renewal ended with `outcome`.
pub(crate) fn renewal(store: impl FnOnce() -> String, outcome: &'static str) {
    counter!(LEASE_RENEWALS, STORE => kind(store()), OUTCOME => outcome).increment(1);
}

/// A holder lost its lease for `cause`.
pub(crate) fn loss(store: impl FnOnce() -> String, cause: &'static str) {
    counter!(LEASE_LOSSES, STORE => kind(store()), CAUSE => cause).increment(1);
}

/// A waiter woken by a release got the lease `took` later.
pub(crate) fn handoff(store: impl FnOnce() -> String, took: Duration) {
    histogram!(LEASE_HANDOFF_SECONDS, STORE => kind(store())).record(took);
}

/// A rate-limit check ended with `outcome`.
pub(crate) fn limit_decision(store: impl FnOnce() -> String, outcome: &'static str) {
    counter!(LIMIT_DECISIONS, STORE => kind(store()), OUTCOME => outcome).increment(1);
}

/// A rate-limit store call took `took`.
pub(crate) fn limit_store(store: impl FnOnce() -> String, took: Duration) {
    histogram!(LIMIT_STORE_SECONDS, STORE => kind(store())).record(took);
}

/// Quorum node `node` answered `op` with `outcome`.
#[cfg(feature = "quorum")]
pub(crate) fn quorum_reply(node: &str, op: &'static str, outcome: &'static str) {
    use super::names::{NODE, OP, QUORUM_NODE_REPLIES};
    counter!(QUORUM_NODE_REPLIES, NODE => node.to_string(), OP => op, OUTCOME => outcome)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::kind;

    #[test]
    fn a_store_is_labelled_by_its_scheme() {
        assert_eq!(kind("redis://127.0.0.1:6379".into()), "redis");
        assert_eq!(kind("quorum(redis://a:1, redis://b:1)".into()), "quorum");
        assert_eq!(kind("sqlite:/tmp/w.db".into()), "sqlite");
        assert_eq!(kind("custom".into()), "custom");
    }
}
