//! What tenure tells about itself: `tracing` spans and events, and metrics
//! through the `metrics` facade (cargo feature `metrics`).
//!
//! # Spans and events
//!
//! Every span carries the lease or limiter `key` and the `store` (its
//! description: the URL without credentials, `sqlite:PATH`, `memory:`,
//! `quorum(…)`); `outcome` and `latency_us` (microseconds) are recorded when
//! the operation ends, and an event at the span's level says the outcome
//! inside it. Owner tokens and passwords are never recorded.
//!
//! | span or event | target | level | fields |
//! |---|---|---|---|
//! | span `acquire`: one attempt | `tenure::lease` | debug | key, store, ttl_ms, outcome (`acquired`, `held`, `error`), fence, ttl_left_ms, latency_us |
//! | span `wait`: `attempt_within` | `tenure::lease` | debug | key, store, max_wait_ms, outcome, fence, attempts, latency_us; events "held by another holder; waiting" and "woken by a release" inside |
//! | span `extend`: watchdog or `extend` | `tenure::lease::guard` | trace | key, store, fence, outcome (`extended`, `not_held`, `error`), latency_us |
//! | span `release`: release or drop | `tenure::lease::guard` | debug | key, store, fence, held_ms, outcome (`released`, `not_held`, `error`), latency_us |
//! | event "lease lost" | `tenure::lease::guard` | warn | key, store, fence, cause (`not_held`, `deadline`, `max_hold`) |
//! | span `limit`: one check or peek | `tenure::limit` | debug | key, store, cost, peek, outcome (`allowed`, `refused`, `would_refuse`, `fallback`, `error`), remaining, would_refuse, latency_us |
//! | event "quorum reply": one node's answer | `tenure::quorum` | trace | op, key, node, outcome (`answered`, `timed_out`, `unreachable`, `failed`), latency_us |
//!
//! So `info` is quiet while everything works (warnings are for lost leases,
//! failing renewals, a fallback limiter in use, an evicting Redis), `debug`
//! tells the story of a contended hand-off (the waiter's attempts, the wake-up
//! by the release, the grant and its fence, the holder's release) and every
//! limiter decision, and `trace` adds renewals and each quorum node's replies.
//! `RUST_LOG=tenure=debug` with `tracing-subscriber`'s `EnvFilter` shows it
//! (`tenure -vv` on the command line). A waiter and the holder in one
//! process, on Redis:
//!
//! ```text
//! DEBUG wait{key=orders store=redis://127.0.0.1:6379 max_wait_ms=20000}:acquire{… ttl_left_ms=9999 outcome="held" latency_us=207}: held
//! DEBUG wait{key=orders store=redis://127.0.0.1:6379 max_wait_ms=20000}: held by another holder; waiting ttl_left_ms=9999
//! DEBUG wait{key=orders …}: woken by a release
//! DEBUG release{key=orders store=redis://127.0.0.1:6379 fence=1764673200123000 held_ms=321 outcome="released" latency_us=651}: released
//! DEBUG wait{key=orders …}:acquire{… fence=2 outcome="acquired" latency_us=305}: acquired
//! DEBUG wait{key=orders … attempts=3 fence=2 outcome="acquired" latency_us=321883}: acquired
//! ```
//!
//! Without a subscriber that wants them, spans and events cost what `tracing`
//! charges for a disabled callsite; their fields (the store's description
//! included) are not even computed, also when another crate turns on
//! `tracing`'s `log` feature (axum's default `tower-log` does). Each
//! operation still reads the clock once for its latency.
//!
//! # Metrics
//!
//! With the cargo feature `metrics` (off by default) tenure reports to the
//! [`metrics`](https://docs.rs/metrics) facade; the program picks the exporter
//! (Prometheus, OpenTelemetry, StatsD …) by installing its recorder. Without
//! the feature every metric point compiles to nothing. Histograms are in
//! seconds. The names are constants in [`names`]:
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `tenure_lease_acquisitions_total` | counter | store, outcome (`acquired`, `held`, `error`) | acquire calls by final outcome; a call that waited counts once |
//! | `tenure_lease_wait_seconds` | histogram | store, outcome | how long an acquire call took to answer (the wait, for `attempt_within`) |
//! | `tenure_lease_hold_seconds` | histogram | store | from the grant until the guard let go (release or drop) |
//! | `tenure_lease_renewals_total` | counter | store, outcome (`extended`, `not_held`, `error`) | renewals, by the watchdog or `extend` |
//! | `tenure_lease_losses_total` | counter | store, cause (`not_held`, `deadline`, `max_hold`) | leases their holder lost |
//! | `tenure_lease_handoff_seconds` | histogram | store | from a release notification reaching a waiter to its grant |
//! | `tenure_limit_decisions_total` | counter | store, outcome (`allowed`, `refused`, `would_refuse`, `fallback`, `error`) | rate-limit checks and peeks; `would_refuse`: admitted, but a policy in shadow mode would have refused |
//! | `tenure_limit_store_seconds` | histogram | store | one rate-limit store call |
//! | `tenure_quorum_node_replies_total` | counter | node, op, outcome (`answered`, `timed_out`, `unreachable`, `failed`) | each quorum node's replies |
//!
//! `store` is the kind of store (`redis`, `rediss`, `sqlite`, `memory`,
//! `quorum`, `etcd`), never a key: label values stay few. It is the store's
//! `kind()` (of `LeaseStore` or `LimitStore`), which tenure's stores answer
//! without formatting anything; a store of your own gets the text of its
//! `describe()` before the first `:` or `(` unless it says otherwise. A `fallback`
//! decision of a limiter is also counted under its fallback's store with that
//! limiter's own outcome. Hand-off latency starts when the notification
//! arrives, so it does not include the notification's own trip; waiters that
//! poll (no notifications) and grants after an expiry are not counted.
//!
//! To export to Prometheus, add `metrics-exporter-prometheus` and serve its
//! handle (this is what the bank example does at `GET /metrics`; a test
//! scrapes it over loopback):
//!
//! ```ignore
//! // Cargo.toml: tenure = { version = "0.1", features = ["metrics"] }
//! //             metrics-exporter-prometheus = { version = "0.18", default-features = false }
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
//! let app = axum::Router::new().route("/metrics", axum::routing::get(move || {
//!     let handle = handle.clone();
//!     async move { handle.run_upkeep(); handle.render() }
//! }));
//! ```

