//! The HTTP middleware against tower_governor, keyed by peer IP, same quota
//! (1 000 000 per second, burst 1000, GCRA: everything is admitted):
//!
//! - *overhead*: ns per request of the service called in process (no
//!   network), 256 clients (peer IPs), for a bare service and each layer
//!   ([`LAYERS`]), measured interleaved ([`REPEATS`] times each, medians); the
//!   overhead of a layer is its time less the bare service's. Three
//!   like-for-like pairs are compared ([`PAIRS`]): both layers as they come,
//!   both writing rate-limit headers, neither writing any.
//! - *instructions*: instructions per request of each of the same services
//!   under `valgrind --tool=callgrind`, counted in the measured loop only
//!   (the difference of two runs of different lengths, so what the loop
//!   does once cancels out). Skipped without valgrind.
//! - *load*: requests/s of axum servers on loopback under `wrk` (2 threads,
//!   256 connections): bare, tower_governor, tenure-http in-process and
//!   tenure-http on Redis. All connections come from 127.0.0.1: one key.
//!   Skipped when `wrk` is not installed.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use governor::clock::QuantaInstant;
use governor::middleware::{NoOpMiddleware, StateInformationMiddleware};
use http::{Request, Response};
use tenure::limit::{Algorithm, Limiter, Quota};
use tenure_http::{PeerIp, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::PeerIpKeyExtractor;

use crate::local_curve::at_once;
use crate::report::Target;
use crate::samples::Samples;

/// Requests per overhead measurement.
const REQUESTS: u32 = 100_000;
/// Interleaved measurements of each service per round.
const REPEATS: usize = 5;
const CLIENTS: u32 = 256;
/// Units per second, and the burst.
const RATE: u32 = 1_000_000;
const BURST: u32 = 1_000;

/// The services measured in process, with their labels: the bare service
/// first.
pub const LAYERS: [(&str, &str); 6] = [
    ("bare", "bare service"),
    ("governor", "tower_governor"),
    ("governor-headers", "tower_governor `.use_headers()`"),
    ("tenure", "tenure-http (standard headers, the default)"),
    ("tenure-off", "tenure-http `.headers(false)`"),
    ("tenure-legacy", "tenure-http `.legacy_headers(true)`"),
];

/// The like-for-like pairs (ours, tower_governor's), with what they compare.
pub const PAIRS: [(&str, &str, &str); 3] = [
    ("tenure", "governor", "(a) as they come"),
    ("tenure", "governor-headers", "(b) both writing headers"),
    ("tenure-off", "governor", "(c) neither writing headers"),
];

/// Our overhead over tower_governor's, at most, in each pair.
const TARGET: f64 = 1.5;

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(RATE).unwrap()).burst(NonZeroU32::new(BURST).unwrap())
}

fn governor_builder() -> GovernorConfigBuilder<PeerIpKeyExtractor, NoOpMiddleware<QuantaInstant>> {
    let mut builder = GovernorConfigBuilder::default();
    builder
        .per_nanosecond(u64::from(1_000_000_000 / RATE))
        .burst_size(BURST);
    builder
}

fn tower_governor() -> GovernorLayer<PeerIpKeyExtractor, NoOpMiddleware<QuantaInstant>, Body> {
    GovernorLayer::new(governor_builder().finish().unwrap())
}

/// tower_governor writing `X-RateLimit-Limit` and `X-RateLimit-Remaining`.
fn tower_governor_headers() -> GovernorLayer<PeerIpKeyExtractor, StateInformationMiddleware, Body> {
    GovernorLayer::new(governor_builder().use_headers().finish().unwrap())
}

fn ours(limiter: Limiter) -> RateLimitLayer {
    RateLimitLayer::new(limiter, PeerIp)
}

fn ours_local() -> RateLimitLayer {
    ours(Limiter::local(quota(), Algorithm::Gcra))
}

