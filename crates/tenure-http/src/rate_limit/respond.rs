//! What response a decision gives: pure functions from the limiter's answer (or
//! its absence) to the next step — call the inner service, or answer with a
//! status, rate-limit headers and an `application/problem+json` body.
//!
//! | limiter's answer              | response                                   |
//! |-------------------------------|--------------------------------------------|
//! | admitted                      | inner service's, plus `RateLimit` headers  |
//! | refused                       | `429`, `Retry-After`, headers, problem     |
//! | no key (`MissingKey::Reject`)| `400`, problem                            |
//! | `InvalidKey`                  | `400`, problem                             |
//! | `Misconfigured`               | `500`, problem                             |
//! | `Unavailable` / over budget   | [`FailurePolicy`]: inner service, or `503` |

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use super::config::{FailurePolicy, Settings};
use crate::headers::{ceil_secs, retry_after_secs};
use crate::limiter::{Decision, LimiterError};
use crate::problem::problem;

/// What the middleware does with a limiter's answer.
#[derive(Debug)]
pub(crate) enum Next {
    /// Call the inner service; with a decision, its headers go on the response.
    Call(Option<Decision>),
    /// Answer without calling the inner service.
    Answer(Response<Bytes>),
}

/// The answer to a key on the deny list.
pub(crate) fn denied() -> Response<Bytes> {
    problem(StatusCode::FORBIDDEN, "this client is not allowed")
}

/// The answer to a request that carries no key and may not share a bucket.
pub(crate) fn missing_key() -> Response<Bytes> {
    problem(
        StatusCode::BAD_REQUEST,
        "the request carries no rate-limit key (client address or API key)",
    )
}

/// The next step for the limiter's `outcome`: `None` when no decision came
/// within the budget.
pub(crate) fn next_step(
    outcome: Option<Result<Decision, LimiterError>>,
    key: &str,
    settings: &Settings,
) -> Next {
    let failure = match outcome {
        Some(Ok(decision)) if decision.allowed || settings.shadow => {
            return admitted(decision, key, settings);
        }
        Some(Ok(decision)) => return Next::Answer(refusal(&decision, settings)),
        Some(Err(LimiterError::InvalidKey(reason))) => {
            return Next::Answer(problem(
                StatusCode::BAD_REQUEST,
                &format!("unusable rate-limit key: {reason}"),
            ));
        }
        Some(Err(LimiterError::Misconfigured(reason))) => {
            tracing::error!(key, %reason, "rate limiter misconfigured");
            return Next::Answer(problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the rate limiter is misconfigured",
            ));
        }
        Some(Err(e)) => e.to_string(),
        None => format!("no decision within {:?}", settings.budget),
    };
    on_failure(settings.on_failure, key, &failure)
}

/// The next step for an admission, or a refusal in a dry run: the inner
/// service, with the headers unless a dry run keeps them off.
fn admitted(mut decision: Decision, key: &str, settings: &Settings) -> Next {
    if !decision.allowed {
        decision.allowed = true;
        decision.would_refuse = true;
    }
    if decision.would_refuse {
        tracing::debug!(
            key,
            "the rate limit would refuse this request (shadow mode)"
        );
    }
    let headers = settings.style.any() && (!settings.shadow || settings.shadow_headers);
    Next::Call(headers.then_some(decision))
}

