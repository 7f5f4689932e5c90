//! What an uncontended acquire + release costs Redis, counted by the server
//! itself (`INFO commandstats`: the `EVALSHA` and every command run inside it).

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use tenure::Coordinator;
use tenure::redis::{RedisOptions, RedisStore};
use tenure_test::RedisServer;

/// tenure on `server`, with a 2 s budget per call.
async fn connect(server: &RedisServer) -> Coordinator {
    let options = RedisOptions::default().timeout(Duration::from_secs(2));
    Coordinator::with_backend(RedisStore::connect(&server.url(), options).await.unwrap())
}

/// Total calls of every command but the ones this test itself sends.
fn calls(server: &RedisServer) -> u64 {
    per_command(server).iter().map(|(_, n)| n).sum()
}

/// A hand-written client of two minimal scripts (acquire: `SET NX PX` and the
/// fence `INCR`; release: compare and delete), the baseline of the counts.
struct RawClient {
    acquire: redis::Script,
    release: redis::Script,
    c: redis::aio::MultiplexedConnection,
}

impl RawClient {
    async fn connect(url: &str) -> RawClient {
        let client = redis::Client::open(url).unwrap();
        RawClient {
            acquire: redis::Script::new(
                "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
                 return redis.call('INCR', KEYS[2]) end return 0",
            ),
            release: redis::Script::new(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                 return redis.call('DEL', KEYS[1]) end return 0",
            ),
            c: client.get_multiplexed_async_connection().await.unwrap(),
        }
    }

    /// One acquire + release of `key` (its fence counter is `key:f`).
    async fn cycle(&mut self, key: &str) {
        let _: i64 = self
            .acquire
            .key(key)
            .key(format!("{key}:f"))
            .arg("t")
            .arg(30_000)
            .invoke_async(&mut self.c)
            .await
            .unwrap();
        let _: i64 = self
            .release
            .key(key)
            .arg("t")
            .invoke_async(&mut self.c)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn an_acquire_and_release_costs_at_most_eight_commands() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    // Warm up: connection setup and script loading are not per-cycle costs.
    common::warm_guard(&tenure, "warm")
        .await
        .release()
        .await
        .unwrap();
    server.command("CONFIG RESETSTAT").unwrap();

    const CYCLES: u64 = 1000;
    for i in 0..CYCLES {
        let lease = tenure.lease(format!("cost-{i}")).watchdog(false);
        let guard = lease.attempt().await.unwrap().into_guard().unwrap();
        guard.release().await.unwrap();
    }
    let per_cycle = calls(&server) as f64 / CYCLES as f64;

    // The same cycles by a hand-written client of two minimal scripts, for
    // the record (`--no-capture` prints both).
    let mut raw_client = RawClient::connect(&server.url()).await;
    raw_client.cycle("raw-warm").await;
    server.command("CONFIG RESETSTAT").unwrap();
    for i in 0..CYCLES {
        raw_client.cycle(&format!("raw-{i}")).await;
    }
    let raw = calls(&server) as f64 / CYCLES as f64;
    println!("Redis commands per acquire + release: tenure {per_cycle}, raw client {raw}");
    // acquire: EVALSHA, SET NX PX, TIME, SET PX GET (the counter written
    // with the clock floor and its retention, answering the counter it
    // replaced); release: EVALSHA, GET, LPOP (nobody in line), DEL. Nothing
    // is published when nobody waits. A separate INCR fails this.
    assert!(
        per_cycle <= 8.0,
        "{per_cycle} Redis commands per acquire + release"
    );
}

/// A wait that finds the key free takes it with its first script, which also
/// checks the waiting line (a free key with waiters in line goes to them):
/// `EVALSHA`, `SET NX GET`, `LPOP`, `TIME`, `SET PX GET` — one command more than a
/// `try_acquire`, for the line. Counted on distinct keys, with the release.
#[tokio::test]
async fn a_wait_that_finds_the_key_free_costs_one_command_more() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    let g = tenure
        .lease("warm")
        .watchdog(false)
        .attempt_within(Duration::from_secs(1))
        .await;
    g.unwrap().into_guard().unwrap().release().await.unwrap();
    server.command("CONFIG RESETSTAT").unwrap();

    const CYCLES: u64 = 200;
    for i in 0..CYCLES {
        let lease = tenure.lease(format!("wait-{i}")).watchdog(false);
        let guard = lease.attempt_within(Duration::from_secs(1)).await.unwrap();
        guard.into_guard().unwrap().release().await.unwrap();
    }
    let per_cycle = calls(&server) as f64 / CYCLES as f64;
    println!("Redis commands per acquire_within (free key) + release: {per_cycle}");
    assert!(
        per_cycle <= 9.0,
        "{per_cycle} Redis commands per acquire_within + release"
    );
}

#[tokio::test]
async fn a_release_with_nobody_waiting_publishes_nothing() {
    let server = RedisServer::start();
    let backend = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    let tenure = Coordinator::with_backend(backend);
    for i in 0..20 {
        let guard = tenure
            .lease(format!("quiet-{i}"))
            .watchdog(false)
            .attempt()
            .await
            .unwrap();
        guard.into_guard().unwrap().release().await.unwrap();
    }
    assert_eq!(calls_of(&server, "publish"), 0);
}

