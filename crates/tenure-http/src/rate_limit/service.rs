//! [`RateLimit`]: the service that asks the limiter before calling its inner
//! one. `call` finds the request's key and starts the check; the
//! [`ResponseFuture`] waits for it.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::body::RateLimitBody;
use super::config::{MissingKey, Settings};
use super::future::ResponseFuture;
use super::respond;
use crate::access::Access;
use crate::key::{Key, RequestHead};

/// A service rate-limited by a [`RateLimitLayer`](super::RateLimitLayer).
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        RateLimit { inner, settings }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
{
    type Response = Response<RateLimitBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let settings = &self.settings;
        // The key stays where the extractor wrote it: only a request that
        // waits for the limiter takes a copy along (beside that wait, the
        // copy is nothing).
        let found = settings.key.key(&RequestHead::new(&req));
        let text = match (&found, &settings.missing) {
            (Some(key), _) => key.as_str(),
            (None, MissingKey::Bucket(bucket)) => bucket.as_str(),
            (None, MissingKey::Reject) => return ResponseFuture::ready(respond::missing_key()),
        };
        if let Some(access) = &settings.access {
            match access.verdict(text) {
                Access::Denied => return ResponseFuture::ready(respond::denied()),
                Access::Allowed => return ResponseFuture::calling(self.inner.call(req)),
                _ => {}
            }
        }
        if let Some(outcome) = settings.store.check_now(text, settings.cost) {
            return ResponseFuture::decided(outcome, text, &mut self.inner, req, settings);
        }
        let check = settings.store.check(text, settings.cost);
        // The service that was driven to readiness is the one to call once
        // the limiter answers; keep a fresh clone for the next request
        // (tower's usual dance). Only here: the other paths call it now.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::checking(check, Key::from(text), inner, req, Arc::clone(settings))
    }
}
