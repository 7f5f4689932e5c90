//! The names of tenure's metrics and of their labels, in one place (see the
//! table in [`telemetry`](super)).

/// Histogram, seconds: how long an acquire call (`attempt`,
/// `attempt_within` and the calls built on them) took until its answer. Labels: [`STORE`], [`OUTCOME`].
pub const LEASE_WAIT_SECONDS: &str = "tenure_lease_wait_seconds";

/// Histogram, seconds: how long a guard held its lease, from the grant to its
/// release, drop or loss. Label: [`STORE`].
pub const LEASE_HOLD_SECONDS: &str = "tenure_lease_hold_seconds";

/// Counter: acquire calls by final outcome (`acquired`, `held`, `error`); a
/// call that waited counts once. Labels: [`STORE`], [`OUTCOME`].
pub const LEASE_ACQUISITIONS: &str = "tenure_lease_acquisitions_total";

/// Counter: renewals (watchdog and `extend`) by outcome (`extended`,
/// `not_held`, `error`). Labels: [`STORE`], [`OUTCOME`].
pub const LEASE_RENEWALS: &str = "tenure_lease_renewals_total";

/// Counter: leases lost by their holder, by cause (`not_held`: a renewal found
/// the key gone or taken; `deadline`: the local deadline passed without a
/// confirmed renewal; `max_hold`: the lease's maximum hold was over). Labels:
/// [`STORE`], [`CAUSE`].
pub const LEASE_LOSSES: &str = "tenure_lease_losses_total";

/// Histogram, seconds: from a release notification reaching a waiter to that
/// waiter's grant. Label: [`STORE`].
pub const LEASE_HANDOFF_SECONDS: &str = "tenure_lease_handoff_seconds";

/// Counter: rate-limit decisions by outcome (`allowed`, `refused`,
/// `would_refuse`: admitted, but a policy in shadow mode would have refused,
/// `fallback`: the store failed and the fallback limiter answered, `error`). Labels:
/// [`STORE`], [`OUTCOME`].
pub const LIMIT_DECISIONS: &str = "tenure_limit_decisions_total";

/// Histogram, seconds: one rate-limit store call (a check or peek of every
/// policy of a limiter). Label: [`STORE`].
pub const LIMIT_STORE_SECONDS: &str = "tenure_limit_store_seconds";

/// Counter: replies of each quorum node, by operation and outcome
/// (`answered`, `timed_out`, `unreachable`, `failed`). Labels: [`NODE`],
/// [`OP`], [`OUTCOME`].
pub const QUORUM_NODE_REPLIES: &str = "tenure_quorum_node_replies_total";

/// Label: the kind of store, the scheme of its description (`redis`,
/// `rediss`, `sqlite`, `memory`, `quorum`, `etcd`).
pub const STORE: &str = "store";

/// Label: what an operation ended with.
pub const OUTCOME: &str = "outcome";

/// Label: why a lease was lost.
pub const CAUSE: &str = "cause";

/// Label: a quorum node, as its URL without credentials.
pub const NODE: &str = "node";

/// Label: a quorum operation (`acquire`, `extend`, `release`, `status`, …).
pub const OP: &str = "op";
