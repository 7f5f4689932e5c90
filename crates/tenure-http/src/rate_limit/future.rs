//! [`ResponseFuture`]: a small state machine — wait for the limiter at most
//! the budget, ask [`respond`](super::respond) what that answer means, then
//! either call the inner service (and put the headers on its response) or
//! answer directly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tokio::time::Timeout;
use tower_service::Service;

use super::body::RateLimitBody;
use super::config::Settings;
use super::respond::{Next, next_step};
use crate::key::Key;
use crate::limiter::{BoxFuture, Decision, LimiterError};

type Check = BoxFuture<Result<Decision, LimiterError>>;

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit).
    pub struct ResponseFuture<S, ReqB, F> {
        #[pin]
        state: State<S, ReqB, F>,
    }
}

pin_project! {
    /// What a request waiting for the limiter holds. Boxed in the state, so
    /// that the future stays small for limiters that decide at once.
    struct Pending<S, ReqB> {
        #[pin]
        check: Timeout<Check>,
        key: Key,
        inner: Option<S>,
        req: Option<Request<ReqB>>,
        settings: Arc<Settings>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, F> {
        /// Waiting for the limiter, at most the budget.
        Checking { pending: Pin<Box<Pending<S, ReqB>>> },
        /// Admitted: waiting for the inner service.
        Calling {
            #[pin]
            fut: F,
            // What is left to do to the response, if anything: a response
            // with nothing to add holds no reference to the settings.
            after: Option<After>,
        },
        /// Answered by the middleware itself.
        Ready { res: Option<Response<Bytes>> },
    }
}

/// What an admitted response still needs once the inner service gives it.
struct After {
    settings: Arc<Settings>,
    /// The decision whose rate-limit headers go on the response.
    decision: Option<Decision>,
    /// The key, when the limiter charged the request: for a cost settled
    /// after the response (boxed: rarely there).
    charged: Option<Box<Key>>,
}

impl After {
    /// `None` when there is nothing to write and nothing to settle.
    #[inline]
    fn new(
        settings: &Arc<Settings>,
        decision: Option<Decision>,
        charged: Option<Box<Key>>,
    ) -> Option<After> {
        (decision.is_some() || charged.is_some()).then(|| After {
            settings: Arc::clone(settings),
            decision,
            charged,
        })
    }

    /// Settles the request's cost and writes the headers on `res`.
    fn apply<B>(self, res: &mut Response<B>) {
        if let Some(key) = self.charged {
            settle(&self.settings, *key, res.status(), res.headers());
        }
        if let Some(decision) = &self.decision {
            self.settings.style.write(decision, res.headers_mut());
        }
    }
}

impl<S, ReqB, F> ResponseFuture<S, ReqB, F> {
    pub(crate) fn ready(res: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Ready { res: Some(res) },
        }
    }

    /// Calls the inner service without a decision (an allowed key).
    pub(crate) fn calling(fut: F) -> Self {
        ResponseFuture {
            state: State::Calling { fut, after: None },
        }
    }

    /// The limiter decided at once ([`check_now`](crate::RateLimiter::check_now)).
    // Inlined into `call`: the request is then not copied on its way to the
    // inner service (about 50 instructions per request).
    #[inline]
    pub(crate) fn decided<ResB, E>(
        outcome: Result<Decision, LimiterError>,
        key: &str,
        inner: &mut S,
        req: Request<ReqB>,
        settings: &Arc<Settings>,
    ) -> Self
    where
        S: Service<Request<ReqB>, Response = Response<ResB>, Error = E, Future = F>,
    {
        // The common case without the general one's steps: admitted, not a
        // dry run (nor a shadow policy's would-be refusal, which is logged),
        // nothing to settle after the response.
        if let Ok(decision) = &outcome
            && decision.allowed
            && !decision.would_refuse
            && !settings.shadow
            && settings.cost_after.is_none()
        {
            // `after` first: the inner future is then built in its place.
            let after = After::new(settings, settings.style.any().then_some(*decision), None);
            let state = State::Calling {
                fut: inner.call(req),
                after,
            };
            return ResponseFuture { state };
        }
        let state = after_check(Some(outcome), key, inner, req, settings);
        ResponseFuture { state }
    }

    pub(crate) fn checking(
        check: Check,
        key: Key,
        inner: S,
        req: Request<ReqB>,
        settings: Arc<Settings>,
    ) -> Self {
        ResponseFuture {
            state: State::Checking {
                pending: Box::pin(Pending {
                    check: tokio::time::timeout(settings.budget, check),
                    key,
                    inner: Some(inner),
                    req: Some(req),
                    settings,
                }),
            },
        }
    }
}

