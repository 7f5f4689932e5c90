//! Fences never repeat, even when the store forgets its counters or goes
//! back to an older one: every fence is at least the store's clock (in
//! microseconds on one master; on the nodes of a quorum in whole seconds ×
//! 10⁶ while a counter lives, milliseconds × 1000 for a missing one), so a
//! store restarted without its data, a replica promoted after missing grants,
//! a counter dropped by the retention and a counter written by an older
//! tenure all go on above every fence handed out before.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Coordinator, Fence};
use tenure_test::{RedisServer, ReplicatedRedis};

/// The wall clock in microseconds.
fn now_us() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

/// Takes and releases `key` `n` times; the fences, in order.
async fn cycle(tenure: &Coordinator, key: &str, n: usize) -> Vec<Fence> {
    let mut fences = Vec::new();
    for _ in 0..n {
        let guard = take(tenure, key).await;
        fences.push(guard.fence());
        guard.release().await.unwrap();
    }
    fences
}

/// Takes `key`, retrying while a restarted server comes back; the attempts
/// that failed before are in the message when the key is not free.
async fn take(tenure: &Coordinator, key: &str) -> tenure::LeaseGuard {
    let lease = tenure.lease(key).watchdog(false);
    let mut failed = Vec::new();
    for _ in 0..50 {
        match lease.attempt().await {
            Ok(out) => {
                let seen = format!("{out:?}");
                let Some(guard) = out.into_guard() else {
                    let status = tenure.status(key).await;
                    panic!("{key} is not free: {seen:.200}; status {status:?}; after {failed:?}");
                };
                return guard;
            }
            Err(e) if e.is_infrastructure() => {
                failed.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("{key}: the store never came back: {failed:?}");
}

/// Waits for the start of the next second when this one is well under way,
/// so the grants that follow share one second of the clock (the case a floor
/// in whole seconds cannot tell apart from a counter that went back).
async fn early_in_a_second() {
    let into = now_us() % 1_000_000;
    if into > 200_000 {
        tokio::time::sleep(Duration::from_micros(1_000_000 - into)).await;
    }
}

fn assert_increasing(before: &[Fence], after: &[Fence]) {
    let all: Vec<Fence> = before.iter().chain(after).copied().collect();
    for w in all.windows(2) {
        assert!(w[1] > w[0], "fences repeat or go back: {all:?}");
    }
}

// ---- Redis ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volatile_redis_restart_does_not_restart_the_fences() {
    let mut server = RedisServer::start(); // --save "" --appendonly no
    let tenure = common::connect_redis(&server).await;
    let before = cycle(&tenure, "restart", 5).await;
    server.restart(); // kill -9 and start again at once: every key is gone
    let after = cycle(&tenure, "restart", 3).await;
    assert_increasing(&before, &after);
}

/// What a replica promoted within the second of grants it did not receive
/// holds: a counter behind the last fences handed out. Set back by hand here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_counter_set_back_within_the_second_goes_on_above_its_fences() {
    let server = RedisServer::start();
    let tenure = common::connect_redis(&server).await;
    early_in_a_second().await;
    let before = cycle(&tenure, "behind", 4).await;
    let reply = server
        .command(&format!("SET tenure:{{behind}}:fence {}", before[0].get()))
        .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    let after = cycle(&tenure, "behind", 2).await;
    assert_increasing(&before, &after);
}

/// A counter ahead of the server's clock (written by hand here, as a store
/// whose clock stepped back would hold one) goes on one above itself, and
/// a counter at the largest exact fence refuses the grant and stays as it
/// was: the acquire's rare grants, past its fast path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_counter_ahead_of_the_clock_goes_on_one_above_itself() {
    let server = RedisServer::start();
    let tenure = common::connect_redis(&server).await;
    let ahead = now_us() + 3_600_000_000;
    server
        .command(&format!("SET tenure:{{ahead}}:fence {ahead}"))
        .unwrap();
    let fences = cycle(&tenure, "ahead", 2).await;
    assert_eq!(fences, [Fence::from(ahead + 1), Fence::from(ahead + 2)]);

    let last_exact = (1_u64 << 53) - 1;
    server
        .command(&format!("SET tenure:{{top}}:fence {last_exact}"))
        .unwrap();
    let err = tenure
        .lease("top")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("2^53"), "{err}");
    assert_eq!(server.command("EXISTS tenure:{top}").unwrap().trim(), ":0");
    let counter = server.command("GET tenure:{top}:fence").unwrap();
    assert!(
        counter.contains(&format!("\r\n{last_exact}\r\n")),
        "{counter:?}"
    );
}

