//! The metrics of one scripted scenario on real redis-servers (see
//! `telemetry_common`), read from `metrics-util`'s debugging recorder: every
//! counter with its labels, and the histograms' sample counts. Needs the
//! `metrics` feature: `cargo nextest run -p tenure --features metrics --test
//! telemetry_metrics`.

#![allow(clippy::unwrap_used)]

mod telemetry_common;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tenure::telemetry::names;

/// One metric: its name, its labels (sorted) and its value.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: DebugValue,
}

fn labelled(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Vec<usize> {
    samples
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|(i, _)| i)
        .collect()
}

/// The sum of the counters `name` whose labels include `labels`.
fn counter(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> u64 {
    labelled(samples, name, labels)
        .into_iter()
        .map(|i| match &samples[i].value {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

/// The samples of the histograms `name` whose labels include `labels`, in
/// seconds.
fn histogram(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    labelled(samples, name, labels)
        .into_iter()
        .flat_map(|i| match &samples[i].value {
            DebugValue::Histogram(values) => {
                values.iter().map(|v| v.into_inner()).collect::<Vec<f64>>()
            }
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_scripted_scenario_shows_in_the_counters() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Thread-local, like the single-threaded runtime's tasks.
    let _local = metrics::set_default_local_recorder(&recorder);
    let played = telemetry_common::play().await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    let samples: Vec<Sample> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _unit, _description, value)| {
            let (_kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            labels.sort();
            Sample {
                name: key.name().to_string(),
                labels,
                value,
            }
        })
        .collect();
    let redis = ("store", "redis");

    // Acquisitions by outcome: A, the waiter (once, though it tried several
    // times), C and the quorum's grant; B's refused try.
    let acq = names::LEASE_ACQUISITIONS;
    assert_eq!(counter(&samples, acq, &[redis, ("outcome", "acquired")]), 3);
    assert_eq!(counter(&samples, acq, &[redis, ("outcome", "held")]), 1);
    assert_eq!(counter(&samples, acq, &[redis, ("outcome", "error")]), 0);
    let quorum = ("store", "quorum");
    assert_eq!(
        counter(&samples, acq, &[quorum, ("outcome", "acquired")]),
        1
    );

    // Wait times: one per acquire call; the waiter's is the longest (it waited
    // at least the 300 ms the scenario holds the lease after it subscribed).
    let waits = histogram(&samples, names::LEASE_WAIT_SECONDS, &[redis]);
    assert_eq!(waits.len(), 4, "{waits:?}");
    assert!(waits.iter().any(|w| *w >= 0.3), "{waits:?}");

    // Renewals and losses, by outcome and cause.
    let renewals = names::LEASE_RENEWALS;
    assert_eq!(
        counter(&samples, renewals, &[redis, ("outcome", "extended")]),
        1
    );
    assert_eq!(
        counter(&samples, renewals, &[redis, ("outcome", "not_held")]),
        1
    );
    let losses = names::LEASE_LOSSES;
    assert_eq!(
        counter(&samples, losses, &[redis, ("cause", "not_held")]),
        1
    );
    assert_eq!(
        counter(&samples, losses, &[redis, ("cause", "deadline")]),
        1
    );

    // Hold times: A, B (dropped) and C on Redis; the quorum's grant.
    assert_eq!(
        histogram(&samples, names::LEASE_HOLD_SECONDS, &[redis]).len(),
        3
    );
    assert_eq!(
        histogram(&samples, names::LEASE_HOLD_SECONDS, &[quorum]).len(),
        1
    );

    // One hand-off, well under the time the lease was held.
    let handoffs = histogram(&samples, names::LEASE_HANDOFF_SECONDS, &[redis]);
    assert_eq!(handoffs.len(), 1, "{handoffs:?}");
    assert!(handoffs[0] < 0.3, "{handoffs:?}");

    // Limiter decisions: two allowed, one refused, one would refuse (shadow), an error and a fallback on
    // the dead store, whose fallback (in memory) allowed.
    let decisions = names::LIMIT_DECISIONS;
    assert_eq!(
        counter(&samples, decisions, &[redis, ("outcome", "allowed")]),
        2
    );
    assert_eq!(
        counter(&samples, decisions, &[redis, ("outcome", "refused")]),
        1
    );
    assert_eq!(
        counter(&samples, decisions, &[redis, ("outcome", "would_refuse")]),
        1
    );
    assert_eq!(
        counter(&samples, decisions, &[redis, ("outcome", "error")]),
        1
    );
    assert_eq!(
        counter(&samples, decisions, &[redis, ("outcome", "fallback")]),
        1
    );
    let memory = ("store", "memory");
    assert_eq!(
        counter(&samples, decisions, &[memory, ("outcome", "allowed")]),
        1
    );
    assert_eq!(
        histogram(&samples, names::LIMIT_STORE_SECONDS, &[redis]).len(),
        6
    );

    // Quorum nodes: the live ones answered the acquire and the release, the
    // killed one did not answer either.
    let replies = names::QUORUM_NODE_REPLIES;
    for node in &played.live_nodes {
        for op in ["acquire", "release"] {
            let answered = [("node", node.as_str()), ("op", op), ("outcome", "answered")];
            assert_eq!(counter(&samples, replies, &answered), 1, "{node} {op}");
        }
    }
    let killed = [("node", played.killed_node.as_str()), ("op", "acquire")];
    assert_eq!(counter(&samples, replies, &killed), 1);
    let answered = [killed[0], killed[1], ("outcome", "answered")];
    assert_eq!(counter(&samples, replies, &answered), 0);
}
