//! Rate limiters on a real redis-server: the shared contract, the
//! differential test against the pure Rust algorithms, the server's clock,
//! TTLs, wrong-type and corrupted keys, script cache loss.

mod limit_common;

use std::time::Duration;

use limit_common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tenure::limit::store::{LimitRequest, LimitStore};
use tenure::limit::{Algorithm, Limiter, Mode, Policy, Quota, Timestamp};
use tenure::memory::MemoryLimits;
use tenure::redis::RedisLimits;
use tenure::{Coordinator, Error};
use tenure_test::RedisServer;

async fn redis_tenure(server: &RedisServer) -> Coordinator {
    Coordinator::connect(&server.url()).await.expect("connect")
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// 64 tasks × 1000 requests per algorithm, one test each so they can run in
/// parallel.
macro_rules! concurrency_tests {
    ($($name:ident: $alg:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let server = RedisServer::start();
            let w = redis_tenure(&server).await;
            concurrent_requests_never_exceed_the_limit(&w, Algorithm::$alg).await;
        }
    )*};
}

concurrency_tests!(
    redis_concurrent_gcra: Gcra,
    redis_concurrent_token_bucket: TokenBucket,
    redis_concurrent_sliding_log: SlidingLog,
    redis_concurrent_sliding_window: SlidingWindow,
    redis_concurrent_fixed_window: FixedWindow
);

#[tokio::test]
async fn redis_contract() {
    let server = RedisServer::start();
    let w = redis_tenure(&server).await;
    bad_input_is_a_clear_error(&w).await;
    compound_policies_commit_all_or_nothing(&w).await;
    peek_takes_nothing(&w).await;
    costs_take_several_units(&w).await;
    keys_are_independent(&w).await;
    sliding_log_records_rejections_only_when_asked(&w).await;
    window_boundaries(&w).await;
}

/// One request of a generated sequence.
#[derive(Debug, Clone)]
struct Req {
    /// Negative now and then: clocks step back (NTP, failover).
    dt: i64,
    cost: u32,
    mode: Mode,
    /// Which quota of each policy this request is checked under (a bit per
    /// policy): quotas change between calls.
    variant: u8,
}

/// A policy as its algorithm and two quotas (limit, period in ms, burst).
type Spec = (Algorithm, [(u32, u64, u32); 2]);

/// Policies, whether refusals are recorded, and the requests.
type Scenario = (Vec<Spec>, bool, Vec<Req>);

