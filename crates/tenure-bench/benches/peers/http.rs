//! The HTTP middleware against tower_governor, keyed by peer IP, same quota
//! (1 000 000 per second, burst 1000, GCRA: everything is admitted):
//!
//! - *overhead*: ns per request of the service called in process (no
//!   network), 256 clients (peer IPs), for a bare service, tower_governor's
//!   layer and tenure-http's layer over an in-process limiter; the overhead of
//!   a layer is its time less the bare service's.
//! - *load*: requests/s of axum servers on loopback under `wrk` (2 threads,
//!   256 connections): bare, tower_governor, tenure-http in-process and
//!   tenure-http on Redis. All connections come from 127.0.0.1: one key.
//!   Skipped when `wrk` is not installed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, Response};
use tenure::limit::{Algorithm, Limiter, Quota};
use tenure_http::{PeerIp, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

use crate::local_curve::at_once;
use crate::samples::Samples;

/// Requests per overhead measurement.
const REQUESTS: u32 = 200_000;
const CLIENTS: u32 = 256;
/// Units per second, and the burst.
const RATE: u32 = 1_000_000;
const BURST: u32 = 1_000;

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(RATE).unwrap()).burst(NonZeroU32::new(BURST).unwrap())
}

fn tower_governor() -> GovernorLayer<
    tower_governor::key_extractor::PeerIpKeyExtractor,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
    Body,
> {
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(u64::from(1_000_000_000 / RATE))
        .burst_size(BURST)
        .finish()
        .unwrap();
    GovernorLayer::new(config)
}

fn ours(limiter: Limiter) -> RateLimitLayer {
    RateLimitLayer::new(limiter, PeerIp)
}

/// Records `http.overhead.{bare,governor,tenure}` (ns per request) and, with
/// `wrk`, `http.load.{bare,governor,tenure,redis}` (requests/s).
pub async fn run(redis: &tenure::Coordinator, run_for: Duration, out: &mut Samples) {
    let (bare, governor, tenure) = tokio::task::spawn_blocking(overheads).await.unwrap();
    out.add("http.overhead.bare", bare);
    out.add("http.overhead.governor", governor);
    out.add("http.overhead.tenure", tenure);
    if !wrk_installed() {
        eprintln!("wrk is not installed: the HTTP load rows are left out");
        return;
    }
    let bare_app = app();
    let rows = [
        ("bare", bare_app.clone()),
        ("governor", app().layer(tower_governor())),
        (
            "tenure",
            app().layer(ours(Limiter::local(quota(), Algorithm::Gcra))),
        ),
        (
            "redis",
            app().layer(ours(redis.limiter(quota(), Algorithm::Gcra))),
        ),
    ];
    for (name, app) in rows {
        out.add(format!("http.load.{name}"), load(app, run_for).await);
    }
}

fn app() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

async fn hello(_req: Request<Body>) -> Result<Response<Body>, Infallible> {
    Ok(Response::new(Body::empty()))
}

/// A request from client `i` of [`CLIENTS`], as axum's `ConnectInfo` gives it.
fn request(i: u32) -> Request<Body> {
    let mut req = Request::new(Body::empty());
    let peer = SocketAddr::from(([192, 0, 2, (i % CLIENTS) as u8], 40_000));
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

/// ns per request through `svc`, called in this thread (every answer is ready
/// at once).
fn per_request<S, B>(mut svc: S, requests: u32) -> f64
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    for i in 0..requests / 10 {
        let _ = at_once(at_once(svc.ready()).unwrap().call(request(i)));
    }
    let began = Instant::now();
    for i in 0..requests {
        let res = at_once(at_once(svc.ready()).unwrap().call(request(i))).unwrap();
        assert!(res.status().is_success(), "refused: {}", res.status());
    }
    began.elapsed().as_nanos() as f64 / f64::from(requests)
}

/// The variable that makes this program run `WHO:N` requests through one
/// service only (`bare`, `governor`, `tenure`, `tenure-nolegacy`) and exit: for
/// `valgrind --tool=callgrind`.
const COUNT: &str = "TENURE_BENCH_HTTP_COUNT";

/// In a process started with [`COUNT`] set: runs its requests and returns `true`.
pub fn child() -> bool {
    let Ok(what) = std::env::var(COUNT) else {
        return false;
    };
    let (who, n) = what.split_once(':').unwrap();
    let n: u32 = n.parse().unwrap();
    let hello = || tower::service_fn(hello);
    let ns = match who {
        "governor" => per_request(tower_governor().layer(hello()), n),
        "tenure" => {
            let limiter = Limiter::local(quota(), Algorithm::Gcra);
            per_request(ours(limiter).layer(hello()), n)
        }
        "tenure-nolegacy" => {
            let limiter = Limiter::local(quota(), Algorithm::Gcra);
            per_request(ours(limiter).legacy_headers(false).layer(hello()), n)
        }
        _ => per_request(hello(), n),
    };
    println!("{ns}");
    true
}

/// ns per request: bare, tower_governor, tenure-http in process.
fn overheads() -> (f64, f64, f64) {
    let bare = per_request(tower::service_fn(hello), REQUESTS);
    let governor = per_request(tower_governor().layer(tower::service_fn(hello)), REQUESTS);
    let limiter = Limiter::local(quota(), Algorithm::Gcra);
    let tenure = per_request(ours(limiter).layer(tower::service_fn(hello)), REQUESTS);
    (bare, governor, tenure)
}

fn wrk_installed() -> bool {
    std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok()
}

/// Requests/s of `app` served on loopback under `wrk`.
async fn load(app: Router, run_for: Duration) -> f64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, service).await });
    let secs = run_for.as_secs().max(1);
    let output = tokio::process::Command::new("wrk")
        .args(["-t2", "-c256", &format!("-d{secs}s")])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .await
        .unwrap();
    server.abort();
    let text = String::from_utf8_lossy(&output.stdout);
    if text.contains("Non-2xx") {
        eprintln!("wrk saw refusals on port {port}:\n{text}");
    }
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}
