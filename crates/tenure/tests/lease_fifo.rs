//! Waiting is first-in-first-out on one Redis master: waiters stand in line
//! (`tenure:{KEY}:queue`), a release hands the lease to the first live one,
//! and a waiter that disappears is skipped (at once when it left the line,
//! after its TTL when it was killed).

#![allow(clippy::unwrap_used)]

mod common;
mod fifo_common;

use std::time::Duration;

use tenure::Coordinator;
use tenure::redis::{RedisOptions, RedisStore};
use tenure_test::RedisServer;
use tokio::time::Instant;

async fn connect(url: &str) -> Coordinator {
    let backend = RedisStore::connect(url, RedisOptions::default().timeout(Duration::from_secs(2)))
        .await
        .unwrap();
    Coordinator::with_backend(backend)
}

/// The length of the waiting line of `key`.
fn in_line(server: &RedisServer, key: &str) -> usize {
    let reply = server
        .command(&format!("LLEN tenure:{{{key}}}:queue"))
        .unwrap();
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// Waits (up to 10 s) until `n` waiters stand in line for `key`.
async fn until_in_line(server: &RedisServer, key: &str, n: usize) {
    fifo_common::until_in_line(&|| std::future::ready(in_line(server, key)), n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lease_in_the_order_they_stood_in_line() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, "fifo").await;
    const WAITERS: usize = 8;
    let count = || std::future::ready(in_line(&server, "fifo"));
    let within = Duration::from_secs(20);
    let line = fifo_common::stand_in_line(&lease, WAITERS, within, &count, move |guard| {
        let watcher = tenure.clone();
        async move {
            // The fence a hand-off message carried is the store's.
            let status = watcher.status("fifo").await.unwrap();
            assert_eq!(status.fence, Some(guard.fence()), "{status:?}");
            assert!(status.held && !guard.is_lost());
            guard
        }
    })
    .await;
    line.served_in_order(holder).await;
    assert_eq!(in_line(&server, "fifo"), 0, "nobody is left in line");
    assert_eq!(
        server.command("EXISTS tenure:{fifo}").unwrap().trim(),
        ":0",
        "the last waiter's release deleted the key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_line_at_once() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, "cancel").await;
    fifo_common::a_cancelled_waiter_leaves_the_line(&lease, holder, || {
        std::future::ready(in_line(&server, "cancel"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_wait_ends_leaves_the_line() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, "budget").await;
    let within = Duration::from_millis(200);
    fifo_common::a_waiter_whose_wait_ends_leaves_the_line(
        &lease,
        holder,
        within,
        || std::future::ready(in_line(&server, "budget")),
        || std::future::ready(server.command("EXISTS tenure:{budget}").unwrap().trim() == ":0"),
    )
    .await;
}

/// How long a place lives without its waiter's heartbeat.
const PLACE_LIFETIME: Duration = Duration::from_secs(1);

/// The TTL of the waiter that is killed.
const KILLED_TTL: Duration = Duration::from_millis(600);

/// Run in a child process by [`a_killed_waiter_is_skipped_after_its_ttl`]:
/// waits in line until killed.
#[tokio::test]
#[ignore = "run as a child process by a_killed_waiter_is_skipped_after_its_ttl"]
async fn killed_waiter_child() {
    let Ok(url) = std::env::var("TENURE_FIFO_CHILD_URL") else {
        return;
    };
    let tenure = connect(&url).await;
    let _ = tenure
        .lease("killed")
        .watchdog(false)
        .ttl(KILLED_TTL)
        .attempt_within(Duration::from_secs(120))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_is_skipped_after_its_ttl() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, "killed").await;
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["killed_waiter_child", "--exact", "--ignored", "--nocapture"])
        .env("TENURE_FIFO_CHILD_URL", server.url())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A place lives a second without a look (the waiter's heartbeat), not
    // its waiter's TTL. A release hands the lease to the first place without
    // reading the clock: the dead waiter holds it for the claim window (half
    // a second), then the next waiter's look (every 250 ms) takes it: about
    // 0.5-0.75 s, asserted with a margin for two loaded cores.
    let dead = fifo_common::DeadPlace::HandedOverAfter(PLACE_LIFETIME, PLACE_LIFETIME * 3 / 2);
    fifo_common::a_killed_waiter_is_skipped(&lease, holder, child, dead, || {
        std::future::ready(in_line(&server, "killed"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handed_to_a_killed_waiter_passes_on_after_its_ttl() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, "vanished").await;
    // A waiter that stood in line and vanished without a trace, as a killed
    // process leaves it: its place, alive for another 10 s.
    let time = server.command("TIME").unwrap();
    let secs: u64 = time.lines().nth(2).unwrap().parse().unwrap();
    let entry = format!("{} 300 {}", (secs + 10) * 1000, "ab".repeat(16));
    server
        .command(&format!("RPUSH tenure:{{vanished}}:queue \"{entry}\""))
        .unwrap();
    let second = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.attempt_within(Duration::from_secs(60)).await })
    };
    until_in_line(&server, "vanished", 2).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let guard = second
        .await
        .unwrap()
        .unwrap()
        .into_guard()
        .expect("acquired");
    let waited = released.elapsed();
    // The vanished waiter was handed the lease for its TTL (300 ms) and never
    // claimed it; the next waiter took it when that ran out.
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "the next waiter waited {waited:?}"
    );
    guard.release().await.unwrap();
}

/// The waiter of a place in line that lives on (its process stopped
/// refreshing it but its entry has not run out yet): `ttl_ms` is the TTL a
/// hand-off gives it, and its entry stays alive for 10 s.
fn vanished_waiter(server: &RedisServer, key: &str, ttl_ms: u64) {
    let time = server.command("TIME").unwrap();
    let secs: u64 = time.lines().nth(2).unwrap().parse().unwrap();
    let entry = format!("{} {ttl_ms} {}", (secs + 10) * 1000, "cd".repeat(16));
    server
        .command(&format!("RPUSH tenure:{{{key}}}:queue \"{entry}\""))
        .unwrap();
}

/// A free key with a live waiter in line is not taken by a newcomer's wait:
/// its first attempt hands the lease to the waiter in line and stands
/// behind it (a plain attempt first took the free key, jumping the line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_does_not_jump_the_line_of_a_free_key() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    vanished_waiter(&server, "jump", 400);
    // A counter ahead of the clock floor grows by one per grant.
    server
        .command("SET tenure:{jump}:fence 9000000000000000")
        .unwrap();
    let lease = tenure
        .lease("jump")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let asked = Instant::now();
    let guard = lease
        .attempt_within(Duration::from_secs(10))
        .await
        .unwrap()
        .into_guard()
        .expect("acquired");
    let waited = asked.elapsed();
    // The waiter in line was handed the lease first (the first fence) and
    // held it for its TTL; the newcomer came next.
    assert_eq!(
        guard.fence().get(),
        9_000_000_000_000_002,
        "the waiter in line went first"
    );
    assert!(
        waited >= Duration::from_millis(350),
        "the newcomer waited only {waited:?}"
    );
    assert_eq!(in_line(&server, "jump"), 0);
    guard.release().await.unwrap();
}

/// A hand-off message that does not name the waiter's place (a stale one,
/// from before its last look) grants nothing: the waiter keeps waiting and
/// gets the lease, with the store's fence, when it is really handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_message_for_another_place_grants_nothing() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, "stale").await;
    let holder_fence = holder.fence();
    let waiter = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.attempt_within(Duration::from_secs(20)).await })
    };
    until_in_line(&server, "stale", 1).await;
    let entry = server.command("LINDEX tenure:{stale}:queue 0").unwrap();
    let entry = entry.lines().nth(1).unwrap().to_string();
    let (expires, rest) = entry.split_once(' ').unwrap();
    let token = rest.split_once(' ').unwrap().1;
    let older: u64 = expires.parse::<u64>().unwrap() - 1000;
    let stale = format!("{token} 999 {older} {rest}");
    server
        .command(&format!("PUBLISH tenure:{{stale}}:released \"{stale}\""))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "a stale hand-off granted the lease");
    holder.release().await.unwrap();
    let guard = waiter
        .await
        .unwrap()
        .unwrap()
        .into_guard()
        .expect("acquired");
    assert!(guard.fence() > holder_fence, "the store's fence, not 999");
    guard.release().await.unwrap();
}