/// Records `http.overhead.<layer>` (ns per request), with valgrind
/// `http.instr.<layer>` (instructions per request, once), and with `wrk`
/// `http.load.{bare,governor,tenure,redis}` (requests/s).
pub async fn run(redis: &tenure::Coordinator, run_for: Duration, out: &mut Samples) {
    for (who, ns) in tokio::task::spawn_blocking(overheads).await.unwrap() {
        out.add(format!("http.overhead.{who}"), ns);
    }
    if out.median("http.instr.bare").is_none() {
        instructions(out).await;
    }
    if !installed("wrk") {
        eprintln!("wrk is not installed: the HTTP load rows are left out");
        return;
    }
    let bare_app = app();
    let rows = [
        ("bare", bare_app.clone()),
        ("governor", app().layer(tower_governor())),
        ("tenure", app().layer(ours_local())),
        (
            "redis",
            app().layer(ours(redis.limiter(quota(), Algorithm::Gcra))),
        ),
    ];
    for (name, app) in rows {
        out.add(format!("http.load.{name}"), load(name, app, run_for).await);
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
/// at once), after a tenth as many requests to warm up.
fn per_request<S, B>(mut svc: S, requests: u32) -> f64
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    for i in 0..requests / 10 {
        let _ = at_once(at_once(svc.ready()).unwrap().call(request(i)));
    }
    timed(&mut svc, requests)
}

/// The measured requests of [`per_request`]: the only function whose
/// instructions callgrind counts ([`TIMED`]).
#[inline(never)]
fn timed<S, B>(svc: &mut S, requests: u32) -> f64
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let began = Instant::now();
    for i in 0..requests {
        let res = at_once(at_once(svc.ready()).unwrap().call(request(i))).unwrap();
        assert!(res.status().is_success(), "refused: {}", res.status());
    }
    began.elapsed().as_nanos() as f64 / f64::from(requests)
}

/// [`timed`] as callgrind names it. Only its instructions are counted: the
/// set-up is not, which for tower_governor includes quanta's clock
/// calibration, whose count varies by a million instructions from run to run.
const TIMED: &str = "peers::http::timed";

/// ns per request through a fresh service of layer `who` (of [`LAYERS`]).
fn measure(who: &str, requests: u32) -> f64 {
    let hello = || tower::service_fn(hello);
    match who {
        "bare" => per_request(hello(), requests),
        "governor" => per_request(tower_governor().layer(hello()), requests),
        "governor-headers" => per_request(tower_governor_headers().layer(hello()), requests),
        "tenure" => per_request(ours_local().layer(hello()), requests),
        "tenure-off" => per_request(ours_local().headers(false).layer(hello()), requests),
        "tenure-legacy" => per_request(ours_local().legacy_headers(true).layer(hello()), requests),
        _ => panic!("no HTTP layer {who:?}"),
    }
}

/// The variable that makes this program run `WHO:N` requests (and a tenth
/// more to warm up) through the service of layer `WHO` only and exit: for
/// `valgrind --tool=callgrind`.
const COUNT: &str = "TENURE_BENCH_HTTP_COUNT";

/// In a process started with [`COUNT`] set: runs its requests and returns `true`.
pub fn child() -> bool {
    let Ok(what) = std::env::var(COUNT) else {
        return false;
    };
    let (who, n) = what.split_once(':').unwrap();
    println!("{}", measure(who, n.parse().unwrap()));
    true
}

/// ns per request of each of [`LAYERS`], [`REPEATS`] rounds interleaved.
fn overheads() -> Vec<(&'static str, f64)> {
    let mut out = Vec::new();
    for _ in 0..REPEATS {
        for (who, _) in LAYERS {
            out.push((who, measure(who, REQUESTS)));
        }
    }
    out
}

/// Records `http.instr.<layer>`: instructions per request under callgrind,
/// from two runs of this program as a [`COUNT`] child.
async fn instructions(out: &mut Samples) {
    if !installed("valgrind") {
        eprintln!("valgrind is not installed: the HTTP instruction counts are left out");
        return;
    }
    let (short, long) = (1_000u32, 11_000u32);
    for (who, _) in LAYERS {
        let (Some(a), Some(b)) = (callgrind(who, short).await, callgrind(who, long).await) else {
            continue;
        };
        // Only the measured requests are counted, not the warm-up.
        let requests = f64::from(long - short);
        out.add(format!("http.instr.{who}"), (b - a) / requests);
    }
}

/// The instructions callgrind counts in a child making `n` requests through
/// `who`.
async fn callgrind(who: &str, n: u32) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let output = tokio::process::Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .args(["--collect-atstart=no", &format!("--toggle-collect={TIMED}")])
        .arg(exe)
        .env(COUNT, format!("{who}:{n}"))
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&output.stderr);
    let collected = text.lines().find_map(|l| l.split("Collected :").nth(1));
    let count = collected.and_then(|v| v.trim().parse().ok());
    if count.is_none() {
        eprintln!("callgrind of the HTTP layer {who} gave no count:\n{text}");
    }
    count
}

