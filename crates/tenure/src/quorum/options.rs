//! Settings of a quorum store. The drift margin is the lease layer's
//! [`DriftMargin`] (one margin for every store), re-exported here.

use std::time::Duration;

pub use crate::lease::store::DriftMargin;
use crate::redis::DEFAULT_PREFIX;

/// Default time budget of one node's answer, connecting included: 500 ms.
///
/// It must cover a cold start — a short-lived process (a cron job, the
/// command line) connects to every node on its first acquire: TCP, TLS,
/// `AUTH`, loading the scripts — on a busy host, where Redlock's usual
/// 100 ms is too tight and turns a slow start into `QuorumUnavailable`. It
/// costs little when a node is slow or
/// frozen: an operation decides as soon as a majority has answered, and a
/// node that stopped answering is marked and not waited for again, so the
/// budget is spent only when the majority itself needs the slow node. It
/// stays far below the default 30 s TTL (Redlock's "much smaller than the
/// TTL") and never runs past the lease's validity.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// Default upper bound of the random pause a client takes after a split vote.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Settings of a [`QuorumStore`](super::QuorumStore).
#[derive(Debug, Clone)]
#[must_use]
#[non_exhaustive]
pub struct QuorumOptions {
    /// Prefix of every key tenure writes on each node (default `tenure:`).
    pub(crate) prefix: String,
    /// Time budget of one node's answer, connecting included (default
    /// [`DEFAULT_NODE_TIMEOUT`]). It never extends past the lease's validity.
    pub(crate) node_timeout: Duration,
    /// Time budget of one TCP connect (default: the node timeout).
    pub(crate) connect_timeout: Option<Duration>,
    /// The clock-drift margin (default 1% of the TTL + 2 ms).
    pub(crate) drift: DriftMargin,
    /// Upper bound of the random retry delay reported after a split vote (default
    /// [`DEFAULT_RETRY_DELAY`]).
    pub(crate) retry_delay: Duration,
    /// How long each node keeps a fence counter after its last grant
    /// (default [`DEFAULT_FENCE_RETENTION`](crate::fence::DEFAULT_FENCE_RETENTION)).
    pub(crate) fence_retention: Duration,
}

impl Default for QuorumOptions {
    fn default() -> Self {
        QuorumOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: None,
            drift: DriftMargin::default(),
            retry_delay: DEFAULT_RETRY_DELAY,
            fence_retention: crate::fence::DEFAULT_FENCE_RETENTION,
        }
    }
}

impl QuorumOptions {
    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the time budget of one node's answer.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Sets the connect time budget.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Sets the clock-drift margin.
    pub fn drift(mut self, drift: DriftMargin) -> Self {
        self.drift = drift;
        self
    }

    /// Sets the upper bound of the random retry delay after a split vote.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Sets how long each node keeps a fence counter after its last grant
    /// (see [`RedisOptions::fence_retention`](crate::redis::RedisOptions::fence_retention)).
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// These options with every duration at most
    /// [`MAX_TTL`](crate::lease::MAX_TTL): a longer one means that long, and no
    /// deadline computed from it can overflow.
    pub(crate) fn capped(mut self) -> Self {
        use crate::duration::capped;
        self.node_timeout = capped(self.node_timeout);
        self.connect_timeout = self.connect_timeout.map(capped);
        self.retry_delay = capped(self.retry_delay);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_drift_is_one_percent_plus_two_ms() {
        let d = DriftMargin::default();
        assert_eq!(d.of(Duration::from_secs(10)), Duration::from_millis(102));
        assert_eq!(d.of(Duration::ZERO), Duration::from_millis(2));
        let huge = DriftMargin {
            per_mille: u32::MAX,
            fixed: Duration::MAX,
        };
        assert_eq!(huge.of(Duration::MAX), Duration::MAX, "saturates");
    }
}