/// A wait's first script takes a free key itself: keys of the wrong type are
/// still clear errors, permanent ones (the wait ends at once), and none
/// leaves a lease key without its fence behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_keys_of_the_wrong_type_is_a_clear_error() {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let exists = |key: &str| server.command(&format!("EXISTS {key}")).unwrap();
    let wait = |key: &'static str| {
        let lease = tenure.lease(key).watchdog(false);
        async move { lease.attempt_within(Duration::from_secs(5)).await }
    };

    server.command("HSET tenure:{hashed} a b").unwrap();
    let err = wait("hashed").await.unwrap_err();
    assert!(matches!(err, tenure::Error::WrongType { .. }), "{err}");

    server.command("SET tenure:{badfence}:fence x").unwrap();
    let err = wait("badfence").await.unwrap_err();
    assert!(matches!(err, tenure::Error::WrongType { .. }), "{err}");
    assert_eq!(exists("tenure:{badfence}").trim(), ":0", "no lease left");

    server.command("SET tenure:{badline}:queue x").unwrap();
    let err = wait("badline").await.unwrap_err();
    assert!(matches!(err, tenure::Error::WrongType { .. }), "{err}");
    assert_eq!(exists("tenure:{badline}").trim(), ":0", "no lease left");
    let fence = server.command("EXISTS tenure:{badline}:fence").unwrap();
    assert_eq!(fence.trim(), ":0", "no fence taken");
}