/// The next step when the limiter could not decide, by the failure policy.
fn on_failure(policy: FailurePolicy, key: &str, failure: &str) -> Next {
    match policy {
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

/// `429` with `Retry-After`, the rate-limit headers and a problem body. The
/// detail names the advertised quota (as `RateLimit-Policy` does); without
/// one, the decision's limit, which for GCRA or a token bucket is the burst.
fn refusal(decision: &Decision, settings: &Settings) -> Response<Bytes> {
    let quota = match settings.policy {
        Some(p) => format!("{} per {} s", p.limit, ceil_secs(p.window).max(1)),
        None => decision.limit.to_string(),
    };
    let detail = format!(
        "rate limit of {quota} exceeded; retry in {} s",
        retry_after_secs(decision)
    );
    let mut res = problem(StatusCode::TOO_MANY_REQUESTS, &detail);
    settings.style.write(decision, res.headers_mut());
    res
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::headers::{HeaderStyle, PolicyName};
    use crate::key::PeerIp;
    use crate::limiter::QuotaPolicy;
    use crate::rate_limit::config::MissingKey;

    fn settings(on_failure: FailurePolicy) -> Settings {
        let quota = tenure::limit::Quota::per_minute(NonZeroU32::MIN);
        let limiter =
            tenure::Coordinator::memory().limiter(quota, tenure::limit::Algorithm::SlidingLog);
        Settings {
            store: Arc::new(limiter),
            key: Arc::new(PeerIp),
            policy: Some(QuotaPolicy {
                limit: 60,
                window: Duration::from_millis(59_001),
            }),
            style: HeaderStyle::new(PolicyName::default(), None, true, false),
            missing: MissingKey::Reject,
            on_failure,
            budget: Duration::from_millis(5),
            cost: 1,
            shadow: false,
            shadow_headers: false,
            access: None,
            cost_after: None,
        }
    }

    fn answer(next: Next) -> (StatusCode, http::HeaderMap, serde_json::Value) {
        let Next::Answer(res) = next else {
            panic!("expected an answer, got {next:?}");
        };
        let body = serde_json::from_slice(res.body()).expect("problem json");
        (res.status(), res.headers().clone(), body)
    }

    #[test]
    fn headers_off_leave_no_decision_to_write_even_in_a_dry_run_that_shows_them() {
        let mut s = settings(FailurePolicy::Open);
        s.style = HeaderStyle::new(PolicyName::default(), None, false, false);
        let v = Decision::allowed(60, 59, Duration::from_secs(1));
        assert!(matches!(next_step(Some(Ok(v)), "k", &s), Next::Call(None)));
        s.shadow = true;
        s.shadow_headers = true;
        let refused = Decision::refused(60, Duration::from_secs(1), Duration::from_secs(1));
        assert!(matches!(
            next_step(Some(Ok(refused)), "k", &s),
            Next::Call(None)
        ));
    }

    #[test]
    fn an_admission_calls_the_inner_service_with_its_decision() {
        let v = Decision::allowed(60, 59, Duration::from_secs(1));
        let next = next_step(Some(Ok(v)), "k", &settings(FailurePolicy::Closed));
        assert!(matches!(next, Next::Call(Some(got)) if got == v));
    }

    #[test]
    fn a_refusal_is_429_with_retry_after_headers_and_the_quota_in_the_detail() {
        let v = Decision::refused(60, Duration::from_secs(30), Duration::from_millis(2_200));
        let (status, headers, body) =
            answer(next_step(Some(Ok(v)), "k", &settings(FailurePolicy::Open)));
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers[http::header::RETRY_AFTER], "3");
        assert_eq!(headers["ratelimit"], "\"default\";r=0;t=30");
        assert_eq!(
            body["detail"],
            "rate limit of 60 per 60 s exceeded; retry in 3 s"
        );
    }

    /// A GCRA quota of 1 000 000/s with a burst of 1000 refuses with the
    /// burst as its limit: the detail names the advertised quota, as
    /// `RateLimit-Policy` does, not the burst over the quota's window.
    #[test]
    fn a_refusal_detail_names_the_advertised_quota_not_the_burst_over_its_window() {
        let mut s = settings(FailurePolicy::Open);
        s.policy = Some(QuotaPolicy {
            limit: 1_000_000,
            window: Duration::from_secs(1),
        });
        let v = Decision::refused(1000, Duration::from_millis(1), Duration::from_micros(1));
        let (_, _, body) = answer(next_step(Some(Ok(v)), "k", &s));
        assert_eq!(
            body["detail"],
            "rate limit of 1000000 per 1 s exceeded; retry in 1 s"
        );
        s.policy = None;
        let (_, _, body) = answer(next_step(Some(Ok(v)), "k", &s));
        assert_eq!(body["detail"], "rate limit of 1000 exceeded; retry in 1 s");
    }

    #[test]
    fn key_and_configuration_errors_are_400_and_500_whatever_the_policy() {
        for policy in [FailurePolicy::Open, FailurePolicy::Closed] {
            let s = settings(policy);
            let bad_key = Some(Err(LimiterError::InvalidKey("too long".into())));
            let (status, _, body) = answer(next_step(bad_key, "k", &s));
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert_eq!(body["detail"], "unusable rate-limit key: too long");
            let bad_config = Some(Err(LimiterError::Misconfigured("cost".into())));
            let (status, _, _) = answer(next_step(bad_config, "k", &s));
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        }
    }

    #[test]
    fn a_failure_or_no_decision_follows_the_failure_policy() {
        let down = || Some(Err(LimiterError::Unavailable("refused".into())));
        for outcome in [down(), None] {
            let open = next_step(outcome.clone(), "k", &settings(FailurePolicy::Open));
            assert!(matches!(open, Next::Call(None)));
            let closed = next_step(outcome, "k", &settings(FailurePolicy::Closed));
            let (status, headers, _) = answer(closed);
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(headers[http::header::RETRY_AFTER], "1");
        }
    }

    #[test]
    fn a_keyless_request_is_400_with_a_problem() {
        let res = missing_key();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            res.headers()[http::header::CONTENT_TYPE],
            crate::PROBLEM_JSON
        );
    }
}