/// Our overhead over tower_governor's in the pair (`ours`, `theirs`): in
/// time and in instructions per request.
fn pair_ratios(s: &Samples, ours: &str, theirs: &str) -> (f64, f64) {
    let m = |name: String| s.median(&format!("http.{name}")).unwrap_or(f64::NAN);
    let ratio = |kind: &str| {
        let base = m(format!("{kind}.bare"));
        (m(format!("{kind}.{ours}")) - base) / (m(format!("{kind}.{theirs}")) - base)
    };
    (ratio("overhead"), ratio("instr"))
}

/// The targets of the like-for-like pairs: our overhead at most [`TARGET`]
/// times tower_governor's, in time. None when nothing was measured.
pub fn targets(s: &Samples) -> Vec<Target> {
    if s.median("http.overhead.bare").is_none() {
        return Vec::new();
    }
    PAIRS
        .iter()
        .map(|&(ours, theirs, what)| {
            let (time, instr) = pair_ratios(s, ours, theirs);
            Target {
                what: format!(
                    "HTTP overhead over bare, {what}, `{ours}` vs `{theirs}`: ≤ {TARGET}× tower_governor's"
                ),
                measured: format!("{time:.2}× (instructions {instr:.2}×)"),
                met: time <= TARGET,
            }
        })
        .collect()
}

/// The markdown of the HTTP rows: ns, overhead and instructions per request
/// of each layer, each like-for-like pair's ratio, and the load rows (the
/// targets are printed apart, by [`targets`]). Empty when nothing was measured.
pub fn render(s: &Samples, out: &mut String) {
    let m = |name: &str| s.median(&format!("http.{name}")).unwrap_or(f64::NAN);
    if s.median("http.overhead.bare").is_none() {
        return;
    }
    let (bare, bare_instr) = (m("overhead.bare"), m("instr.bare"));
    let _ = writeln!(
        out,
        "\n| HTTP middleware, 256 clients, in process | ns/request | overhead over bare | instructions/request | over bare |\n\
         |---|---:|---:|---:|---:|"
    );
    for (who, label) in LAYERS {
        let (ns, instr) = (m(&format!("overhead.{who}")), m(&format!("instr.{who}")));
        let (over, over_instr) = match who {
            "bare" => (String::new(), String::new()),
            _ => (
                format!("{:.0} ns", ns - bare),
                format!("{:.0}", instr - bare_instr),
            ),
        };
        let _ = writeln!(
            out,
            "| {label} | {ns:.0} | {over} | {instr:.0} | {over_instr} |"
        );
    }
    let _ = writeln!(
        out,
        "\n| tenure-http's overhead over tower_governor's | time | instructions |\n\
         |---|---:|---:|"
    );
    for (ours, theirs, what) in PAIRS {
        let (time, instr) = pair_ratios(s, ours, theirs);
        let _ = writeln!(
            out,
            "| {what}: `{ours}` vs `{theirs}` | {time:.2}× | {instr:.2}× |"
        );
    }
    let _ = writeln!(
        out,
        "\nIn process: each service called {REQUESTS} times per measurement from \
         {CLIENTS} peer addresses, the layers interleaved {REPEATS} times per round \
         (medians); instructions by `valgrind --tool=callgrind` in the measured \
         loop only, the difference of a run of 11 000 and one of 1 000 requests. \
         A layer's overhead is its figure less the bare service's."
    );
    if s.median("http.load.bare").is_none() {
        return;
    }
    let _ = writeln!(
        out,
        "\n| HTTP under `wrk -t2 -c256`, loopback | requests/s | of bare |\n|---|---:|---:|"
    );
    let load_bare = m("load.bare");
    for (name, label) in [
        ("bare", "bare axum service"),
        ("governor", "tower_governor"),
        ("tenure", "tenure-http, in-process"),
        ("redis", "tenure-http, Redis"),
    ] {
        let v = m(&format!("load.{name}"));
        let _ = writeln!(out, "| {label} | {v:.0} | {:.2}× |", v / load_bare);
    }
}

fn installed(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok()
}

/// Requests/s of `app` served on loopback under `wrk`.
async fn load(name: &str, app: Router, run_for: Duration) -> f64 {
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
        eprintln!("wrk saw refusals of the HTTP row {name}:\n{text}");
    }
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}