/// Tasks taking turns on one key, as the peers bench does (16 tasks, 1 ms of
/// "work" between turns): every hand-off wakes one waiter, which takes the
/// lease from the hand-off message (the key is set for half a second, so
/// that a waiter that died holds up the line no longer; a holder that keeps
/// it longer claims the full TTL with its first renewal); the releaser
/// stands in line again with its first script. Counted over whole cycles,
/// every command of every task (the waiting line's upkeep too), and printed
/// by command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_hand_off_wakes_one_waiter() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    const TASKS: usize = 16;
    const TURNS: usize = 40;
    // Warm up: connection, scripts, the subscriber.
    let lease = tenure
        .lease("turns")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let g = lease.attempt().await.unwrap().into_guard().unwrap();
    let waiter = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.attempt_within(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.release().await.unwrap();
    waiter
        .await
        .unwrap()
        .unwrap()
        .into_guard()
        .unwrap()
        .release()
        .await
        .unwrap();
    server.command("CONFIG RESETSTAT").unwrap();

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let lease = lease.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..TURNS {
                let guard = lease
                    .attempt_within(Duration::from_secs(20))
                    .await
                    .unwrap()
                    .into_guard()
                    .expect("acquired");
                guard.release().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let cycles = (TASKS * TURNS) as f64;
    let per_cycle = calls(&server) as f64 / cycles;
    let scripts = (calls_of(&server, "evalsha") as f64) / cycles;
    let by_command: Vec<String> = per_command(&server)
        .into_iter()
        .map(|(name, n)| format!("{name} {:.2}", n as f64 / cycles))
        .collect();
    println!(
        "contended, {TASKS} tasks: {per_cycle:.1} Redis commands and {scripts:.2} scripts per cycle ({})",
        by_command.join(", ")
    );
    // A hand-off is the release (EVALSHA GET LPOP SET TIME SET PUBLISH: the
    // TIME is the fence's clock floor, the second SET writes the counter with
    // it); the woken waiter takes the lease from the
    // message and sends nothing (its first renewal would claim the full TTL,
    // but it releases within the claim window). The releaser comes back and
    // stands in line behind the others with its first script (EVALSHA TIME
    // RPUSH): 10. How often the line is found empty (then a release deletes
    // it, `DEL`, and the next stand gives the new line its TTL, `PEXPIRE`)
    // depends on the machine's load, so those two are bounded apart: a
    // PEXPIRE per stand would be 1.0 per cycle. A claim per hand-off (4
    // more) or a look at the key before standing in line (SET NX GET, PTTL)
    // fails the first bound.
    let empty_line = (calls_of(&server, "pexpire") + calls_of(&server, "del")) as f64;
    assert!(
        per_cycle - empty_line / cycles <= 10.2,
        "{per_cycle} commands per contended cycle"
    );
    assert!(
        calls_of(&server, "pexpire") as f64 / cycles <= 0.9,
        "a PEXPIRE per stand"
    );
    assert!(scripts <= 2.05, "{scripts} scripts per contended cycle");
    assert!(
        calls_of(&server, "publish") as f64 <= cycles,
        "at most one notification per cycle"
    );
}

/// Idle waiters of one process keep their places with one script call per
/// line and heartbeat between them (the process's keeper), not one look per
/// waiter and heartbeat: 40 waiters send a few calls a second, not 160.
/// Their places stay alive all the while, and the line still serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waiters_keep_their_places_with_one_call_per_line() {
    let server = RedisServer::start();
    let tenure = connect(&server).await;
    const WAITERS: usize = 40;
    let lease = tenure
        .lease("idle")
        .watchdog(false)
        .ttl(Duration::from_secs(60));
    let held = lease.attempt().await.unwrap().into_guard().unwrap();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let lease = lease.clone();
            tokio::spawn(async move {
                let guard = lease
                    .attempt_within(Duration::from_secs(60))
                    .await
                    .unwrap()
                    .into_guard()
                    .expect("acquired");
                guard.release().await.unwrap();
            })
        })
        .collect();
    let line = |server: &RedisServer| {
        let reply = server.command("LLEN tenure:{idle}:queue").unwrap();
        reply
            .trim()
            .trim_start_matches(':')
            .parse::<usize>()
            .unwrap()
    };
    let stood = tokio::time::Instant::now() + Duration::from_secs(10);
    while line(&server) < WAITERS {
        assert!(
            tokio::time::Instant::now() < stood,
            "the waiters never stood in line"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past their first heartbeats: each waiter has looked again since.
    tokio::time::sleep(Duration::from_millis(600)).await;
    server.command("CONFIG RESETSTAT").unwrap();
    let idle = Duration::from_secs(2);
    tokio::time::sleep(idle).await;
    let scripts = calls_of(&server, "evalsha");
    // Four heartbeats a second, and a look now and then.
    assert!(
        scripts <= 20,
        "{scripts} script calls in {idle:?} from {WAITERS} idle waiters"
    );
    assert_eq!(line(&server), WAITERS, "every place is still in line");
    held.release().await.unwrap();
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(20), w)
            .await
            .expect("every waiter had its turn")
            .unwrap();
    }
}

