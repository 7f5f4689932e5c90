//! [`ConcurrencyLimit`]: the service that takes a permit of the request's
//! key before calling its inner one.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower_service::Service;

use super::body::ConcurrencyBody;
use super::future::ConcurrencyFuture;
use crate::key::{KeyExtractor, RequestHead};
use crate::rate_limit::{FailurePolicy, MissingKey};

/// What every service of one layer shares.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) tenure: tenure::Coordinator,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) permits: NonZeroU32,
    pub(crate) wait: Duration,
    pub(crate) ttl: Duration,
    pub(crate) missing: MissingKey,
    pub(crate) on_failure: FailurePolicy,
    pub(crate) prefix: String,
}

/// A service whose requests are limited in flight by a
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
#[derive(Clone)]
pub struct ConcurrencyLimit<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for ConcurrencyLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> ConcurrencyLimit<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        ConcurrencyLimit { inner, settings }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for ConcurrencyLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<ConcurrencyBody<ResB>>;
    type Error = S::Error;
    type Future = ConcurrencyFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let key = match self.settings.key.extract(&RequestHead::new(&req)) {
            Some(key) => key,
            None => match &self.settings.missing {
                MissingKey::Bucket(bucket) => bucket.clone(),
                MissingKey::Reject => return ConcurrencyFuture::missing_key(),
            },
        };
        ConcurrencyFuture::new(Arc::clone(&self.settings), key, inner, req)
    }
}