use std::borrow::Cow;

#[cfg(feature = "metrics")]
mod meter;
#[cfg(not(feature = "metrics"))]
#[path = "quiet.rs"]
mod meter;
pub mod names;

/// The schemes of tenure's own stores: the kinds a metric's `store` label
/// takes without an allocation.
const KINDS: [&str; 11] = [
    "memory",
    "sqlite",
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
    "etcd",
    "etcds",
    "quorum",
];

/// The kind of a store from its description: the scheme (`redis`, `sqlite`,
/// `memory`, `quorum`, …), so that a metric's label has one value per kind of
/// store, not one per host or file. The text before the first `:` or `(`,
/// borrowed for the schemes tenure knows.
pub(crate) fn store_kind(description: &str) -> Cow<'static, str> {
    let scheme = description
        .find([':', '('])
        .map_or(description, |end| &description[..end]);
    match KINDS.iter().find(|kind| **kind == scheme) {
        Some(kind) => Cow::Borrowed(kind),
        None => Cow::Owned(scheme.to_owned()),
    }
}

#[cfg(feature = "quorum")]
pub(crate) use meter::quorum_reply;
pub(crate) use meter::{
    Stopwatch, acquisition, handoff, hold, limit_decision, limit_store, loss, renewal, stopwatch,
    stopwatch_at,
};