fn modes() -> impl Strategy<Value = Mode> {
    prop_oneof![
        6 => Just(Mode::Consume),
        2 => Just(Mode::Peek),
        1 => Just(Mode::Refund),
        2 => (0u64..4_000).prop_map(|ms| Mode::Reserve(Duration::from_millis(ms))),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let quota = (1u32..12, 1u64..3_000, 1u32..12);
    let policy = (
        prop::sample::select(Algorithm::ALL.to_vec()),
        [quota.clone(), quota],
    );
    let reqs = prop::collection::vec(
        (-100_000i64..400_000, 1u32..6, modes(), any::<u8>()).prop_map(
            |(dt, cost, mode, variant)| Req {
                dt,
                cost,
                mode,
                variant,
            },
        ),
        1..60,
    );
    (prop::collection::vec(policy, 1..4), any::<bool>(), reqs)
}

/// The policies of `specs` under the quotas `variant` picks, numbered in
/// slots as a [`Limiter`] numbers them.
fn policies_of(specs: &[Spec], record: bool, variant: u8) -> Vec<Policy> {
    let mut policies: Vec<Policy> = Vec::new();
    for (i, (alg, quotas)) in specs.iter().enumerate() {
        let (limit, period_ms, burst) = quotas[usize::from(variant >> i & 1)];
        let q = Quota::new(limit, Duration::from_millis(period_ms))
            .expect("quota")
            .burst(nz(burst));
        let slot = policies.iter().filter(|p| p.algorithm() == *alg).count();
        let p = Policy::new(q, *alg)
            .expect("policy")
            .record_rejected(record)
            .slot(u32::try_from(slot).expect("few"));
        policies.push(p);
    }
    policies
}

/// The Lua functions and the Rust functions give the same decisions, bit for
/// bit, on random sequences of random (compound) policies at injected times,
/// including times that step back.
#[test]
fn lua_and_rust_agree_on_random_sequences() {
    let server = RedisServer::start();
    lua_and_rust_agree(&server.url(), 150);
}

/// The same on a connection that may not use functions: the EVALSHA scripts
/// (one per algorithm, and one of all for mixed compound limiters) agree too.
#[test]
fn lua_scripts_and_rust_agree_on_random_sequences() {
    let server = RedisServer::start();
    let url = server.acl_user("scripts", "pw", NO_FUNCTIONS);
    lua_and_rust_agree(&url, 60);
}

/// ACL rules of a user who may do everything but use functions: what a
/// server without them (Redis < 7) looks like to the limiter.
const NO_FUNCTIONS: &str = "~* &* +@all -fcall -fcall_ro -function";

fn lua_and_rust_agree(url: &str, cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redis = rt
        .block_on(RedisLimits::connect(url, Default::default()))
        .expect("connect");
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&scenario(), |(specs, record, reqs)| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let key = format!("diff:{n}");
            let local = MemoryLimits::new();
            let mut now = T0 + n * 7_919; // not aligned to anything
            rt.block_on(async {
                for r in &reqs {
                    let policies = policies_of(&specs, record, r.variant);
                    let max_cost = policies.iter().map(Policy::capacity).min().unwrap_or(1);
                    now = now.saturating_add_signed(r.dt);
                    let cost = r.cost.min(u32::try_from(max_cost).unwrap_or(1));
                    let req = LimitRequest::new(&key, &policies, cost, r.mode)
                        .at(Some(Timestamp::from_micros(now)));
                    let want = local.apply(&req).await.expect("rust");
                    let got = redis.apply(&req).await.expect("lua");
                    prop_assert_eq!(&got, &want, "at {} µs, cost {}, {:?}", now, cost, r.mode);
                }
                Ok(())
            })
        })
        .expect("Lua and Rust agree");
}

/// The server's clock decides: the state written is stamped with the
/// server's `TIME`, whatever the client's clock says (the client never sends
/// a time unless a test injects one).
#[tokio::test]
async fn the_server_clock_decides() {
    let server = RedisServer::start();
    let w = redis_tenure(&server).await;
    let mut c = raw(&server).await;
    let l = w.limiter(Quota::per_second(nz(10)), Algorithm::Gcra);
    let before = w.limits().now().await.expect("time").as_micros();
    assert!(l.check("clock").await.expect("check").allowed);
    let after = w.limits().now().await.expect("time").as_micros();
    let key = l.policies().expect("policies")[0].storage_key("tenure:", "clock");
    let stored: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut c)
        .await
        .expect("get");
    let (tat, interval) = stored.split_once(':').expect("tat:interval");
    assert_eq!(interval, "100000");
    let tat: u64 = tat.parse().expect("tat");
    // TAT = server now + one interval (100 ms).
    assert!(
        (before + 100_000..=after + 100_000).contains(&tat),
        "{before} ≤ {tat} − 100000 ≤ {after}"
    );
    // A client whose clock is an hour off (what injecting its time would do)
    // would be refused here; the real path, on the server clock, is not.
    let skewed = Some(Timestamp::from_micros(before - 3_600_000_000));
    let refused = l
        .decide("clock", 10, Mode::Peek, skewed)
        .await
        .expect("skewed");
    assert!(!refused.allowed, "an hour-behind clock sees a full backlog");
    assert!(l.peek_n("clock", 9).await.expect("server clock").allowed);
}

