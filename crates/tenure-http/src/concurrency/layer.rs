//! [`ConcurrencyLimitLayer`]: the in-flight limit's configuration.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::service::{ConcurrencyLimit, Settings};
use crate::key::KeyExtractor;
use crate::rate_limit::{FailurePolicy, MissingKey};

/// How long a request waits for a permit unless
/// [`ConcurrencyLimitLayer::wait`] says otherwise: none (refused at once).
pub const DEFAULT_WAIT: Duration = Duration::ZERO;

/// A permit's TTL unless [`ConcurrencyLimitLayer::ttl`] says otherwise: the
/// watchdog renews it while the request is in flight; a crashed process's
/// permits come back after it.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// A tower [`Layer`] that keeps at most `permits` requests of each key in
/// flight, on the semaphores of a tenure [`Coordinator`](tenure::Coordinator)
/// (Redis, SQLite, etcd or in-process memory).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use tenure_http::{ConcurrencyLimitLayer, PeerIp};
///
/// let tenure = tenure::Coordinator::memory(); // in production: connect("redis://…")
/// let layer = ConcurrencyLimitLayer::new(tenure, NonZeroU32::new(4).unwrap(), PeerIp)
///     .wait(Duration::from_millis(200)); // queue for a permit at most 200 ms
/// # let _ = layer;
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct ConcurrencyLimitLayer {
    settings: Settings,
}

impl std::fmt::Debug for ConcurrencyLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimitLayer")
            .field("permits", &self.settings.permits)
            .field("wait", &self.settings.wait)
            .field("ttl", &self.settings.ttl)
            .field("on_failure", &self.settings.on_failure)
            .finish_non_exhaustive()
    }
}

impl ConcurrencyLimitLayer {
    /// At most `permits` requests of each key (from `key`) in flight, on the
    /// semaphores of `tenure`.
    ///
    /// Defaults: no wait ([`DEFAULT_WAIT`]), a permit TTL of
    /// [`DEFAULT_TTL`] renewed by the watchdog, keyless requests refused with
    /// `400`, fail open when the store fails, semaphore keys `inflight:KEY`.
    pub fn new(tenure: tenure::Coordinator, permits: NonZeroU32, key: impl KeyExtractor) -> Self {
        ConcurrencyLimitLayer {
            settings: Settings {
                tenure,
                key: Arc::new(key),
                permits,
                wait: DEFAULT_WAIT,
                ttl: DEFAULT_TTL,
                missing: MissingKey::default(),
                on_failure: FailurePolicy::default(),
                prefix: "inflight:".into(),
            },
        }
    }

    /// How long a request waits for a permit before it is refused (`429`).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    /// The TTL of each permit (renewed while the request is in flight).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// What to do with requests that carry no key.
    pub fn on_missing_key(mut self, missing: MissingKey) -> Self {
        self.settings.missing = missing;
        self
    }

    /// What to do when the store fails: let the request through (open) or
    /// answer `503` (closed).
    pub fn on_store_failure(mut self, policy: FailurePolicy) -> Self {
        self.settings.on_failure = policy;
        self
    }

    /// The prefix of the semaphore keys (`inflight:` by default), so two
    /// layers on one store count apart.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = prefix.into();
        self
    }
}

impl<S> Layer<S> for ConcurrencyLimitLayer {
    type Service = ConcurrencyLimit<S>;

    fn layer(&self, inner: S) -> ConcurrencyLimit<S> {
        ConcurrencyLimit::new(inner, Arc::new(self.settings.clone()))
    }
}