/// Records `outcome` and the latency since `started` (a `tokio::time::Instant`)
/// on `span`, then says the outcome in an event inside it at `level` — from
/// the caller's module, so the event's target is the caller's.
macro_rules! finish {
    ($level:ident, $span:expr, $outcome:expr, $started:expr) => {{
        let span: &tracing::Span = $span;
        // Nothing to record (not even the clock to read) when nobody listens.
        if !span.is_disabled() {
            let outcome: &'static str = $outcome;
            span.record("outcome", outcome);
            span.record("latency_us", $crate::duration::micros($started.elapsed()));
            tracing::$level!(parent: span, "{outcome}");
        }
    }};
}
pub(crate) use finish;

/// A span field worked out only when something records it: `store =
/// %telemetry::lazy(|| self.backend.describe())`. A disabled span still
/// evaluates its field expressions when `tracing`'s `log` feature is on
/// (another crate of the program may turn it on) and no subscriber is set,
/// to offer them to the `log` crate; this one costs nothing until a logger
/// formats the record.
pub(crate) fn lazy<F: Fn() -> String>(value: F) -> Lazy<F> {
    Lazy(value)
}

/// A field's value, computed when displayed (see [`lazy`]).
pub(crate) struct Lazy<F>(F);

impl<F: Fn() -> String> std::fmt::Display for Lazy<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.0)())
    }
}

/// Awaits `work` inside `span` — or, when nobody listens (the span is
/// disabled), awaits it bare: not wrapped in an `Instrumented`, so the
/// future is not moved once more and no span is entered at each poll.
/// A macro, not an `async fn`: a function would be one more future layer.
macro_rules! in_span {
    ($span:expr, $work:expr) => {{
        let span: &tracing::Span = $span;
        if span.is_disabled() {
            $work.await
        } else {
            tracing::Instrument::instrument($work, span.clone()).await
        }
    }};
}
pub(crate) use in_span;

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::store_kind;

    #[test]
    fn a_store_is_labelled_by_its_scheme_borrowed_when_tenure_knows_it() {
        for (description, kind) in [
            ("redis://127.0.0.1:6379", "redis"),
            ("rediss+cluster://a:1,b:2", "rediss+cluster"),
            ("quorum(redis://a:1, redis://b:1)", "quorum"),
            ("sqlite:/tmp/w.db", "sqlite"),
            ("memory:", "memory"),
            ("etcds://u:***@h:2379", "etcds"),
        ] {
            assert!(matches!(store_kind(description), Cow::Borrowed(k) if k == kind));
        }
        assert!(matches!(store_kind("custom"), Cow::Owned(k) if k == "custom"));
        assert!(matches!(store_kind("mine://x"), Cow::Owned(k) if k == "mine"));
    }

    /// The kinds tenure's stores answer without describing themselves are
    /// the labels their descriptions give (Redis and etcd read theirs from
    /// the description's text, so they cannot differ).
    #[tokio::test]
    async fn each_store_answers_the_kind_its_description_gives() {
        use crate::lease::store::LeaseStore;
        use crate::limit::store::LimitStore;

        fn lease(store: &dyn LeaseStore) {
            assert_eq!(store.kind(), store_kind(&store.describe()), "{store:?}");
        }
        fn limits(store: &dyn LimitStore) {
            assert_eq!(store.kind(), store_kind(&store.describe()), "{store:?}");
        }
        lease(&crate::memory::MemoryStore::default());
        limits(&crate::memory::MemoryLimits::new());
        #[cfg(feature = "sqlite")]
        {
            let dir = tempfile::tempdir().unwrap();
            let options = crate::sqlite::SqliteOptions::default();
            let sqlite = crate::sqlite::SqliteStore::open(dir.path().join("kinds.db"), options)
                .await
                .unwrap();
            lease(&sqlite);
            limits(&sqlite);
        }
        #[cfg(feature = "quorum")]
        {
            let nodes = [
                "redis://127.0.0.1:1",
                "redis://127.0.0.1:2",
                "redis://127.0.0.1:3",
            ];
            let quorum =
                crate::quorum::QuorumStore::new(nodes, crate::quorum::QuorumOptions::default())
                    .unwrap();
            lease(&quorum);
            limits(&crate::quorum::QuorumLimits {
                nodes: quorum.describe(),
            });
        }
    }
}