/// A real failover: the replica receives the first grant, the link is cut,
/// the master grants three more, the replica is promoted (`REPLICAOF NO
/// ONE`) within the same second and the clients move to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_after_missing_grants_goes_on_above_them() {
    let mut pair = ReplicatedRedis::start(RedisServer::builder());
    let options = RedisOptions::default().timeout(Duration::from_millis(500));
    let store = RedisStore::connect(&pair.url(), options).await.unwrap();
    let tenure = Coordinator::with_backend(store);
    early_in_a_second().await;
    let mut before = cycle(&tenure, "fo", 1).await;
    // The replica has the grant and the release (replicated in order).
    let counter = format!("\r\n{}\r\n", before[0].get());
    for _ in 0..200 {
        let fence = pair.replica.command("GET tenure:{fo}:fence").unwrap();
        let lease = pair.replica.command("EXISTS tenure:{fo}").unwrap();
        if fence.contains(&counter) && lease.starts_with(":0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    pair.link.cut();
    before.extend(cycle(&tenure, "fo", 3).await);
    pair.failover();
    let after = cycle(&tenure, "fo", 2).await;
    assert!(pair.replica.command("ROLE").unwrap().contains("master"));
    assert_increasing(&before, &after);
}

/// A quorum whose nodes all restart without their data (each node runs the
/// same floored script; the ballot settles on the maximum).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_whose_nodes_all_lost_their_data_goes_on_above_its_fences() {
    let mut fixture = common::quorum().await;
    let before = cycle(&fixture.tenure, "q", 4).await;
    for node in &mut fixture.nodes {
        node.restart();
    }
    let after = cycle(&fixture.tenure, "q", 3).await;
    assert_increasing(&before, &after);
}

/// A quorum won on nodes whose fences differ raises the lower ones; a node
/// that forgot its scripts (a restart, `SCRIPT FLUSH`) answers that raise
/// with `NOSCRIPT`. The raise goes again at once (it only ever raises a
/// counter under our own token), so the won ballot is not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_raise_on_a_node_that_forgot_its_scripts_still_wins() {
    let fixture = common::quorum().await;
    // Counters ahead of the clock and all different: every majority's grants
    // differ, so every won ballot raises a node.
    let set_apart = |ahead: u64| {
        for (i, node) in (0..).zip(&fixture.nodes) {
            let reply = node
                .command(&format!("SET tenure:{{raise}}:fence {}", ahead + i))
                .unwrap();
            assert!(reply.starts_with("+OK"), "{reply}");
        }
    };
    let ahead = now_us() + 60_000_000;
    set_apart(ahead);
    let before = cycle(&fixture.tenure, "raise", 2).await;
    assert!(before[0].get() > ahead, "{before:?}");
    // The scripts forgotten (the raise's too) and the counters apart again.
    for node in &fixture.nodes {
        assert!(node.command("SCRIPT FLUSH").unwrap().starts_with("+OK"));
    }
    let ahead = before[1].get() + 60_000_000;
    set_apart(ahead);
    let after = cycle(&fixture.tenure, "raise", 2).await;
    assert!(after[0].get() > ahead, "{after:?}");
    assert_increasing(&before, &after);
}

#[tokio::test]
async fn fences_start_at_the_server_clock_and_are_stored_as_integers() {
    let server = RedisServer::start();
    let tenure = common::connect_redis(&server).await;
    let t0 = now_us();
    let guard = tenure
        .lease("big")
        .watchdog(false)
        .record_holder(true)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let fence = guard.fence().get();
    // A fresh counter starts at the server's clock in microseconds (same
    // host; a second's margin for a clock step during the test).
    assert!(fence >= t0 - 1_000_000, "{fence} vs {t0}");
    assert!(fence <= now_us() + 1_000_000, "{fence}");
    let counter = server.command("GET tenure:{big}:fence").unwrap();
    assert!(counter.contains(&format!("\r\n{fence}\r\n")), "{counter:?}");
    let recorded = server.command("HGET tenure:{big}:holder fence").unwrap();
    assert!(
        recorded.contains(&format!("\r\n{fence}\r\n")),
        "{recorded:?}"
    );
    let status = tenure.status("big").await.unwrap();
    assert_eq!(status.fence, Some(guard.fence()));
    assert!(
        status.holder.is_some(),
        "the holder's fence matches the counter"
    );
}

#[tokio::test]
async fn an_old_counter_below_the_clock_jumps_forward_and_gets_a_retention() {
    let server = RedisServer::start();
    let tenure = common::connect_redis(&server).await;
    // What earlier versions left: a small counter without a TTL.
    server.command("SET tenure:{old}:fence 17").unwrap();
    let t0 = now_us();
    let fences = cycle(&tenure, "old", 3).await;
    assert!(fences[0].get() > 17 && fences[0].get() >= t0 / 1_000_000 * 1_000_000);
    assert_increasing(&[Fence::new(17)], &fences);
    let pttl = server.command("PTTL tenure:{old}:fence").unwrap();
    let pttl: i64 = pttl.trim_start_matches(':').trim().parse().unwrap();
    assert!(
        pttl > 86_000_000 && pttl <= 86_400_000,
        "a day's retention: {pttl}"
    );
}