/// Every key written has a TTL, of about the time until its state is fresh.
#[tokio::test]
async fn every_key_has_a_ttl() {
    let server = RedisServer::start();
    let w = redis_tenure(&server).await;
    let mut c = raw(&server).await;
    for alg in Algorithm::ALL {
        let l = w.limiter(Quota::per_minute(nz(6)), alg);
        let _ = l.check_n("ttl", 2).await.expect("check");
        let key = l.policies().expect("policies")[0].storage_key("tenure:", "ttl");
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .expect("pttl");
        // GCRA / bucket: 2 intervals of 10 s; log: 60 s; windows: up to 1 or 2 periods.
        let max = if alg == Algorithm::SlidingWindow {
            120_000
        } else {
            60_000
        };
        assert!(pttl > 0 && pttl <= max, "{alg}: PTTL {pttl}");
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .expect("keys");
    for key in keys {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .expect("pttl");
        assert!(pttl > 0, "{key} has no TTL");
    }
}

/// Keys of another type, or values tenure did not write, are errors naming
/// the key — never a crash, a reset or a silent pass.
#[tokio::test]
async fn wrong_type_and_corrupted_keys_are_errors() {
    let server = RedisServer::start();
    let w = redis_tenure(&server).await;
    let mut c = raw(&server).await;
    let corruptions: [(Algorithm, &[&str]); 12] = [
        (Algorithm::Gcra, &["HSET", "K", "a", "1"]),
        (Algorithm::Gcra, &["SET", "K", "soon"]),
        (Algorithm::Gcra, &["SET", "K", "99999999999999999999:1"]),
        (Algorithm::Gcra, &["SET", "K", "1700000000000000"]),
        (Algorithm::TokenBucket, &["SET", "K", "1"]),
        (
            Algorithm::TokenBucket,
            &["HSET", "K", "tokens", "-1", "last", "5"],
        ),
        (
            Algorithm::TokenBucket,
            &["HSET", "K", "tokens", "1", "last", "5"],
        ),
        // A hash of none of the algorithm's fields is someone else's hash:
        // an error, not a fresh start that would write into it.
        (Algorithm::TokenBucket, &["HSET", "K", "a", "1"]),
        (Algorithm::SlidingLog, &["SET", "K", "1"]),
        (Algorithm::SlidingLog, &["SADD", "K", "x"]),
        (Algorithm::SlidingWindow, &["RPUSH", "K", "1"]),
        (
            Algorithm::FixedWindow,
            &["HSET", "K", "start", "1e3", "count", "1"],
        ),
    ];
    for (i, (alg, cmd)) in corruptions.iter().enumerate() {
        let user_key = format!("corrupt:{i}");
        let l = w.limiter(Quota::per_hour(nz(5)), *alg);
        let key = l.policies().expect("policies")[0].storage_key("tenure:", &user_key);
        let mut command = redis::cmd(cmd[0]);
        for part in &cmd[1..] {
            command.arg(if *part == "K" { key.as_str() } else { part });
        }
        let () = command.query_async(&mut c).await.expect("corrupt the key");
        for mode in [
            Mode::Consume,
            Mode::Peek,
            Mode::Refund,
            Mode::Reserve(Duration::from_secs(1)),
        ] {
            let err = l
                .decide(&user_key, 1, mode, None)
                .await
                .expect_err("corrupt");
            assert!(
                matches!(&err, Error::WrongType { key: k, .. } if *k == key),
                "{alg} {cmd:?}: {err}"
            );
        }
    }
    // The sliding log with live entries reads their times too.
    let l = w.limiter(Quota::per_hour(nz(1)), Algorithm::SlidingLog);
    let key = l.policies().expect("policies")[0].storage_key("tenure:", "corrupt:log");
    let now = w.limits().now().await.expect("now").as_micros() as f64 + 0.5;
    let () = redis::cmd("ZADD")
        .arg(&key)
        .arg(now)
        .arg("x")
        .query_async(&mut c)
        .await
        .expect("zadd");
    assert!(matches!(
        l.check("corrupt:log").await,
        Err(Error::WrongType { .. })
    ));
}

/// Many units in the same microsecond stay distinct members of the log, and
/// big integers stay exact.
#[tokio::test]
async fn sliding_log_members_are_unique_and_times_exact() {
    let server = RedisServer::start();
    let w = redis_tenure(&server).await;
    let mut c = raw(&server).await;
    let l = w.limiter(Quota::per_hour(nz(1000)), Algorithm::SlidingLog);
    let odd = (1u64 << 52) + 1; // needs all 53 bits
    let at = Some(Timestamp::from_micros(odd));
    assert!(
        l.decide("same-µs", 600, Mode::Consume, at)
            .await
            .expect("600")
            .allowed
    );
    assert!(
        l.decide("same-µs", 1, Mode::Consume, at)
            .await
            .expect("1")
            .allowed
    );
    let key = l.policies().expect("policies")[0].storage_key("tenure:", "same-µs");
    let n: u64 = redis::cmd("ZCARD")
        .arg(&key)
        .query_async(&mut c)
        .await
        .expect("zcard");
    assert_eq!(n, 601);
    let d = l
        .decide("same-µs", 400, Mode::Consume, at)
        .await
        .expect("400");
    assert!(!d.allowed && d.remaining == 399);

    let g = w.limiter(Quota::per_second(nz(1)), Algorithm::Gcra);
    let _ = g.decide("exact", 1, Mode::Consume, at).await.expect("gcra");
    let key = g.policies().expect("policies")[0].storage_key("tenure:", "exact");
    let tat: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut c)
        .await
        .expect("get");
    assert_eq!(tat, format!("{}:1000000", odd + 1_000_000));
}

