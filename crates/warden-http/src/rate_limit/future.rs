//! [`ResponseFuture`]: decide within the budget, then call the inner service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tokio::time::Timeout;
use tower_service::Service;

use super::body::RateLimitBody;
use super::layer::{FailurePolicy, Shared};
use crate::headers::{ceil_secs, retry_after_secs};
use crate::problem::problem;
use crate::store::{BoxFuture, StoreError, Verdict};

type Check = BoxFuture<Result<Verdict, StoreError>>;

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit).
    pub struct ResponseFuture<S, ReqB, F> {
        #[pin]
        state: State<S, ReqB, F>,
        shared: Arc<Shared>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, F> {
        /// Waiting for the limiter, at most the budget.
        Checking {
            #[pin]
            check: Timeout<Check>,
            key: String,
            inner: Option<S>,
            req: Option<Request<ReqB>>,
        },
        /// Admitted: waiting for the inner service.
        Calling {
            #[pin]
            fut: F,
            verdict: Option<Verdict>,
        },
        /// Answered by the middleware itself.
        Ready { res: Option<Response<Bytes>> },
    }
}

impl<S, ReqB, F> ResponseFuture<S, ReqB, F> {
    pub(crate) fn ready(res: Response<Bytes>, shared: Arc<Shared>) -> Self {
        ResponseFuture {
            state: State::Ready { res: Some(res) },
            shared,
        }
    }

    pub(crate) fn checking(
        check: Check,
        key: String,
        inner: S,
        req: Request<ReqB>,
        shared: Arc<Shared>,
    ) -> Self {
        ResponseFuture {
            state: State::Checking {
                check: tokio::time::timeout(shared.budget, check),
                key,
                inner: Some(inner),
                req: Some(req),
            },
            shared,
        }
    }
}

/// What the middleware does with a limiter's answer.
enum Next {
    Call(Option<Verdict>),
    Answer(Response<Bytes>),
}

fn next_step(
    outcome: Result<Result<Verdict, StoreError>, tokio::time::error::Elapsed>,
    key: &str,
    shared: &Shared,
) -> Next {
    let failure = match outcome {
        Ok(Ok(verdict)) if verdict.allowed => return Next::Call(Some(verdict)),
        Ok(Ok(verdict)) => return Next::Answer(refusal(&verdict, shared)),
        Ok(Err(StoreError::InvalidKey(reason))) => {
            return Next::Answer(problem(
                StatusCode::BAD_REQUEST,
                &format!("unusable rate-limit key: {reason}"),
            ));
        }
        Ok(Err(StoreError::Misconfigured(reason))) => {
            tracing::error!(key, %reason, "rate limiter misconfigured");
            return Next::Answer(problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the rate limiter is misconfigured",
            ));
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no decision within {:?}", shared.budget),
    };
    match shared.on_failure {
        FailurePolicy::Open => {
            tracing::warn!(key, %failure, "rate limiter failed; letting the request through (fail open)");
            Next::Call(None)
        }
        FailurePolicy::Closed => {
            tracing::warn!(key, %failure, "rate limiter failed; refusing the request (fail closed)");
            let mut res = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "the rate limiter is unavailable; try again shortly",
            );
            res.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            Next::Answer(res)
        }
    }
}

fn refusal(verdict: &Verdict, shared: &Shared) -> Response<Bytes> {
    let window = shared
        .store
        .policy()
        .map(|p| format!(" per {} s", ceil_secs(p.window).max(1)))
        .unwrap_or_default();
    let detail = format!(
        "rate limit of {}{window} exceeded; retry in {} s",
        verdict.limit,
        retry_after_secs(verdict)
    );
    let mut res = problem(StatusCode::TOO_MANY_REQUESTS, &detail);
    shared
        .style
        .write(verdict, SystemTime::now(), res.headers_mut());
    res
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
                StateProj::Checking {
                    check,
                    key,
                    inner,
                    req,
                } => {
                    let outcome = ready!(check.poll(cx));
                    match next_step(outcome, key, this.shared) {
                        Next::Call(verdict) => {
                            let (Some(mut inner), Some(req)) = (inner.take(), req.take()) else {
                                panic!("ResponseFuture polled after completion");
                            };
                            let fut = inner.call(req);
                            this.state.set(State::Calling { fut, verdict });
                        }
                        Next::Answer(res) => this.state.set(State::Ready { res: Some(res) }),
                    }
                }
                StateProj::Calling { fut, verdict } => {
                    let res = ready!(fut.poll(cx))?;
                    let mut res = res.map(RateLimitBody::inner);
                    if let Some(verdict) = verdict.take() {
                        this.shared
                            .style
                            .write(&verdict, SystemTime::now(), res.headers_mut());
                    }
                    return Poll::Ready(Ok(res));
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
