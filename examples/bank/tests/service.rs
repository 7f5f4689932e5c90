#![allow(clippy::unwrap_used)]
//! The bank over real HTTP on loopback, against a real redis-server and a real
//! PostgreSQL: lost updates, rate limits per IP, spoofed headers, a dead
//! limiter store, and a stale lease holder.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bank::ledger::{Change, Claim};
use bank::{Config, Ledger};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tenure::Coordinator;
use tenure_test::{PostgresServer, RedisServer};
use tokio::sync::oneshot;
use tokio::time::Instant;

struct Bank {
    redis: RedisServer,
    pg: PostgresServer,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Bank {
    async fn start(configure: impl FnOnce(&mut Config)) -> Self {
        let redis = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .unwrap();
        let pg = tokio::task::spawn_blocking(PostgresServer::start)
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut config = Config::new(addr, &redis.url(), &pg.url());
        configure(&mut config);
        let app = bank::app(&config).await.unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(bank::serve(listener, app, async {
            let _ = stopped.await;
        }));
        Bank {
            redis,
            pg,
            addr,
            stop: Some(stop),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Bank {
    fn drop(&mut self) {
        self.redis.resume(); // a paused server would not die on SIGKILL's heels
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An HTTP client whose connections come from `ip` (any 127.0.0.0/8 address is
/// local on Linux).
fn client_from(ip: &str) -> Client {
    Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(90))
        .build()
        .unwrap()
}

async fn deposit(c: &Client, bank: &Bank, id: &str, amount: u64) -> (StatusCode, Value) {
    let res = c
        .post(bank.url(&format!("/accounts/{id}/deposit")))
        .json(&json!({ "amount": amount }))
        .send()
        .await
        .unwrap();
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn balance(c: &Client, bank: &Bank, id: &str) -> i64 {
    let res = c
        .get(bank.url(&format!("/accounts/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["id"], id);
    v["balance"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_parallel_deposits_all_land_in_the_balance() {
    let bank = Bank::start(|c| {
        c.limit = bank::config::parse_rate("10000/1m").unwrap();
        // 100 changes queue on one account's lease: wait long enough for all
        // of them even on two busy cores.
        c.lease_wait = Duration::from_secs(60);
    })
    .await;
    let bank = Arc::new(bank);
    let client = client_from("127.0.0.1");
    let tasks: Vec<_> = (1..=100u64)
        .map(|amount| {
            let (bank, client) = (Arc::clone(&bank), client.clone());
            tokio::spawn(async move { (amount, deposit(&client, &bank, "shared", amount).await) })
        })
        .collect();
    let mut landed = 0;
    let mut balances = Vec::new();
    for t in tasks {
        let (amount, (status, body)) = t.await.unwrap();
        assert_eq!(status, 200, "deposit of {amount}: {body}");
        landed += amount;
        balances.push(body["balance"].as_i64().unwrap());
    }
    // Every deposit is in the final balance (1 + 2 + … + 100), and each one
    // saw a distinct balance: no two changes overlapped.
    assert_eq!(landed, 5050);
    assert_eq!(balance(&client, &bank, "shared").await, 5050);
    balances.sort_unstable();
    balances.dedup();
    assert_eq!(balances.len(), 100);
}

fn header<'a>(res: &'a reqwest::Response, name: &str) -> &'a str {
    res.headers()
        .get(name)
        .unwrap_or_else(|| panic!("missing {name}"))
        .to_str()
        .unwrap()
}

/// Parses `"default";r=0;t=41` into (r, t).
fn parse_ratelimit(v: &str) -> (u64, u64) {
    let rest = v.strip_prefix("\"default\";r=").unwrap();
    let (r, t) = rest.split_once(";t=").unwrap();
    (r.parse().unwrap(), t.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sixty_first_request_from_one_ip_is_refused_and_no_one_else_is() {
    // 127.0.0.1 is a trusted proxy; 127.0.0.2 and 127.0.0.3 are plain clients.
    let bank = Bank::start(|c| c.trusted_proxy = vec!["127.0.0.1/32".into()]).await;
    let other = client_from("127.0.0.3");
    assert_eq!(deposit(&other, &bank, "acct", 10).await.0, 200);

    let client = client_from("127.0.0.2");
    let mut passed = 0;
    let mut last = None;
    for i in 0..61 {
        // A forged X-Forwarded-For from an untrusted peer must not move the
        // request into another bucket: all 61 count against 127.0.0.2.
        let res = client
            .get(bank.url("/accounts/acct"))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .send()
            .await
            .unwrap();
        if res.status() == 200 {
            passed += 1;
            let (r, _) = parse_ratelimit(header(&res, "ratelimit"));
            assert_eq!(r, 59 - i, "remaining after request {i}");
        }
        last = Some(res);
    }
    assert_eq!(passed, 60);
    let refused = last.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(
        header(&refused, "ratelimit-policy"),
        "\"default\";q=60;w=60"
    );
    let (r, t) = parse_ratelimit(header(&refused, "ratelimit"));
    assert_eq!(r, 0);
    assert!((1..=60).contains(&t), "t={t}");
    // The legacy X-RateLimit-* fields are opt-in (`legacy_headers(true)`).
    for legacy in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert!(refused.headers().get(legacy).is_none(), "{legacy} sent");
    }
    assert_eq!(header(&refused, "content-type"), "application/problem+json");
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["status"], 429);

    // Another IP is unaffected.
    let res = other.get(bank.url("/accounts/acct")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(parse_ratelimit(header(&res, "ratelimit")).0, 58);

    // Through the trusted proxy, the forwarded address is the client: a fresh
    // one has its own bucket, 127.0.0.2 is still refused.
    let proxy = client_from("127.0.0.1");
    let via = |xff: &'static str| {
        proxy
            .get(bank.url("/accounts/acct"))
            .header("x-forwarded-for", xff)
            .send()
    };
    let res = via("203.0.113.9").await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(parse_ratelimit(header(&res, "ratelimit")).0, 59);
    assert_eq!(via("6.6.6.6, 127.0.0.2").await.unwrap().status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_is_answered_by_fail_closed_within_the_budget() {
    let budget = Duration::from_millis(300);
    let bank = Bank::start(|c| {
        c.on_limiter_failure = bank::config::OnFailure::Closed;
        c.limit_budget = budget;
    })
    .await;
    let client = client_from("127.0.0.1");
    assert_eq!(deposit(&client, &bank, "acct", 5).await.0, 200);

    bank.redis.pause(); // SIGSTOP: connections stay open, nothing answers
    for _ in 0..3 {
        let started = Instant::now();
        let res = client.get(bank.url("/accounts/acct")).send().await.unwrap();
        let took = started.elapsed();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(header(&res, "retry-after"), "1");
        assert_eq!(header(&res, "content-type"), "application/problem+json");
        // The budget, plus generous slack for two noisy cores.
        assert!(took >= budget, "answered before the budget: {took:?}");
        assert!(took < budget + Duration::from_secs(2), "took {took:?}");
    }
    bank.redis.resume();
    // Once Redis answers again, so does the limiter.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let res = client.get(bank.url("/accounts/acct")).send().await.unwrap();
        if res.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never recovered: {}",
            res.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_is_answered_by_fail_open_within_the_budget() {
    let budget = Duration::from_millis(300);
    let mut bank = Bank::start(|c| c.limit_budget = budget).await;
    let client = client_from("127.0.0.1");
    assert_eq!(deposit(&client, &bank, "acct", 5).await.0, 200);
    bank.redis.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let res = client.get(bank.url("/accounts/acct")).send().await.unwrap();
        let took = started.elapsed();
        assert_eq!(
            res.status(),
            200,
            "reads need no lease: fail open serves them"
        );
        assert!(
            res.headers().get("ratelimit").is_none(),
            "no decision, no numbers"
        );
        assert!(took < budget + Duration::from_secs(2), "took {took:?}");
    }
    // A balance change needs its lease: refused with 503, not applied.
    let (status, _) = deposit(&client, &bank, "acct", 1).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let pg_check = Ledger::connect(&bank.pg.url()).await.unwrap();
    assert_eq!(pg_check.balance("acct").await.unwrap(), Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_s_write_is_rejected_by_the_fence() {
    let bank = Bank::start(|_| {}).await;
    let client = client_from("127.0.0.1");
    assert_eq!(deposit(&client, &bank, "acct", 100).await.0, 200);

    let tenure = Coordinator::connect(&bank.redis.url()).await.unwrap();
    let ledger = Ledger::connect(&bank.pg.url()).await.unwrap();
    let lease = tenure
        .lease(bank::app::lease_key("acct"))
        .ttl(Duration::from_millis(300))
        .watchdog(false); // A's pause below would stop a renewal too

    // Holder A takes the lease and reads the balance…
    let a = lease.attempt().await.unwrap().into_guard().unwrap();
    let stale = a.fence();
    assert_eq!(
        ledger.claim("acct", stale).await.unwrap(),
        Claim::Claimed { balance: 100 }
    );
    // …then pauses past its TTL (a GC pause, a stopped VM).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(a.is_lost());

    // Meanwhile B (the service) takes the lease and deposits: newer fence.
    let (status, body) = deposit(&client, &bank, "acct", 50).await;
    assert_eq!(
        (status, body["balance"].as_i64()),
        (StatusCode::OK, Some(150))
    );

    // A wakes up and writes what it computed: refused, B's deposit survives.
    assert_eq!(
        ledger.write("acct", stale, 130).await.unwrap(),
        Change::Stale
    );
    assert_eq!(
        ledger.change("acct", stale, 30).await.unwrap(),
        Change::Stale
    );
    assert!(matches!(
        ledger.claim("acct", stale).await.unwrap(),
        Claim::Stale { current } if current > stale.get()
    ));
    assert_eq!(balance(&client, &bank, "acct").await, 150);
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overdrafts_bad_input_and_missing_accounts_are_client_errors() {
    let bank = Bank::start(|_| {}).await;
    let c = client_from("127.0.0.1");
    assert_eq!(deposit(&c, &bank, "acct", 10).await.0, 200);
    let withdraw = |id: &str, body: &'static str| {
        c.post(bank.url(&format!("/accounts/{id}/withdraw")))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let res = withdraw("acct", r#"{"amount": 11}"#).await.unwrap();
    assert_eq!(res.status(), StatusCode::CONFLICT);
    assert_eq!(header(&res, "content-type"), "application/problem+json");
    let res = withdraw("acct", r#"{"amount": 10}"#).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap()["balance"], 0);

    for body in [
        "",
        "nope",
        r#"{"amount": -1}"#,
        r#"{"amount": 0}"#,
        r#"{"amount": 1.5}"#,
        r#"{"amount": "1"}"#,
        r#"{"amount": 1, "to": "x"}"#,
        r#"{"amount": 99999999999999999999}"#,
    ] {
        let res = withdraw("acct", body).await.unwrap();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(header(&res, "content-type"), "application/problem+json");
    }
    assert_eq!(
        withdraw("nobody", r#"{"amount": 1}"#)
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    let res = c.get(bank.url("/accounts/nobody")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = c.get(bank.url("/accounts/bad%20id")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(balance(&c, &bank, "acct").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_database_is_a_prompt_503_and_frees_the_lease() {
    let mut bank = Bank::start(|_| {}).await;
    let client = client_from("127.0.0.1");
    assert_eq!(deposit(&client, &bank, "acct", 5).await.0, 200);
    // SIGKILL reaches only the postmaster; the bank's session process would
    // linger for a moment. End the sessions first, then the server.
    end_client_sessions(&bank.pg.url()).await;
    bank.pg.kill();
    let started = Instant::now();
    let res = client.get(bank.url("/accounts/acct")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&res, "content-type"), "application/problem+json");
    let (status, _) = deposit(&client, &bank, "acct", 1).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The failed change released its lease: the account is free at once.
    let tenure = Coordinator::connect(&bank.redis.url()).await.unwrap();
    let status = tenure.status(&bank::app::lease_key("acct")).await.unwrap();
    assert!(!status.held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_database_connection_is_opened_again() {
    let bank = Bank::start(|_| {}).await;
    let client = client_from("127.0.0.1");
    assert_eq!(deposit(&client, &bank, "acct", 5).await.0, 200);

    // PostgreSQL ends the bank's session (as on a restart or a failover).
    end_client_sessions(&bank.pg.url()).await;

    // The next requests reconnect (the first may still see the old session die).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = deposit(&client, &bank, "acct", 1).await;
        if status == 200 {
            assert_eq!(body["balance"], 6);
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(Instant::now() < deadline, "never reconnected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(balance(&client, &bank, "acct").await, 6);
}

/// Ends every client session but our own (`pg_terminate_backend`).
async fn end_client_sessions(url: &str) {
    let (admin, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
            &[],
        )
        .await
        .unwrap();
    assert!(!ended.is_empty(), "the bank's session was found");
}

/// Sends GET /accounts/acct through the trusted proxy (127.0.0.1) with raw
/// forwarding header lines; returns the status and the units remaining.
async fn via_proxy(bank: &Bank, lines: &[(&str, &[u8])]) -> (StatusCode, Option<u64>) {
    let mut req = client_from("127.0.0.1").get(bank.url("/accounts/acct"));
    for (name, value) in lines {
        req = req.header(
            *name,
            reqwest::header::HeaderValue::from_bytes(value).unwrap(),
        );
    }
    let res = req.send().await.unwrap();
    let remaining = res
        .headers()
        .get("ratelimit")
        .map(|v| parse_ratelimit(v.to_str().unwrap()).0);
    (res.status(), remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_quote_injection_and_non_ascii_hops_select_no_other_bucket() {
    let bank = Bank::start(|c| {
        c.trusted_proxy = vec!["127.0.0.1/32".into()];
        c.forwarded_header = bank::config::ForwardedHeaderArg::Forwarded;
        c.limit = bank::config::parse_rate("2/1m").unwrap();
    })
    .await;
    let real = &b"for=198.51.100.7"[..];
    assert_eq!(via_proxy(&bank, &[("forwarded", real)]).await.0, 404);
    assert_eq!(via_proxy(&bank, &[("forwarded", real)]).await.0, 404);
    assert_eq!(via_proxy(&bank, &[("forwarded", real)]).await.0, 429);
    // The client opens a quoted string and never closes it; the proxy
    // appends its entry to the same line or adds a line: still 198.51.100.7.
    let forged = &br#"for=6.6.6.6;x=""#[..];
    let mut appended = forged.to_vec();
    appended.extend_from_slice(b", for=198.51.100.7");
    for lines in [
        &[("forwarded", &appended[..])][..],
        &[("forwarded", forged), ("forwarded", real)],
        // A non-ASCII byte in the client's own element spoils only that one.
        &[("forwarded", b"for=\"\xff\", for=198.51.100.7")],
        // X-Forwarded-For is not read: a client cannot switch headers.
        &[("x-forwarded-for", b"6.6.6.6"), ("forwarded", real)],
    ] {
        let readable: Vec<_> = lines
            .iter()
            .map(|(n, v)| (*n, String::from_utf8_lossy(v)))
            .collect();
        assert_eq!(
            via_proxy(&bank, lines).await.0,
            StatusCode::TOO_MANY_REQUESTS,
            "{readable:?}"
        );
    }
    // 6.6.6.6 never spent a unit.
    let (status, remaining) = via_proxy(&bank, &[("forwarded", b"for=6.6.6.6")]).await;
    assert_eq!((status, remaining), (StatusCode::NOT_FOUND, Some(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_ascii_x_forwarded_for_hop_spoils_only_itself() {
    let bank = Bank::start(|c| c.trusted_proxy = vec!["127.0.0.1/32".into()]).await;
    for (i, value) in [
        &b"\xff, 198.51.100.8"[..],
        b"caf\xc3\xa9, 198.51.100.8",
        b"198.51.100.8",
    ]
    .into_iter()
    .enumerate()
    {
        let (status, remaining) = via_proxy(&bank, &[("x-forwarded-for", value)]).await;
        let readable = String::from_utf8_lossy(value);
        assert_eq!(status, StatusCode::NOT_FOUND, "{readable}");
        assert_eq!(remaining, Some(59 - i as u64), "{readable}");
    }
    // Garbage where the client should be is still no key: 400, never a pass.
    let (status, _) = via_proxy(&bank, &[("x-forwarded-for", b"198.51.100.8, \xff")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Asserts an RFC 9457 problem answer with this status.
async fn assert_problem(res: reqwest::Response, status: StatusCode, what: &str) {
    assert_eq!(res.status(), status, "{what}");
    assert_eq!(
        header(&res, "content-type"),
        "application/problem+json",
        "{what}"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], status.as_u16(), "{what}: {body}");
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{what}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_object_bodies_are_refused_and_every_error_is_problem_json() {
    let bank = Bank::start(|c| c.limit = bank::config::parse_rate("1000/1m").unwrap()).await;
    let c = client_from("127.0.0.1");
    for body in [
        "[5]",
        "[5, 6]",
        "5",
        "\"5\"",
        "null",
        "true",
        "[{\"amount\": 5}]",
    ] {
        let res = c
            .post(bank.url("/accounts/acct/deposit"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_problem(res, StatusCode::BAD_REQUEST, body).await;
    }
    // Nothing was deposited: the account does not exist.
    let res = c.get(bank.url("/accounts/acct")).send().await.unwrap();
    assert_problem(res, StatusCode::NOT_FOUND, "no account").await;

    for path in [
        "/",
        "/nope",
        "/accounts",
        "/accounts/a/b/c",
        "/accounts/a/deposit/x",
    ] {
        let res = c.get(bank.url(path)).send().await.unwrap();
        assert_problem(res, StatusCode::NOT_FOUND, path).await;
    }
    for (method, path) in [
        (reqwest::Method::POST, "/accounts/a"),
        (reqwest::Method::DELETE, "/accounts/a"),
        (reqwest::Method::GET, "/accounts/a/deposit"),
        (reqwest::Method::PUT, "/accounts/a/withdraw"),
    ] {
        let res = c
            .request(method.clone(), bank.url(path))
            .send()
            .await
            .unwrap();
        let what = format!("{method} {path}");
        assert!(res.headers().get("allow").is_some(), "{what}: no Allow");
        assert_problem(res, StatusCode::METHOD_NOT_ALLOWED, &what).await;
    }
    // A path segment that is not UTF-8 is refused by the router's extractor.
    let res = c.get(bank.url("/accounts/%FF")).send().await.unwrap();
    assert_problem(res, StatusCode::BAD_REQUEST, "%FF").await;
    // A body over the extractor's limit.
    let res = c
        .post(bank.url("/accounts/acct/deposit"))
        .body(vec![b' '; 3 << 20])
        .send()
        .await
        .unwrap();
    assert_problem(res, StatusCode::PAYLOAD_TOO_LARGE, "3 MiB body").await;
}

/// The value of the sample `name{labels}` in a Prometheus text page, whatever
/// the order of its labels (`None` when absent).
fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
        let given = rest.strip_suffix('}')?;
        let all = labels
            .iter()
            .all(|(k, v)| given.split(',').any(|l| l == format!("{k}=\"{v}\"")));
        (metric == name && all).then(|| value.parse().unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_in_prometheus_format_after_some_requests() {
    let bank = Bank::start(|c| c.limit = bank::config::parse_rate("3/1m").unwrap()).await;
    let client = client_from("127.0.0.4");
    for _ in 0..3 {
        assert_eq!(deposit(&client, &bank, "metered", 5).await.0, 200);
    }
    assert_eq!(
        deposit(&client, &bank, "metered", 5).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Scrapes are not rate-limited: the client's budget is spent already.
    let res = client.get(bank.url("/metrics")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "content-type"), "text/plain; version=0.0.4");
    let page = res.text().await.unwrap();

    // Other tests of this process may add to the counts: at least ours.
    let redis = ("store", "redis");
    let count = |name, outcome| sample(&page, name, &[redis, ("outcome", outcome)]);
    let acquired = count("tenure_lease_acquisitions_total", "acquired");
    assert!(acquired.is_some_and(|n| n >= 3.0), "{page}");
    assert!(count("tenure_limit_decisions_total", "allowed").is_some_and(|n| n >= 3.0));
    assert!(count("tenure_limit_decisions_total", "refused").is_some_and(|n| n >= 1.0));
    // Histograms are summaries: a count, and a sum of plausible seconds.
    let holds = sample(&page, "tenure_lease_hold_seconds_count", &[redis]).unwrap();
    let held = sample(&page, "tenure_lease_hold_seconds_sum", &[redis]).unwrap();
    assert!(holds >= 3.0 && held > 0.0 && held < holds * 60.0, "{page}");
    let waits = sample(&page, "tenure_lease_wait_seconds_count", &[redis]).unwrap();
    assert!(waits >= 3.0, "{page}");
    assert!(sample(&page, "tenure_limit_store_seconds_count", &[redis]).unwrap() >= 4.0);
}

/// While a deposit holds the account's lease (its PostgreSQL write frozen),
/// anyone reading the lease's status sees the label: the account and the
/// route, beside this process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_in_progress_shows_its_account_and_route_in_the_lease_status() {
    let bank = Bank::start(|c| c.lease_wait = Duration::from_secs(30)).await;
    let client = client_from("127.0.0.1");
    assert_eq!(deposit(&client, &bank, "labelled", 5).await.0, 200);
    let observer = Coordinator::connect(&bank.redis.url()).await.unwrap();
    let key = bank::app::lease_key("labelled");
    assert!(
        observer.status(&key).await.unwrap().holder.is_none(),
        "free"
    );
    bank.pg.pause();
    let pending = {
        let (client, url) = (client.clone(), bank.url("/accounts/labelled/deposit"));
        tokio::spawn(async move { client.post(url).json(&json!({ "amount": 1 })).send().await })
    };
    let start = Instant::now();
    let holder = loop {
        if let Some(h) = observer.status(&key).await.unwrap().holder {
            break h;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    bank.pg.resume();
    assert_eq!(
        holder.label.as_deref(),
        Some("account labelled: POST /accounts/labelled/deposit")
    );
    assert_eq!(holder.pid, std::process::id());
    assert_eq!(pending.await.unwrap().unwrap().status(), 200);
    assert!(
        observer.status(&key).await.unwrap().holder.is_none(),
        "released"
    );
}
