#![allow(clippy::unwrap_used)]
//! The middleware against a scripted limiter: headers, refusals, keys, failures.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tenure_http::{
    BoxFuture, ClientIp, Decision, FailurePolicy, LimiterError, MissingKey, PROBLEM_JSON, PeerAddr,
    PeerIp, PolicyName, QuotaPolicy, RateLimitLayer, RateLimiter,
};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

#[derive(Clone, Copy)]
enum Mode {
    Count,
    Hang,
    Fail(fn(String) -> LimiterError),
}

/// `limit` requests per key, ever; or a store that hangs or fails.
#[derive(Clone)]
struct Scripted {
    limit: u64,
    mode: Mode,
    seen: Arc<Mutex<HashMap<String, u64>>>,
}

impl Scripted {
    fn new(limit: u64) -> Self {
        Scripted {
            limit,
            mode: Mode::Count,
            seen: Arc::default(),
        }
    }
    fn with(mode: Mode) -> Self {
        Scripted {
            mode,
            ..Self::new(10)
        }
    }
    fn keys(&self) -> Vec<String> {
        let mut k: Vec<_> = self.seen.lock().unwrap().keys().cloned().collect();
        k.sort();
        k
    }
}

impl RateLimiter for Scripted {
    fn check(&self, key: &str, cost: u32) -> BoxFuture<Result<Decision, LimiterError>> {
        match self.mode {
            Mode::Hang => return Box::pin(std::future::pending()),
            Mode::Fail(f) => {
                let e = f("boom".into());
                return Box::pin(async move { Err(e) });
            }
            Mode::Count => {}
        }
        let mut seen = self.seen.lock().unwrap();
        let used = seen.entry(key.to_owned()).or_default();
        let window = Duration::from_millis(40_500);
        let v = if *used + u64::from(cost) <= self.limit {
            *used += u64::from(cost);
            Decision::allowed(self.limit, self.limit - *used, window)
        } else {
            Decision::refused(self.limit, window, Duration::from_millis(2_200))
        };
        Box::pin(async move { Ok(v) })
    }

    fn policy(&self) -> Option<QuotaPolicy> {
        Some(QuotaPolicy {
            limit: self.limit,
            window: Duration::from_secs(60),
        })
    }
}

type Svc = tenure_http::RateLimit<
    tower::util::ServiceFn<
        fn(Request<String>) -> std::future::Ready<Result<Response<String>, Infallible>>,
    >,
>;

fn hello(_req: Request<String>) -> std::future::Ready<Result<Response<String>, Infallible>> {
    std::future::ready(Ok(Response::new("hello".to_owned())))
}

fn service(layer: RateLimitLayer) -> Svc {
    ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(hello as fn(_) -> _))
}

fn from(peer: &str, xff: Option<&str>) -> Request<String> {
    let mut b = Request::get("/");
    if let Some(v) = xff {
        b = b.header("x-forwarded-for", v);
    }
    let mut req = b.body(String::new()).unwrap();
    req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    req
}

