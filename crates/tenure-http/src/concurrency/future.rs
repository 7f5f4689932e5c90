//! [`ConcurrencyFuture`]: wait for a permit within the wait budget, then
//! call the inner service and hand the permit to the response body.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode};
use tenure::Attempt;
use tenure::lease::LeaseGuard;
use tower_service::Service;

use super::body::ConcurrencyBody;
use super::service::Settings;
use crate::problem::problem;
use crate::rate_limit::FailurePolicy;

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The response future of [`ConcurrencyLimit`](super::ConcurrencyLimit).
pub struct ConcurrencyFuture<B, E> {
    inner: Boxed<Result<Response<ConcurrencyBody<B>>, E>>,
}

impl<B, E> std::fmt::Debug for ConcurrencyFuture<B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyFuture").finish_non_exhaustive()
    }
}

/// The outcome of waiting for a permit.
enum Permit {
    Held(LeaseGuard),
    /// The store failed and the failure policy lets the request through.
    Bypass,
    Refused(Response<bytes::Bytes>),
}

impl<B: Send + 'static, E: Send + 'static> ConcurrencyFuture<B, E> {
    pub(crate) fn new<S, ReqB>(
        settings: Arc<Settings>,
        key: String,
        mut inner: S,
        req: Request<ReqB>,
    ) -> Self
    where
        S: Service<Request<ReqB>, Response = Response<B>, Error = E> + Send + 'static,
        S::Future: Send,
        ReqB: Send + 'static,
    {
        ConcurrencyFuture {
            inner: Box::pin(async move {
                let guard = match permit(&settings, &key).await {
                    Permit::Held(guard) => Some(guard),
                    Permit::Bypass => None,
                    Permit::Refused(res) => return Ok(res.map(ConcurrencyBody::full)),
                };
                let res = inner.call(req).await?;
                Ok(res.map(|body| ConcurrencyBody::inner(body, guard)))
            }),
        }
    }

    pub(crate) fn missing_key() -> Self {
        let res = crate::rate_limit::missing_key_problem();
        ConcurrencyFuture {
            inner: Box::pin(async move { Ok(res.map(ConcurrencyBody::full)) }),
        }
    }
}

/// Waits for a permit of `key` at most the wait budget.
async fn permit(settings: &Settings, key: &str) -> Permit {
    let name = format!("{}{key}", settings.prefix);
    let attempt = match settings.tenure.semaphore(name, settings.permits) {
        Ok(semaphore) => {
            let lease = semaphore.lease().ttl(settings.ttl).watchdog(true);
            lease.attempt_within(settings.wait).await
        }
        Err(e) => Err(e),
    };
    match attempt {
        Ok(Attempt::Acquired(guard)) => Permit::Held(guard),
        Ok(_) => {
            let detail = format!(
                "more than {} requests of this client in flight; retry shortly",
                settings.permits
            );
            let mut res = problem(StatusCode::TOO_MANY_REQUESTS, &detail);
            res.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            Permit::Refused(res)
        }
        Err(e) if e.is_infrastructure() && settings.on_failure == FailurePolicy::Open => {
            tracing::warn!(key, error = %e, "concurrency limit store failed; letting the request through (fail open)");
            Permit::Bypass
        }
        Err(e) => {
            tracing::warn!(key, error = %e, "concurrency limit failed; refusing the request");
            let mut res = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "the concurrency limiter is unavailable; try again shortly",
            );
            res.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            Permit::Refused(res)
        }
    }
}

impl<B, E> Future for ConcurrencyFuture<B, E> {
    type Output = Result<Response<ConcurrencyBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
