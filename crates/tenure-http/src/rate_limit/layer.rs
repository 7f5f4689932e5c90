//! [`RateLimitLayer`]: the middleware's configuration, a builder over the
//! knobs of [`config`](super::config). Wrapping a service freezes them into one
//! shared [`Settings`] and hands it to [`RateLimit`] (layer → service → future).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::config::{CostAfter, DEFAULT_BUDGET, FailurePolicy, MissingKey, Settings};
use super::service::RateLimit;
use crate::access::AccessList;
use crate::headers::{HeaderStyle, PolicyName};
use crate::key::KeyExtractor;
use crate::limiter::RateLimiter;

/// A tower [`Layer`] that rate-limits requests through a [`RateLimiter`],
/// one bucket per key.
///
/// Admitted responses carry `RateLimit-Policy` and `RateLimit` (unless turned
/// off with [`headers`](Self::headers)), and `X-RateLimit-*` when
/// [`legacy_headers`](Self::legacy_headers) asks for them; refusals are `429` with `Retry-After` and an
/// `application/problem+json` body. A layer is only configuration: cheap to
/// clone, shared by every service it wraps.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use tower::{Service, ServiceBuilder, ServiceExt};
/// use tenure_http::{FailurePolicy, PeerAddr, PeerIp, RateLimitLayer, Decision};
/// # use tenure_http::{BoxFuture, QuotaPolicy, RateLimiter, LimiterError};
/// # struct OnePerKey(std::sync::Mutex<std::collections::HashSet<String>>);
/// # impl RateLimiter for OnePerKey {
/// #     fn check(&self, key: &str, _: u32) -> BoxFuture<Result<Decision, LimiterError>> {
/// #         let first = self.0.lock().unwrap().insert(key.to_owned());
/// #         let w = Duration::from_secs(60);
/// #         Box::pin(async move { Ok(if first { Decision::allowed(1, 0, w) } else { Decision::refused(1, w, w) }) })
/// #     }
/// #     fn policy(&self) -> Option<QuotaPolicy> { Some(QuotaPolicy { limit: 1, window: Duration::from_secs(60) }) }
/// # }
/// # let store = OnePerKey(Default::default());
/// // `store` is any RateLimiter, e.g. a tenure `Limiter`: here, 1 per minute.
/// let layer = RateLimitLayer::new(store, PeerIp)
///     .budget(Duration::from_millis(100))
///     .on_store_failure(FailurePolicy::Closed);
/// let mut svc = ServiceBuilder::new().layer(layer).service_fn(|_req: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
/// });
/// let request = || {
///     let mut req = http::Request::new(String::new());
///     req.extensions_mut().insert(PeerAddr("192.0.2.7:5555".parse().unwrap()));
///     req
/// };
/// let ok = svc.ready().await.unwrap().call(request()).await.unwrap();
/// assert_eq!(ok.headers()["ratelimit"], "\"default\";r=0;t=60");
/// let refused = svc.ready().await.unwrap().call(request()).await.unwrap();
/// assert_eq!(refused.status(), 429);
/// assert_eq!(refused.headers()["retry-after"], "60");
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct RateLimitLayer {
    store: Arc<dyn RateLimiter>,
    key: Arc<dyn KeyExtractor>,
    name: PolicyName,
    headers: bool,
    legacy: bool,
    missing: MissingKey,
    on_failure: FailurePolicy,
    budget: Duration,
    cost: NonZeroU32,
    shadow: bool,
    shadow_headers: bool,
    access: AccessList,
    cost_after: Option<CostAfter>,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policy", &self.store.policy())
            .field("name", &self.name)
            .field("headers", &self.headers)
            .field("legacy", &self.legacy)
            .field("missing", &self.missing)
            .field("on_failure", &self.on_failure)
            .field("budget", &self.budget)
            .field("cost", &self.cost)
            .field("shadow", &self.shadow)
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// Limits requests through `store`, one bucket per key from `key`.
    ///
    /// Defaults: policy name `default`, the standard headers on and the
    /// legacy ones off, keyless requests
    /// refused with `400`, fail open, a budget of [`DEFAULT_BUDGET`], cost 1.
    pub fn new(store: impl RateLimiter, key: impl KeyExtractor) -> Self {
        RateLimitLayer {
            store: Arc::new(store),
            key: Arc::new(key),
            name: PolicyName::default(),
            headers: true,
            legacy: false,
            missing: MissingKey::default(),
            on_failure: FailurePolicy::default(),
            budget: DEFAULT_BUDGET,
            cost: NonZeroU32::MIN,
            shadow: false,
            shadow_headers: false,
            access: AccessList::default(),
            cost_after: None,
        }
    }

    /// Settles each admitted request's cost after its response: `settle`
    /// gets the response's status and headers and the cost charged, and
    /// returns the real cost; less is refunded ([`RateLimiter::refund`]),
    /// more is charged as an extra check. See
    /// [`refund_server_errors`](Self::refund_server_errors) for the common
    /// case.
    ///
    /// What it can and cannot guarantee: the adjustment runs in a task of its
    /// own once the response head is ready, so the response is not delayed
    /// and its rate-limit headers show the decision before the adjustment; it
    /// is not atomic with the check, and is lost if the process dies in
    /// between or the store fails (logged at `warn`). A refund never takes a
    /// key above its capacity. An extra charge is all or nothing: when it does
    /// not fit it is not taken (the response has gone out; nothing can refuse
    /// it now). Nothing is settled for requests the limiter did not charge (an
    /// allowed key, a dry-run refusal, a store failure let through).
    pub fn cost_after(
        mut self,
        settle: impl Fn(http::StatusCode, &http::HeaderMap, u32) -> u32 + Send + Sync + 'static,
    ) -> Self {
        self.cost_after = Some(Arc::new(settle));
        self
    }

    /// Refunds requests answered with a server error (`5xx`): a failure of
    /// the service does not use up the client's quota. Replaces any
    /// [`cost_after`](Self::cost_after).
    pub fn refund_server_errors(self) -> Self {
        self.cost_after(|status, _, charged| match status.is_server_error() {
            true => 0,
            false => charged,
        })
    }

    /// A dry run (off by default): the limiter decides and counts as usual,
    /// but a refusal lets the request through — a tenure `Limiter` is asked
    /// in its shadow mode, so its telemetry counts `would_refuse`, and the
    /// middleware logs the would-be refusal at `debug`. The rate-limit
    /// headers stay off the responses unless [`shadow_headers`](Self::shadow_headers)
    /// turns them on; `Retry-After` is never sent. Whether the dry run
    /// consumes: it consumes exactly what enforcing would (see tenure's
    /// `Limiter::shadow`), so its counts are the refusals enforcing would
    /// produce.
    pub fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// In a dry run, writes the rate-limit headers of each decision
    /// (`RateLimit: …;r=0` when it would refuse), so clients can see the
    /// coming limit before it is enforced. Off by default.
    pub fn shadow_headers(mut self, on: bool) -> Self {
        self.shadow_headers = on;
        self
    }

    /// Keys and networks that skip the limiter, and ones refused with `403`
    /// and a problem body (see [`AccessList`]).
    pub fn access(mut self, list: AccessList) -> Self {
        self.access = list;
        self
    }

    /// The policy name in `RateLimit-Policy` and `RateLimit`.
    pub fn policy_name(mut self, name: PolicyName) -> Self {
        self.name = name;
        self
    }

    /// Writes the rate-limit fields on responses (on by default): with
    /// `false`, neither the standard `RateLimit-Policy` and `RateLimit` nor
    /// the legacy `X-RateLimit-*` are written, whatever
    /// [`legacy_headers`](Self::legacy_headers) and
    /// [`shadow_headers`](Self::shadow_headers) say. A refusal still carries
    /// `Retry-After`.
    pub fn headers(mut self, on: bool) -> Self {
        self.headers = on;
        self
    }

    /// Writes the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (Unix seconds) too, for clients that read only
    /// those (off by default).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.legacy = on;
        self
    }

    /// What to do with requests that carry no key.
    pub fn on_missing_key(mut self, missing: MissingKey) -> Self {
        self.missing = missing;
        self
    }

    /// What to do when the store fails or exceeds the budget.
    pub fn on_store_failure(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = policy;
        self
    }

    /// The longest a request waits for a decision; past it the
    /// [`FailurePolicy`] applies and the store call is dropped.
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// Units each request spends (1 by default).
    pub fn cost(mut self, cost: NonZeroU32) -> Self {
        self.cost = cost;
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        let policy = self.store.policy();
        let store = match self.shadow.then(|| self.store.shadowed()).flatten() {
            Some(shadowed) => Arc::from(shadowed),
            None => Arc::clone(&self.store),
        };
        let settings = Settings {
            store,
            key: Arc::clone(&self.key),
            policy,
            style: HeaderStyle::new(
                self.name.clone(),
                policy,
                self.headers,
                self.headers && self.legacy,
            ),
            missing: self.missing.clone(),
            on_failure: self.on_failure,
            budget: self.budget,
            cost: self.cost.get(),
            shadow: self.shadow,
            shadow_headers: self.shadow_headers,
            access: (!self.access.is_empty()).then(|| self.access.clone()),
            cost_after: self.cost_after.clone(),
        };
        RateLimit::new(inner, Arc::new(settings))
    }
}