async fn send(svc: &mut Svc, req: Request<String>) -> (StatusCode, http::HeaderMap, String) {
    let res = svc.ready().await.unwrap().call(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

/// The names of the rate-limit fields in `h`, sorted.
fn rate_limit_fields(h: &http::HeaderMap) -> Vec<&str> {
    let mut names: Vec<&str> = h
        .keys()
        .map(http::HeaderName::as_str)
        .filter(|n| n.contains("ratelimit") || *n == "retry-after")
        .collect();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn admitted_responses_carry_only_the_standard_fields_by_default() {
    let mut svc = service(RateLimitLayer::new(Scripted::new(60), PeerIp));
    let (status, h, body) = send(&mut svc, from("192.0.2.1:1", None)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "hello"));
    assert_eq!(h["ratelimit-policy"], "\"default\";q=60;w=60");
    assert_eq!(h["ratelimit"], "\"default\";r=59;t=41");
    assert_eq!(rate_limit_fields(&h), ["ratelimit", "ratelimit-policy"]);
}

#[tokio::test]
async fn legacy_fields_are_opt_in() {
    let layer = RateLimitLayer::new(Scripted::new(60), PeerIp).legacy_headers(true);
    let mut svc = service(layer);
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (_, h, _) = send(&mut svc, from("192.0.2.1:1", None)).await;
    assert_eq!(h["ratelimit"], "\"default\";r=59;t=41");
    assert_eq!(h["x-ratelimit-limit"], "60");
    assert_eq!(h["x-ratelimit-remaining"], "59");
    let reset: u64 = h["x-ratelimit-reset"].to_str().unwrap().parse().unwrap();
    assert!(
        (before + 40..=before + 43).contains(&reset),
        "reset {reset} vs now {before}"
    );
    assert_eq!(
        rate_limit_fields(&h),
        [
            "ratelimit",
            "ratelimit-policy",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset"
        ]
    );
}

#[tokio::test]
async fn headers_off_send_none_but_a_refusal_keeps_retry_after() {
    let layer = RateLimitLayer::new(Scripted::new(1), PeerIp)
        .headers(false)
        .legacy_headers(true); // off wins
    let mut svc = service(layer);
    let (status, h, _) = send(&mut svc, from("192.0.2.1:1", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(rate_limit_fields(&h).is_empty(), "{h:?}");
    let (status, h, _) = send(&mut svc, from("192.0.2.1:1", None)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(rate_limit_fields(&h), ["retry-after"]);
    assert_eq!(h["retry-after"], "3");

    // The same through an in-process limiter, which decides at once.
    use tenure::limit::{Algorithm, Limiter, Quota};
    let one = Quota::per_hour(std::num::NonZeroU32::new(1).unwrap());
    let local = Limiter::local(one, Algorithm::Gcra);
    for headers in [true, false] {
        let layer = RateLimitLayer::new(local.clone(), PeerIp).headers(headers);
        let mut svc = service(layer);
        let peer = if headers {
            "192.0.2.1:1"
        } else {
            "192.0.2.2:1"
        };
        let (status, h, _) = send(&mut svc, from(peer, None)).await;
        assert_eq!(status, StatusCode::OK);
        let want: &[&str] = if headers {
            &["ratelimit", "ratelimit-policy"]
        } else {
            &[]
        };
        assert_eq!(rate_limit_fields(&h), want);
        let (status, h, _) = send(&mut svc, from(peer, None)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(rate_limit_fields(&h).contains(&"retry-after"));
        assert_eq!(rate_limit_fields(&h).len(), if headers { 3 } else { 1 });
    }
}

#[tokio::test]
async fn the_policy_can_be_renamed() {
    let layer = RateLimitLayer::new(Scripted::new(5), PeerIp)
        .policy_name(PolicyName::new("per-ip").unwrap());
    let mut svc = service(layer);
    let (_, h, _) = send(&mut svc, from("192.0.2.1:1", None)).await;
    assert_eq!(h["ratelimit-policy"], "\"per-ip\";q=5;w=60");
    assert_eq!(h["ratelimit"], "\"per-ip\";r=4;t=41");
}

#[tokio::test]
async fn ip_keys_keep_their_text_for_v4_v6_and_mapped_peers() {
    // The keys name buckets kept in Redis: a change of their text would
    // reset every client's budget.
    let store = Scripted::new(100);
    let mut svc = service(RateLimitLayer::new(store.clone(), PeerIp));
    for peer in [
        "192.0.2.1:1",
        "[::ffff:192.0.2.1]:2",
        "[2001:db8::7]:3",
        "[2001:db8:0:0:1:0:0:1]:4",
        "[::1]:5",
        "0.0.0.0:6",
        "255.255.255.255:7",
    ] {
        assert_eq!(send(&mut svc, from(peer, None)).await.0, 200);
    }
    let want = [
        "ip:0.0.0.0",
        "ip:192.0.2.1",
        "ip:2001:db8::1:0:0:1",
        "ip:2001:db8::7",
        "ip:255.255.255.255",
        "ip:::1",
    ];
    assert_eq!(store.keys(), want);
    assert_eq!(store.seen.lock().unwrap()["ip:192.0.2.1"], 2, "mapped = v4");

    let store = Scripted::new(100);
    let trusted = ClientIp::new("10.0.0.0/8".parse().unwrap()).ipv6_prefix(64);
    let mut svc = service(RateLimitLayer::new(store.clone(), trusted));
    for (peer, xff) in [
        ("10.0.0.1:1", "2001:db8:1:2:3:4:5:6"),
        ("10.0.0.1:1", "::ffff:198.51.100.4"),
        ("198.51.100.9:1", "1.1.1.1"),
    ] {
        assert_eq!(send(&mut svc, from(peer, Some(xff))).await.0, 200);
    }
    assert_eq!(
        store.keys(),
        ["ip:198.51.100.4", "ip:198.51.100.9", "ip:2001:db8:1:2::/64"]
    );
}

#[tokio::test]
async fn the_request_over_the_limit_gets_429_with_retry_after_and_a_problem() {
    let mut svc = service(RateLimitLayer::new(Scripted::new(2), PeerIp));
    for _ in 0..2 {
        assert_eq!(send(&mut svc, from("192.0.2.1:1", None)).await.0, 200);
    }
    let (status, h, body) = send(&mut svc, from("192.0.2.1:1", None)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(h["retry-after"], "3");
    assert_eq!(h["content-type"], PROBLEM_JSON);
    assert_eq!(h["ratelimit"], "\"default\";r=0;t=41");
    assert_eq!(
        rate_limit_fields(&h),
        ["ratelimit", "ratelimit-policy", "retry-after"]
    );
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["title"], "Too Many Requests");
    assert!(problem["detail"].as_str().unwrap().contains("retry in 3 s"));
    // Another client is unaffected.
    assert_eq!(send(&mut svc, from("192.0.2.2:1", None)).await.0, 200);
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_selects_no_other_bucket() {
    let store = Scripted::new(1);
    let key = ClientIp::new("10.0.0.0/8".parse().unwrap());
    let mut svc = service(RateLimitLayer::new(store.clone(), key));
    assert_eq!(
        send(&mut svc, from("192.0.2.1:1", Some("1.1.1.1"))).await.0,
        200
    );
    assert_eq!(
        send(&mut svc, from("192.0.2.1:1", Some("2.2.2.2"))).await.0,
        429
    );
    // Through a trusted proxy, the forwarded client is the key.
    assert_eq!(
        send(&mut svc, from("10.0.0.1:1", Some("1.1.1.1"))).await.0,
        200
    );
    assert_eq!(store.keys(), vec!["ip:1.1.1.1", "ip:192.0.2.1"]);
}

#[tokio::test]
async fn keyless_requests_are_refused_or_share_a_bucket() {
    let mut svc = service(RateLimitLayer::new(Scripted::new(1), PeerIp));
    let (status, h, body) = send(&mut svc, Request::new(String::new())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(h["content-type"], PROBLEM_JSON);
    assert!(body.contains("no rate-limit key"));

    let store = Scripted::new(1);
    let layer = RateLimitLayer::new(store.clone(), PeerIp)
        .on_missing_key(MissingKey::Bucket("anonymous".into()));
    let mut svc = service(layer);
    assert_eq!(send(&mut svc, Request::new(String::new())).await.0, 200);
    assert_eq!(send(&mut svc, Request::new(String::new())).await.0, 429);
    assert_eq!(store.keys(), vec!["anonymous"]);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_store_is_answered_by_the_failure_policy_at_the_budget() {
    let budget = Duration::from_millis(150);
    for (policy, expected) in [
        (FailurePolicy::Open, StatusCode::OK),
        (FailurePolicy::Closed, StatusCode::SERVICE_UNAVAILABLE),
    ] {
        let layer = RateLimitLayer::new(Scripted::with(Mode::Hang), PeerIp)
            .budget(budget)
            .on_store_failure(policy);
        let mut svc = service(layer);
        let started = tokio::time::Instant::now();
        let (status, h, body) = send(&mut svc, from("192.0.2.1:1", None)).await;
        assert_eq!(started.elapsed(), budget, "{policy:?}");
        assert_eq!(status, expected, "{policy:?}");
        assert!(!h.contains_key("ratelimit"), "no decision, no numbers");
        if policy == FailurePolicy::Closed {
            assert_eq!(h["retry-after"], "1");
            assert_eq!(h["content-type"], PROBLEM_JSON);
            assert!(body.contains("\"status\":503"));
        } else {
            assert_eq!(body, "hello");
        }
    }
}

#[tokio::test]
async fn store_errors_map_to_policy_400_or_500() {
    type Case = (fn(String) -> LimiterError, FailurePolicy, StatusCode);
    let cases: [Case; 4] = [
        (
            LimiterError::Unavailable,
            FailurePolicy::Open,
            StatusCode::OK,
        ),
        (
            LimiterError::Unavailable,
            FailurePolicy::Closed,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        // A bad key is the client's doing: never a free pass, even failing open.
        (
            LimiterError::InvalidKey,
            FailurePolicy::Open,
            StatusCode::BAD_REQUEST,
        ),
        (
            LimiterError::Misconfigured,
            FailurePolicy::Open,
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
    ];
    for (error, policy, expected) in cases {
        let layer =
            RateLimitLayer::new(Scripted::with(Mode::Fail(error)), PeerIp).on_store_failure(policy);
        let mut svc = service(layer);
        let (status, _, _) = send(&mut svc, from("192.0.2.1:1", None)).await;
        assert_eq!(status, expected, "{:?} {policy:?}", error("x".into()));
    }
}

#[tokio::test]
async fn inner_errors_pass_through_untouched() {
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(Scripted::new(5), PeerIp))
        .service(service_fn(|_req: Request<String>| async {
            Err::<Response<String>, _>("inner failed")
        }));
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(from("192.0.2.1:1", None))
        .await
        .unwrap_err();
    assert_eq!(err, "inner failed");
}

#[tokio::test]
async fn works_as_an_axum_layer() {
    let app = Router::new()
        .route("/", get(|| async { "hi" }))
        .layer(RateLimitLayer::new(Scripted::new(1), PeerIp));
    let req = || {
        let mut r = Request::get("/").body(axum::body::Body::empty()).unwrap();
        r.extensions_mut()
            .insert(axum::extract::ConnectInfo::<std::net::SocketAddr>(
                "192.0.2.9:1".parse().unwrap(),
            ));
        r
    };
    let ok = app.clone().oneshot(req()).await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["ratelimit"], "\"default\";r=0;t=41");
    let refused = app.oneshot(req()).await.unwrap();
    assert_eq!(refused.status(), 429);
}

#[tokio::test]
async fn a_full_in_process_store_answers_a_new_client_429_and_keeps_the_others() {
    use tenure::limit::{Algorithm, Limiter, Quota};
    use tenure::memory::MemoryLimits;
    // Room for two keys: a third client is refused (never let in by
    // forgetting what another client spent), the first two keep their state.
    let store = MemoryLimits::new().max_keys(2);
    let per_hour = Quota::per_hour(std::num::NonZeroU32::new(5).unwrap());
    let limiter = Limiter::new(store, per_hour, Algorithm::SlidingLog);
    let mut svc = service(RateLimitLayer::new(limiter, PeerIp));
    for peer in ["192.0.2.1:1", "192.0.2.2:1"] {
        let (status, h, _) = send(&mut svc, from(peer, None)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(h["ratelimit"].to_str().unwrap().contains(";r=4;"), "{h:?}");
    }
    let (status, h, body) = send(&mut svc, from("192.0.2.3:1", None)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(h["content-type"], PROBLEM_JSON);
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((3500..=3600).contains(&retry), "Retry-After {retry}");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["status"], 429);
    let (status, h, _) = send(&mut svc, from("192.0.2.1:1", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h["ratelimit"].to_str().unwrap().contains(";r=3;"), "{h:?}");
}