/// The wall clock in microseconds.
fn now_us() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// Holds `key`, puts a waiter in line behind the holder, writes `counter`
/// into the key's fence counter and releases: the waiter's outcome (the
/// release itself always succeeds) and the counter after it.
async fn hand_off_over(key: &str, counter: &str) -> (tenure::Result<tenure::Attempt>, String) {
    let server = RedisServer::start();
    let tenure = connect(&server.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, key).await;
    let waiter = fifo_common::spawn_wait(&lease);
    until_in_line(&server, key, 1).await;
    let set = server.command(&format!("SET tenure:{{{key}}}:fence {counter}"));
    assert!(set.unwrap().starts_with("+OK"));
    holder.release().await.unwrap();
    let outcome = waiter.await.unwrap();
    let after = server
        .command(&format!("GET tenure:{{{key}}}:fence"))
        .unwrap();
    (outcome, after)
}

/// A hand-off's fence is the counter's next one when the counter is ahead of
/// the server's clock (as on a store whose clock stepped back): the
/// release's common hand-off, which writes the clock first, settles it as
/// every grant does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_over_a_counter_ahead_of_the_clock_goes_on_one_above_it() {
    let ahead = now_us() + 3_600_000_000;
    let (outcome, after) = hand_off_over("ahead", &ahead.to_string()).await;
    let guard = outcome.unwrap().into_guard().unwrap();
    assert_eq!(guard.fence(), tenure::Fence::from(ahead + 1));
    assert!(
        after.contains(&format!("\r\n{}\r\n", ahead + 1)),
        "{after:?}"
    );
}

/// A hand-off over a counter that cannot go on (at the largest exact fence,
/// or not an integer) grants nothing: the waiter meets the error, no lease
/// key is left, and the counter is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_over_a_counter_that_cannot_go_on_fails_the_waiter() {
    let last_exact = ((1_u64 << 53) - 1).to_string();
    for (key, counter, says) in [
        ("top", last_exact.as_str(), "2^53"),
        ("text", "abc", "integer"),
    ] {
        let (outcome, after) = hand_off_over(key, counter).await;
        let err = outcome.unwrap_err();
        assert!(err.to_string().contains(says), "{key}: {err}");
        assert!(
            after.contains(&format!("\r\n{counter}\r\n")),
            "{key}: {after:?}"
        );
    }
}

/// A waiter given up on (its future dropped) just before its short-lived
/// process ends: `close` waits for it to leave the line, so no place of it
/// is left behind for a release to skip.
#[test]
fn a_waiter_dropped_before_its_process_ends_leaves_the_line() {
    let server = RedisServer::start();
    // Held by another client of the same convention (a plain token).
    server
        .command("SET tenure:{dropped} someone-else PX 60000")
        .unwrap();
    common::as_one_process(async {
        let tenure = connect(&server.url()).await;
        let lease = tenure.lease("dropped").watchdog(false);
        let waiting = lease.attempt_within(Duration::from_secs(30));
        let gave_up = tokio::time::timeout(Duration::from_millis(500), waiting).await;
        assert!(gave_up.is_err(), "the key is held by someone else");
        // Nothing else has run since the waiter was dropped.
        assert_eq!(in_line(&server, "dropped"), 1, "the waiter stood in line");
        tenure.close().await;
    });
    assert_eq!(
        in_line(&server, "dropped"),
        0,
        "the dropped waiter's place was left behind"
    );
}