/// A compound limiter's keys share one hash tag (one Redis Cluster slot).
#[test]
fn compound_keys_share_a_hash_tag() {
    let l = Limiter::local(Quota::per_second(nz(10)), Algorithm::Gcra)
        .and(Quota::per_day(nz(1000)), Algorithm::FixedWindow)
        .and(Quota::per_minute(nz(100)), Algorithm::SlidingLog);
    for p in l.policies().expect("policies") {
        let key = p.storage_key("tenure:", "user:7");
        assert!(key.starts_with("tenure:{user:7}:limit:"), "{key}");
    }
}

/// The script cache can be flushed (restart, failover): EVALSHA falls back.
#[tokio::test]
async fn script_cache_loss_is_recovered() {
    let server = RedisServer::start();
    let url = server.acl_user("scripts", "pw", NO_FUNCTIONS);
    let w = Coordinator::connect(&url).await.expect("connect");
    let l = w.limiter(Quota::per_second(nz(5)), Algorithm::TokenBucket);
    assert!(l.check("flush").await.expect("first").allowed);
    server.command("SCRIPT FLUSH").expect("flush");
    assert!(l.check("flush").await.expect("after flush").allowed);
    let stats = server.command("INFO commandstats").expect("stats");
    assert!(calls(&stats, "evalsha") >= 3, "{stats}"); // 2 + the NOSCRIPT retry
    assert_eq!(calls(&stats, "fcall"), 0, "{stats}");
}

/// The function library can be lost (`FUNCTION FLUSH`, a restart without
/// persistence): the next check loads it again, and no state is lost with it.
#[tokio::test]
async fn function_library_loss_is_recovered() {
    let mut server = RedisServer::start();
    let w = redis_tenure(&server).await;
    let l = w.limiter(Quota::per_minute(nz(5)), Algorithm::TokenBucket);
    assert_eq!(l.check("flush").await.expect("first").remaining, 4);
    server.command("FUNCTION FLUSH").expect("flush");
    assert_eq!(server.command("FUNCTION LIST").expect("list"), "*0\r\n");
    assert_eq!(l.check("flush").await.expect("after flush").remaining, 3);
    assert!(
        server
            .command("FUNCTION LIST")
            .expect("list")
            .contains("tenure_limit_"),
        "the library is loaded again"
    );
    server.restart(); // not persistent: keys and functions are gone
    let mut answer = None;
    for _ in 0..50 {
        match l.check("flush").await {
            Ok(d) => {
                answer = Some(d);
                break;
            }
            // The connection may need a moment to come back.
            Err(e) if e.is_infrastructure() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("after restart: {e}"),
        }
    }
    assert_eq!(answer.expect("answered after restart").remaining, 4);
    let stats = server.command("INFO commandstats").expect("stats");
    assert_eq!(calls(&stats, "evalsha"), 0, "{stats}");
}

