#![allow(clippy::unwrap_used)]
//! The dry run, the allow and deny lists and the in-flight limit, served by
//! axum over real loopback HTTP to a real client; the in-flight limit on the
//! semaphores of a real redis-server.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tenure::Coordinator;
use tenure::limit::{Algorithm, Quota};
use tenure_http::{AccessList, ConcurrencyLimitLayer, PROBLEM_JSON, PeerIp, RateLimitLayer};
use tenure_test::RedisServer;

/// Serves `app` on a free loopback port until the test ends.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, service).await.unwrap();
    });
    addr
}

/// A client whose connections come from `ip` (all of 127.0.0.0/8 is local).
fn client(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn get_from(ip: &str, addr: SocketAddr) -> reqwest::Response {
    client(ip)
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap()
}

fn one_per_minute() -> tenure::limit::Limiter {
    Coordinator::memory().limiter(Quota::per_minute(NonZeroU32::MIN), Algorithm::Gcra)
}

#[tokio::test]
async fn a_dry_run_lets_refusals_through_and_shows_headers_only_when_asked() {
    for headers in [false, true] {
        let layer = RateLimitLayer::new(one_per_minute(), PeerIp)
            .shadow(true)
            .shadow_headers(headers);
        let addr = serve(
            Router::new()
                .route("/", get(|| async { "hi" }))
                .layer(layer),
        )
        .await;
        for i in 0..3 {
            let res = get_from("127.0.0.1", addr).await;
            assert_eq!(res.status(), 200, "request {i}, headers {headers}");
            assert!(!res.headers().contains_key("retry-after"));
            match headers {
                false => assert!(!res.headers().contains_key("ratelimit")),
                true => {
                    let expected = match i {
                        0 => "\"default\";r=0;t=60",
                        _ => "\"default\";r=0;t=",
                    };
                    let got = res.headers()["ratelimit"].to_str().unwrap();
                    assert!(got.starts_with(expected), "{got}");
                }
            }
        }
    }
}

#[tokio::test]
async fn allowed_networks_skip_the_limiter_and_denied_keys_get_403() {
    let list = AccessList::new()
        .allow_network("127.0.0.2/32".parse().unwrap())
        .deny_key("ip:127.0.0.3");
    let layer = RateLimitLayer::new(one_per_minute(), PeerIp).access(list);
    let addr = serve(
        Router::new()
            .route("/", get(|| async { "hi" }))
            .layer(layer),
    )
    .await;
    for _ in 0..3 {
        let res = get_from("127.0.0.2", addr).await;
        assert_eq!(res.status(), 200);
        assert!(!res.headers().contains_key("ratelimit"), "not limited");
    }
    let res = get_from("127.0.0.3", addr).await;
    assert_eq!(res.status(), 403);
    assert_eq!(res.headers()["content-type"], PROBLEM_JSON);
    let body: serde_json::Value = res.json_or_text().await;
    assert_eq!(body["status"], 403);
    // Anyone else is limited as usual.
    assert_eq!(get_from("127.0.0.1", addr).await.status(), 200);
    assert_eq!(get_from("127.0.0.1", addr).await.status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_requests_of_a_key_are_in_flight() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    // Handlers wait at the gate until the test opens it.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (gate, entered) = (Arc::clone(&gate), Arc::clone(&entered));
        move || async move {
            entered.fetch_add(1, Ordering::SeqCst);
            let _pass = gate.acquire().await.unwrap();
            "done"
        }
    };
    let layer = ConcurrencyLimitLayer::new(tenure, NonZeroU32::new(2).unwrap(), PeerIp)
        .wait(Duration::from_millis(100));
    let addr = serve(Router::new().route("/", get(handler)).layer(layer)).await;
    let first = tokio::spawn(get_from("127.0.0.1", addr));
    let second = tokio::spawn(get_from("127.0.0.1", addr));
    while entered.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Two in flight: a third from the same client waits 100 ms, then 429…
    let third = get_from("127.0.0.1", addr).await;
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["retry-after"], "1");
    assert_eq!(third.headers()["content-type"], PROBLEM_JSON);
    // …while another client is not affected (it enters and waits too).
    let other = tokio::spawn(get_from("127.0.0.4", addr));
    while entered.load(Ordering::SeqCst) < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gate.add_permits(100);
    for task in [first, second, other] {
        let res = task.await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.text().await.unwrap(), "done");
    }
    // The bodies are done: the permits are back (released in the
    // background), so the client gets in again within the wait.
    let mut status = 0;
    for _ in 0..50 {
        status = get_from("127.0.0.1", addr).await.status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 200);
}

/// Waits until `key` has `remaining` units left (a settled cost is applied
/// in the background after the response).
async fn until_remaining(limiter: &tenure::limit::Limiter, key: &str, remaining: u64) {
    for _ in 0..500 {
        if limiter.peek(key).await.unwrap().remaining == remaining {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("{key} never got to {remaining} left");
}

#[tokio::test]
async fn server_errors_are_refunded_and_a_header_can_charge_more() {
    let limiter = Coordinator::memory().limiter(
        Quota::per_hour(NonZeroU32::new(3).unwrap()),
        Algorithm::FixedWindow,
    );
    let app = Router::new()
        .route(
            "/fail",
            get(|| async { (http::StatusCode::BAD_GATEWAY, "upstream down") }),
        )
        .route("/ok", get(|| async { "ok" }))
        .route("/heavy", get(|| async { ([("x-cost", "3")], "heavy") }));
    let layer = RateLimitLayer::new(limiter.clone(), PeerIp).refund_server_errors();
    let addr = serve(app.clone().layer(layer)).await;
    let url = |path: &str| format!("http://{addr}{path}");
    // Ten failures in a row never use up the three units.
    for _ in 0..10 {
        let res = client("127.0.0.5").get(url("/fail")).send().await.unwrap();
        assert_eq!(res.status(), 502);
        until_remaining(&limiter, "ip:127.0.0.5", 3).await;
    }
    for expected in [200, 200, 200, 429] {
        let res = client("127.0.0.5").get(url("/ok")).send().await.unwrap();
        assert_eq!(res.status(), expected);
    }
    // Charged by a response header: 1 before, 2 more after.
    let by_header =
        RateLimitLayer::new(limiter.clone(), PeerIp).cost_after(|_, headers, charged| {
            headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(charged)
        });
    let addr = serve(app.layer(by_header)).await;
    let res = client("127.0.0.6")
        .get(format!("http://{addr}/heavy"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    until_remaining(&limiter, "ip:127.0.0.6", 0).await;
    let res = client("127.0.0.6")
        .get(format!("http://{addr}/ok"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
}

/// The body as JSON, for the problem documents.
trait JsonOrText {
    async fn json_or_text(self) -> serde_json::Value;
}

impl JsonOrText for reqwest::Response {
    async fn json_or_text(self) -> serde_json::Value {
        let text = self.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    }
}
