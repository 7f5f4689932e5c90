//! The middleware's settings: the knobs a [`RateLimitLayer`](super::RateLimitLayer)
//! exposes ([`FailurePolicy`], [`MissingKey`], [`DEFAULT_BUDGET`]) and
//! [`Settings`], the one immutable copy every service of a layer shares.
//!
//! This file is the bottom of `rate_limit/`: it imports nothing from its
//! siblings, and layer, service, future and respond all read it.

use std::sync::Arc;
use std::time::Duration;

use crate::access::AccessList;
use crate::headers::HeaderStyle;
use crate::key::KeyExtractor;
use crate::limiter::{QuotaPolicy, RateLimiter};

/// The longest a request waits for the limiter unless
/// [`RateLimitLayer::budget`](super::RateLimitLayer::budget) says otherwise. A
/// Redis round trip on a LAN takes well under a millisecond; 250 ms means the
/// store is in trouble.
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(250);

/// What to do when the limiter cannot decide in time (store down, slow, failing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Let the request through without rate-limit headers (the default, as in
    /// Envoy's rate-limit filter): an outage of the limiter does not become an
    /// outage of the service.
    #[default]
    Open,
    /// Answer `503 Service Unavailable` with a problem body and `Retry-After: 1`:
    /// for endpoints where an unlimited burst is worse than no answer.
    Closed,
}

/// What to do with a request the key extractor finds no key in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer `400 Bad Request` with a problem body (the default).
    #[default]
    Reject,
    /// Count it against this shared bucket (all keyless requests together).
    Bucket(String),
}

/// What every service made by one layer shares, fixed when the layer wraps a
/// service (the advertised policy is read from the store once, then).
pub(crate) struct Settings {
    pub(crate) store: Arc<dyn RateLimiter>,
    pub(crate) key: Arc<dyn KeyExtractor>,
    /// The quota the store advertised, for headers and refusal messages.
    pub(crate) policy: Option<QuotaPolicy>,
    pub(crate) style: HeaderStyle,
    pub(crate) missing: MissingKey,
    pub(crate) on_failure: FailurePolicy,
    pub(crate) budget: Duration,
    pub(crate) cost: u32,
    /// Refusals are let through (a dry run); see `RateLimitLayer::shadow`.
    pub(crate) shadow: bool,
    /// In a dry run, the rate-limit headers still go on responses.
    pub(crate) shadow_headers: bool,
    /// Keys and networks that skip the limiter or are refused outright;
    /// `None` when there are none (one test per request).
    pub(crate) access: Option<AccessList>,
    /// The request's real cost from its response, when it is known only then.
    pub(crate) cost_after: Option<CostAfter>,
}

/// The real cost of a request from its response's status and headers and
/// the cost charged before (see `RateLimitLayer::cost_after`).
pub(crate) type CostAfter =
    Arc<dyn Fn(http::StatusCode, &http::HeaderMap, u32) -> u32 + Send + Sync>;