/// On Redis 7 a check is one `FCALL`: no `EVALSHA`, nothing loaded per call.
#[tokio::test]
async fn a_check_is_one_function_call() {
    let server = RedisServer::start();
    let w = redis_tenure(&server).await;
    for alg in Algorithm::ALL {
        let l = w.limiter(Quota::per_second(nz(100)), alg);
        let _ = l.check("warm").await.expect("warm");
        server.command("CONFIG RESETSTAT").expect("reset");
        for i in 0..10 {
            assert!(l.check(&format!("k:{i}")).await.expect("check").allowed);
        }
        let stats = server.command("INFO commandstats").expect("stats");
        assert_eq!(calls(&stats, "fcall"), 10, "{alg}: {stats}");
        assert_eq!(calls(&stats, "evalsha"), 0, "{alg}: {stats}");
        assert_eq!(calls(&stats, "function|load"), 0, "{alg}: {stats}");
    }
}

/// Where functions may not be used — denied by an ACL, or a server without
/// them (Redis < 7: `FCALL` is an unknown command) — checks run as EVALSHA
/// scripts and keep the whole contract. Also when `FCALL` is allowed but
/// `FUNCTION LOAD` is not, so the library cannot be loaded.
#[tokio::test]
async fn without_functions_the_scripts_keep_the_contract() {
    let server = RedisServer::start();
    for rules in [NO_FUNCTIONS, "~* &* +@all -function"] {
        server.command("FUNCTION FLUSH").expect("flush");
        let url = server.acl_user("scripts", "pw", rules);
        let w = Coordinator::connect(&url).await.expect("connect");
        server.command("CONFIG RESETSTAT").expect("reset");
        bad_input_is_a_clear_error(&w).await;
        compound_policies_commit_all_or_nothing(&w).await;
        peek_takes_nothing(&w).await;
        costs_take_several_units(&w).await;
        keys_are_independent(&w).await;
        sliding_log_records_rejections_only_when_asked(&w).await;
        window_boundaries(&w).await;
        let stats = server.command("INFO commandstats").expect("stats");
        assert!(calls(&stats, "evalsha") > 20, "{rules}: {stats}");
        // The handle tried functions once, then stayed with scripts.
        assert!(calls(&stats, "fcall") <= 1, "{rules}: {stats}");
        server.command("FLUSHALL").expect("flushall");
    }
}

/// `calls=` of `command` in an `INFO commandstats` reply (0 when absent).
fn calls(stats: &str, command: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// An unreachable server is an infrastructure error, not a refusal; a local
/// limiter still works.
#[tokio::test]
async fn a_dead_server_is_an_error_not_a_refusal() {
    let mut server = RedisServer::start();
    let w = redis_tenure(&server).await;
    let l = w.limiter(Quota::per_second(nz(5)), Algorithm::Gcra);
    server.kill();
    let err = l.check("down").await.expect_err("server is gone");
    assert!(err.is_infrastructure(), "{err}");
    // With a fallback, the local limiter answers while the server is away…
    let local = Limiter::local(Quota::per_second(nz(2)), Algorithm::Gcra);
    let l = l.fallback(local);
    let d = l.check_n("down", 2).await.expect("fallback");
    assert!(
        d.allowed && d.limit == 2,
        "the local policy answered: {d:?}"
    );
    assert!(!l.check("down").await.expect("fallback").allowed);
    // …and bad input is still an error, not a fallback.
    assert!(matches!(
        l.check_n("down", 0).await,
        Err(Error::InvalidArgument { .. })
    ));
    // Once the server is back, it answers again.
    server.restart();
    let mut answered_by = 0;
    for _ in 0..50 {
        answered_by = l.check("down").await.expect("server back").limit;
        if answered_by == 5 {
            break;
        }
        // The connection may need a moment to come back.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answered_by, 5, "the Redis policy answers again");
}