/// Calls per command (`cmdstat_<name>`), leaving out the ones this test sends.
fn per_command(server: &RedisServer) -> Vec<(String, u64)> {
    let stats = server.command("INFO commandstats").unwrap();
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("info:") && !l.starts_with("config"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// The type checks left the fast path but still run when SET or INCR fails:
/// a fence counter of another type, or a negative one, is a clear error, and
/// neither leaves a lease key behind nor changes the counter.
#[tokio::test]
async fn a_fence_counter_that_is_not_a_fence_is_still_a_clear_error() {
    let server = RedisServer::start();
    let backend = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    let tenure = Coordinator::with_backend(backend);
    server.command("RPUSH tenure:{listed}:fence 1").unwrap();
    let err = tenure
        .lease("listed")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    assert!(matches!(err, tenure::Error::WrongType { .. }), "{err}");
    assert_eq!(
        server.command("EXISTS tenure:{listed}").unwrap().trim(),
        ":0"
    );

    server.command("SET tenure:{negative}:fence -1").unwrap();
    let err = tenure
        .lease("negative")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    assert!(matches!(err, tenure::Error::WrongType { .. }), "{err}");
    assert_eq!(
        server.command("EXISTS tenure:{negative}").unwrap().trim(),
        ":0"
    );
    let counter = server.command("GET tenure:{negative}:fence").unwrap();
    assert_eq!(
        counter.trim_end(),
        "$2\r\n-1",
        "the counter is left as it was"
    );
}

/// Calls of one command (`cmdstat_<name>`), 0 when it was never called.
fn calls_of(server: &RedisServer, name: &str) -> u64 {
    let stats = server.command("INFO commandstats").unwrap();
    let prefix = format!("cmdstat_{name}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The single-node path sends its scripts by `EVALSHA` (not their text by
/// `EVAL`, which only quorum nodes and replica acknowledgements need) and no
/// `WAIT` when no replica acknowledgement is asked for.
#[tokio::test]
async fn the_single_node_path_sends_evalsha_and_no_wait() {
    let server = RedisServer::start();
    let backend = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    let tenure = Coordinator::with_backend(backend);
    // Warm up all three scripts: a first EVALSHA answered NOSCRIPT is a call too.
    let g = common::warm_guard(&tenure, "warm").await;
    let _ = g.extend().await.unwrap();
    g.release().await.unwrap();
    server.command("CONFIG RESETSTAT").unwrap();

    for i in 0..50 {
        let lease = tenure.lease(format!("sha-{i}")).watchdog(false);
        let guard = lease.attempt().await.unwrap().into_guard().unwrap();
        let _ = guard.extend().await.unwrap();
        guard.release().await.unwrap();
    }
    assert_eq!(calls_of(&server, "evalsha"), 150);
    assert_eq!(calls_of(&server, "eval"), 0);
    assert_eq!(calls_of(&server, "wait"), 0);
}

/// Client-side CPU per uncontended cycle, for callgrind: `TENURE_CPU_N`
/// cycles (default 1000) of `try_acquire` + release through tenure, or
/// (`TENURE_CPU_WHO=raw`) of the two minimal scripts through redis-rs, on one
/// thread against a real redis-server (a child process, which valgrind does
/// not trace). tenure's guards run without the watchdog, as in the
/// distinct-keys benchmark; `TENURE_CPU_WATCHDOG=on` keeps the default
/// (renewal on). Instructions per cycle are the difference of two runs'
/// totals divided by the difference of their N (see `docs/BENCHMARKS.md`).
#[test]
#[ignore = "a profiling loop, run by hand under valgrind"]
fn cpu_per_cycle_loop() {
    let n: u64 = std::env::var("TENURE_CPU_N").map_or(1000, |v| v.parse().unwrap());
    let raw = std::env::var("TENURE_CPU_WHO").is_ok_and(|w| w == "raw");
    let watchdog = std::env::var("TENURE_CPU_WATCHDOG").is_ok_and(|w| w == "on");
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if raw {
            let mut raw_client = RawClient::connect(&server.url()).await;
            for i in 0..n {
                raw_client.cycle(&format!("raw-{i}")).await;
            }
        } else {
            let backend = RedisStore::connect(&server.url(), RedisOptions::default())
                .await
                .unwrap();
            let tenure = Coordinator::with_backend(backend);
            for i in 0..n {
                let lease = tenure.lease(format!("cpu-{i}")).watchdog(watchdog);
                let guard = lease.attempt().await.unwrap().into_guard().unwrap();
                guard.release().await.unwrap();
            }
        }
    });
    // The server's side of the same cycles (`usec_per_call` of `evalsha`).
    eprintln!("{}", server.command("INFO commandstats").unwrap());
}