/// The key to settle the cost of after the response: when a cost is
/// settled then and the limiter took units for this request (it admitted it,
/// and not as a dry-run refusal, which takes nothing).
fn charged_key(
    outcome: &Option<Result<Decision, LimiterError>>,
    key: &str,
    settings: &Settings,
) -> Option<Box<Key>> {
    settings.cost_after.as_ref()?;
    match outcome {
        Some(Ok(d)) if d.allowed && !(settings.shadow && d.would_refuse) => {
            Some(Box::new(Key::from(key)))
        }
        _ => None,
    }
}

/// What follows the limiter's `outcome` (`None`: no decision within the
/// budget): the inner service's call, or the middleware's own answer.
fn after_check<S, ReqB, F, ResB, E>(
    outcome: Option<Result<Decision, LimiterError>>,
    key: &str,
    inner: &mut S,
    req: Request<ReqB>,
    settings: &Arc<Settings>,
) -> State<S, ReqB, F>
where
    S: Service<Request<ReqB>, Response = Response<ResB>, Error = E, Future = F>,
{
    let charged = charged_key(&outcome, key, settings);
    match next_step(outcome, key, settings) {
        Next::Call(decision) => {
            let after = After::new(settings, decision, charged);
            State::Calling {
                fut: inner.call(req),
                after,
            }
        }
        Next::Answer(res) => State::Ready { res: Some(res) },
    }
}

/// Refunds or charges the difference between the request's real cost (from
/// its response) and the cost charged, in a task of its own.
fn settle(settings: &Settings, key: Key, status: StatusCode, headers: &HeaderMap) {
    let Some(cost_after) = &settings.cost_after else {
        return;
    };
    let charged = settings.cost;
    let real = cost_after(status, headers, charged);
    let adjust = match real.cmp(&charged) {
        std::cmp::Ordering::Less => settings.store.refund(&key, charged - real),
        std::cmp::Ordering::Greater => settings.store.check(&key, real - charged),
        std::cmp::Ordering::Equal => return,
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(%key, "no tokio runtime: the request's cost is not settled");
        return;
    };
    runtime.spawn(async move {
        if let Err(e) = adjust.await {
            tracing::warn!(%key, error = %e, "settling a request's cost after its response failed");
        }
    });
}

impl<S, ReqB, F, ResB, E> Future for ResponseFuture<S, ReqB, F>
where
    S: Service<Request<ReqB>, Response = Response<ResB>, Error = E, Future = F>,
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<RateLimitBody<ResB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Checking { pending } => {
                    let pending = pending.as_mut().project();
                    let outcome = ready!(pending.check.poll(cx)).ok();
                    let (Some(mut inner), Some(req)) = (pending.inner.take(), pending.req.take())
                    else {
                        panic!("ResponseFuture polled after completion");
                    };
                    let key = pending.key.as_str();
                    let next = after_check(outcome, key, &mut inner, req, pending.settings);
                    this.state.set(next);
                }
                StateProj::Calling { fut, after } => {
                    if after.is_none() {
                        // Nothing to add: the response passes through,
                        // without a stop in a local that `apply` borrows
                        // (one copy of it fewer, 12 instructions; the check
                        // costs a response with headers about 5).
                        return fut.poll(cx).map_ok(|res| res.map(RateLimitBody::inner));
                    }
                    let mut res = ready!(fut.poll(cx))?;
                    if let Some(after) = after.take() {
                        after.apply(&mut res);
                    }
                    // Wrapped on its way out: one move of the response.
                    return Poll::Ready(Ok(res.map(RateLimitBody::inner)));
                }
                StateProj::Ready { res } => {
                    let Some(res) = res.take() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    return Poll::Ready(Ok(res.map(RateLimitBody::full)));
                }
            }
        }
    }
}