#[tokio::test]
async fn a_counter_dropped_by_the_retention_goes_on_above_its_fences() {
    let server = RedisServer::start();
    let options = RedisOptions::default().fence_retention(Duration::from_millis(300));
    let tenure =
        Coordinator::with_backend(RedisStore::connect(&server.url(), options).await.unwrap());
    let before = cycle(&tenure, "idle", 3).await;
    let pttl = server.command("PTTL tenure:{idle}:fence").unwrap();
    let pttl: i64 = pttl.trim_start_matches(':').trim().parse().unwrap();
    assert!(pttl > 0 && pttl <= 300, "{pttl}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        server
            .command("EXISTS tenure:{idle}:fence")
            .unwrap()
            .starts_with(":0")
    );
    let after = cycle(&tenure, "idle", 2).await;
    assert_increasing(&before, &after);
}

#[tokio::test]
async fn a_fence_retention_redis_cannot_set_is_refused() {
    let server = RedisServer::start();
    for bad in [Duration::ZERO, Duration::from_secs(200 * 365 * 24 * 3600)] {
        let options = RedisOptions::default().fence_retention(bad);
        let err = RedisStore::connect(&server.url(), options)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("fence_retention"), "{err}");
    }
}

// ---- an equal fence needs the same acquisition ----

/// Two acquisitions that were handed the same fence (a store that lost its
/// counter while its clock stepped back): the resource applies the first
/// one's writes and its retries, never the second one's.
#[tokio::test]
async fn a_reused_fence_does_not_let_a_second_holder_write() {
    use tenure::fence::{AcquisitionId, FenceStamp, FencedWrite};
    use tenure::redis::RedisFencedStore;

    let server = RedisServer::start();
    let store = RedisFencedStore::connect(&server.url()).await.unwrap();
    let fence = Fence::new(43);
    let first = FenceStamp::new(fence, AcquisitionId::from(0xa));
    let second = FenceStamp::new(fence, AcquisitionId::from(0xb));
    assert_eq!(
        store.write("acct", first, "1").await.unwrap(),
        FencedWrite::Applied
    );
    assert_eq!(
        store.write("acct", second, "2").await.unwrap(),
        FencedWrite::Rejected { current: fence }
    );
    assert_eq!(
        store.write("acct", first, "3").await.unwrap(),
        FencedWrite::Applied
    );
    assert_eq!(
        store.read("acct").await.unwrap(),
        Some((fence, b"3".to_vec()))
    );
    // A newer fence goes through, and then the old acquisition is stale.
    let newer = FenceStamp::new(Fence::new(44), AcquisitionId::from(0xb));
    assert_eq!(
        store.write("acct", newer, "4").await.unwrap(),
        FencedWrite::Applied
    );
    assert_eq!(
        store.write("acct", first, "5").await.unwrap(),
        FencedWrite::Rejected {
            current: Fence::new(44)
        }
    );
}

/// A guard's stamp carries its own acquisition id: two guards of one key
/// never share one, and the stamp's fence is the guard's.
#[tokio::test]
async fn every_guard_has_its_own_acquisition_id() {
    let tenure = Coordinator::memory();
    let a = take(&tenure, "k").await;
    let (a_id, a_stamp) = (a.acquisition(), a.stamp());
    a.release().await.unwrap();
    let b = take(&tenure, "k").await;
    assert_ne!(b.acquisition(), a_id);
    assert_eq!(b.stamp().fence(), b.fence());
    assert_eq!(b.stamp().acquisition(), Some(b.acquisition()));
    assert!(b.stamp().fence() > a_stamp.fence());
}

// ---- memory ----

/// A memory store forgets everything with its process; the next one (a
/// restarted process) still hands out greater fences.
#[tokio::test]
async fn a_new_memory_store_goes_on_above_the_fences_of_the_last() {
    let before = cycle(&Coordinator::memory(), "m", 3).await;
    // A process takes more than a millisecond to start again.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let after = cycle(&Coordinator::memory(), "m", 2).await;
    assert_increasing(&before, &after);
}

/// A store made right after another one dropped, within its millisecond
/// (no sleep here): the clock in microseconds is already past its fences.
#[tokio::test]
async fn a_new_memory_store_within_the_millisecond_goes_on_above_the_last() {
    for _ in 0..20 {
        let before = cycle(&Coordinator::memory(), "m", 3).await;
        let after = cycle(&Coordinator::memory(), "m", 2).await;
        assert_increasing(&before, &after);
    }
}
