//! The lease contract's bodies, shared by every store: `lease_contract.rs`
//! runs them on memory, SQLite, Redis and a Redis quorum, `etcd_contract.rs`
//! on etcd. Only the time scale differs ([`Timing`]): etcd counts lease TTLs
//! in whole seconds and ends expired leases in a sweep, so there every "after
//! expiry" waits on the store with a bound instead of sleeping two TTLs.

#![allow(clippy::unwrap_used, dead_code, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use tenure::{Attempt, Coordinator, Error, ExtendOutcome, ReleaseOutcome};
use tokio::time::Instant;

/// The time scale of one store.
pub struct Timing {
    /// A short TTL the tests wait out.
    pub short: Duration,
    /// The watchdog test's TTL, and how many of them it keeps the lease.
    pub watchdog_ttl: Duration,
    pub watchdog_ttls: u32,
    /// The holder's TTL a waiter waits out, and the longest that wait may take.
    pub waiter_ttl: Duration,
    pub waiter_max: Duration,
    /// `None`: the store frees a key at its TTL, so "after expiry" is two TTLs
    /// of sleep. `Some(bound)`: the store frees it some time after (etcd's
    /// expiry sweep), so the tests poll the key's status for at most `bound`.
    pub expiry_bound: Option<Duration>,
}

impl Timing {
    /// Stores that expire a key at its TTL to the millisecond.
    pub const EXACT: Timing = Timing {
        short: Duration::from_millis(300),
        // Renewal every ttl/3 leaves ~260 ms of slack for a loaded CI machine.
        watchdog_ttl: Duration::from_millis(400),
        watchdog_ttls: 10,
        waiter_ttl: Duration::from_millis(600),
        waiter_max: Duration::from_secs(5),
        expiry_bound: None,
    };
}

/// Waits until a lease on `key` taken with `t.short` has expired on the store
/// (two TTLs of sleep, or polling up to `t.expiry_bound`); returns how long
/// that took.
pub async fn until_expired(w: &Coordinator, key: &str, t: &Timing) -> Duration {
    let start = Instant::now();
    let Some(bound) = t.expiry_bound else {
        tokio::time::sleep(t.short * 2).await;
        return start.elapsed();
    };
    loop {
        if !w.status(key).await.unwrap().held {
            return start.elapsed();
        }
        assert!(start.elapsed() < bound, "{key} still held after {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn second_acquire_fails_while_held_then_succeeds_after_expiry(
    w: &Coordinator,
    t: &Timing,
) {
    let lease = w.lease("two-tasks").watchdog(false).ttl(t.short);
    let start = Instant::now();
    let first = lease.attempt().await.expect("acquire");
    assert!(first.is_acquired(), "the key is free");
    match lease.attempt().await.expect("second attempt") {
        Attempt::Held { ttl_left } => {
            let left = ttl_left.expect("a TTL is set");
            assert!(left <= t.short && !left.is_zero(), "ttl_left {left:?}");
        }
        Attempt::Acquired(_) => panic!("second task acquired a held lease"),
    }
    until_expired(w, "two-tasks", t).await;
    let again = lease.attempt().await.expect("third attempt");
    assert!(again.is_acquired(), "the lease is free again after its TTL");
    // Not before the store's TTL.
    assert!(
        start.elapsed() >= t.short,
        "freed after {:?}",
        start.elapsed()
    );
    drop(first);
}

pub async fn release_and_extend_by_a_stale_holder_change_nothing(w: &Coordinator, t: &Timing) {
    let lease = w.lease("stale").watchdog(false).ttl(t.short);
    let a = lease.attempt().await.unwrap().into_guard().unwrap();
    until_expired(w, "stale", t).await;
    let long = w
        .lease("stale")
        .watchdog(false)
        .ttl(Duration::from_secs(20));
    let b = long.attempt().await.unwrap().into_guard().unwrap();
    assert!(b.fence() > a.fence());

    assert_eq!(a.extend().await.unwrap(), ExtendOutcome::NotHeld);
    assert!(a.is_lost());
    let before = w.status("stale").await.unwrap();
    assert_eq!(a.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let after = w.status("stale").await.unwrap();
    assert!(after.held, "B's lease must survive A's release");
    assert_eq!(after.fence, Some(b.fence()));
    // A's extend must not have shortened or lengthened B's TTL to A's short one.
    assert!(
        after.ttl_left.unwrap() > Duration::from_secs(15),
        "{before:?} {after:?}"
    );
    assert!(!b.is_lost());
    assert_eq!(b.release().await.unwrap(), ReleaseOutcome::Released);
}

pub async fn watchdog_keeps_the_lease_for_several_ttls(w: &Coordinator, t: &Timing) {
    let ttl = t.watchdog_ttl;
    let lease = w.lease("watchdog").ttl(ttl).watchdog(true);
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    let other = w.lease("watchdog").watchdog(false).ttl(ttl);
    let start = Instant::now();
    while start.elapsed() < ttl * t.watchdog_ttls {
        tokio::time::sleep(ttl / 2).await;
        assert!(!guard.is_lost(), "lost after {:?}", start.elapsed());
        assert!(!other.attempt().await.unwrap().is_acquired());
    }
    assert!(guard.remaining() > Duration::ZERO);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(other.attempt().await.unwrap().is_acquired());
}

pub async fn lost_signal_fires_at_the_local_deadline_without_renewal(w: &Coordinator, t: &Timing) {
    let lease = w.lease("deadline").watchdog(false).ttl(t.short);
    let start = Instant::now();
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    // The local deadline is counted from before the request was sent and is
    // shorter than the TTL by the drift margin, so the holder stops believing
    // in the lease before the store expires it. (Checked on the deadline
    // itself: the signal's wake-up can be late on a loaded machine.)
    let budget = t.short - tenure::lease::drift(t.short);
    assert!(guard.remaining() <= budget, "{:?}", guard.remaining());
    assert!(guard.remaining() > budget / 2, "{:?}", guard.remaining());
    let lost = guard.lost();
    tokio::time::timeout(t.short * 10, lost.wait())
        .await
        .expect("lost signal fires");
    let fired_after = start.elapsed();
    assert!(
        fired_after >= budget / 2,
        "fired too early: {fired_after:?}"
    );
    assert!(guard.is_lost());
    assert_eq!(guard.remaining(), Duration::ZERO);
}

pub async fn extend_never_revives_an_expired_lease(w: &Coordinator, t: &Timing) {
    let lease = w.lease("revive").watchdog(false).ttl(t.short);
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(matches!(
        guard.extend().await.unwrap(),
        ExtendOutcome::Extended { .. }
    ));
    until_expired(w, "revive", t).await;
    assert_eq!(guard.extend().await.unwrap(), ExtendOutcome::NotHeld);
    let status = w.status("revive").await.unwrap();
    assert!(!status.held, "an expired lease stays expired: {status:?}");
}

pub async fn release_hands_over_to_a_waiter_quickly(w: &Coordinator, _: &Timing) {
    let lease = w
        .lease("handoff")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let holder = lease.attempt().await.unwrap().into_guard().unwrap();
    let waiter = {
        let lease = lease.clone();
        tokio::spawn(async move {
            let out = lease.attempt_within(Duration::from_secs(20)).await.unwrap();
            (Instant::now(), out.into_guard())
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let released_at = Instant::now();
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let (acquired_at, guard) = waiter.await.unwrap();
    assert!(guard.is_some(), "the waiter got the lease");
    // The holder's TTL was 30 s: only a release notification explains a
    // hand-off this fast (typically ~1 ms; the margin is for CI noise).
    let handoff = acquired_at - released_at;
    assert!(
        handoff < Duration::from_millis(500),
        "hand-off took {handoff:?}"
    );
}

pub async fn waiter_gets_an_expiring_lease_when_its_ttl_runs_out(w: &Coordinator, t: &Timing) {
    let lease = w.lease("expiring").watchdog(false).ttl(t.waiter_ttl);
    let holder = lease.attempt().await.unwrap().into_guard().unwrap();
    let start = Instant::now();
    let got = lease.attempt_within(Duration::from_secs(10)).await.unwrap();
    assert!(got.is_acquired());
    let waited = start.elapsed();
    assert!(
        waited >= t.waiter_ttl - Duration::from_millis(200),
        "waited only {waited:?}"
    );
    assert!(waited < t.waiter_max, "waited {waited:?}");
    drop(holder);
}

pub async fn acquire_within_gives_up_at_its_deadline(w: &Coordinator, _: &Timing) {
    let lease = w
        .lease("deadline-wait")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let _holder = lease.attempt().await.unwrap().into_guard().unwrap();
    let start = Instant::now();
    let out = lease
        .attempt_within(Duration::from_millis(400))
        .await
        .unwrap();
    assert!(matches!(out, Attempt::Held { .. }));
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

pub async fn dropping_a_guard_releases_in_the_background(w: &Coordinator, _: &Timing) {
    let lease = w
        .lease("dropped")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    drop(lease.attempt().await.unwrap());
    let again = lease.attempt_within(Duration::from_secs(5)).await.unwrap();
    assert!(
        again.is_acquired(),
        "drop released the key long before its TTL"
    );
}

pub async fn sixty_four_tasks_lose_no_increment_and_fences_increase(w: &Coordinator, _: &Timing) {
    // A deliberately racy read-modify-write: without the lease it loses updates.
    let counter = Arc::new(tokio::sync::Mutex::new(0u64));
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let lease = w
            .lease("counter")
            .watchdog(false)
            .ttl(Duration::from_secs(10));
        let (counter, log) = (Arc::clone(&counter), Arc::clone(&log));
        tasks.push(tokio::spawn(async move {
            let guard = lease
                .attempt_within(Duration::from_secs(60))
                .await
                .unwrap()
                .into_guard()
                .expect("acquired within a minute");
            let seen = *counter.lock().await;
            tokio::task::yield_now().await;
            *counter.lock().await = seen + 1;
            log.lock().unwrap().push((seen, guard.fence()));
            guard.release().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*counter.lock().await, 64, "an increment was lost");
    let mut log = log.lock().unwrap().clone();
    log.sort();
    for pair in log.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "fences must increase in acquisition order: {pair:?}"
        );
    }
}

pub async fn run_cancels_work_when_the_lease_is_lost(w: &Coordinator, t: &Timing) {
    let guard = w
        .lease("run")
        .watchdog(false)
        .ttl(t.short)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let out = guard
        .run(async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "finished"
        })
        .await;
    assert!(matches!(out, Err(Error::LeaseLost { .. })), "{out:?}");
    let quick = w.lease("run2").watchdog(false).attempt().await.unwrap();
    let guard = quick.into_guard().unwrap();
    assert_eq!(guard.run(async { 7 }).await.unwrap(), 7);
}

pub async fn bad_input_is_a_clear_error(w: &Coordinator, _: &Timing) {
    let err = w.lease("").watchdog(false).attempt().await.unwrap_err();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
    let huge = "k".repeat(5000);
    let err = w.lease(huge).watchdog(false).attempt().await.unwrap_err();
    assert!(err.to_string().contains("5000 bytes"), "{err}");
    let err = w
        .lease("zero")
        .watchdog(false)
        .ttl(Duration::ZERO)
        .attempt()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ttl"), "{err}");
    let err = w
        .lease("forever")
        .watchdog(false)
        .ttl(Duration::MAX)
        .attempt_within(Duration::MAX)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { what: "ttl", .. }),
        "{err}"
    );
    let err = w
        .lease("renew")
        .watchdog(false)
        .ttl(Duration::from_secs(1))
        .renew_every(Duration::from_secs(2))
        .attempt()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("renewal interval"), "{err}");
    assert!(w.status("").await.is_err());
}

/// Issue 9, item 6: a TTL eaten up by the drift margin, or a renewal interval
/// longer than the validity, is refused before anything is written.
pub async fn a_ttl_or_renewal_that_leaves_no_validity_is_refused(w: &Coordinator, _: &Timing) {
    use tenure::lease::MIN_TTL;
    for ms in [1, 2, 3, 9] {
        let err = w
            .lease("short")
            .watchdog(false)
            .ttl(Duration::from_millis(ms))
            .attempt()
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { what: "ttl", .. }),
            "{ms} ms: {err}"
        );
        let err = w
            .lease("short")
            .watchdog(false)
            .ttl(Duration::from_millis(ms))
            .attempt_within(Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { what: "ttl", .. }),
            "{ms} ms: {err}"
        );
    }
    let status = w.status("short").await.unwrap();
    assert!(!status.held && status.fence.is_none(), "{status:?}");

    // The shortest accepted TTL still leaves validity after the drift margin
    // (etcd holds it a whole second; the holder counts from the TTL asked for).
    // A quorum whose votes take longer than that validity on a loaded machine
    // reports the attempt as not won (the validity is gone), so it is tried a
    // few times: what is checked is that the TTL is accepted and, once won,
    // never counted as more than asked for.
    let mut won = None;
    for _ in 0..50 {
        match w
            .lease("shortest")
            .watchdog(false)
            .ttl(MIN_TTL)
            .attempt()
            .await
        {
            Ok(reply) => won = reply.into_guard(),
            // Votes not all back within that validity: unavailable, not bad input.
            Err(e) => assert!(e.is_transient(), "{e}"),
        }
        if won.is_some() {
            break;
        }
        tokio::time::sleep(MIN_TTL).await;
    }
    let guard = won.expect("a lease of MIN_TTL is won within 50 attempts");
    assert!(guard.remaining() <= MIN_TTL);
    drop(guard);

    // 1 s leaves 988 ms after the drift margin: renewing every 990 ms would
    // report the lease lost before the first renewal.
    let err = w
        .lease("renew-late")
        .watchdog(false)
        .ttl(Duration::from_secs(1))
        .renew_every(Duration::from_millis(990))
        .attempt()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("renewal interval"), "{err}");
    let guard = w
        .lease("renew-late")
        .watchdog(false)
        .ttl(Duration::from_secs(1))
        .renew_every(Duration::from_millis(900))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    guard.release().await.unwrap();
}

/// A lease that records its holder shows host, process, label and how long it
/// has been held to anyone reading its status, keeps it through renewals, and
/// takes it along when released; a lease that records nothing shows none.
pub async fn holder_is_recorded_read_by_anyone_and_released_with_the_lease(
    w: &Coordinator,
    _t: &Timing,
) {
    let ttl = Duration::from_secs(30);
    let lease = w
        .lease("holder:labelled")
        .watchdog(false)
        .ttl(ttl)
        .label("POST /orders/42");
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    let status = w.status("holder:labelled").await.unwrap();
    assert!(status.held);
    let holder = status.holder.expect("the holder was recorded");
    let me = tenure::HolderInfo::this_process();
    assert_eq!(
        (holder.host.as_str(), holder.pid),
        (me.host.as_str(), me.pid)
    );
    assert_eq!(holder.label.as_deref(), Some("POST /orders/42"));
    let held = holder.held_for.expect("an acquisition time");
    assert!(held < Duration::from_secs(20), "held for {held:?}");
    assert!(matches!(
        guard.extend().await.unwrap(),
        ExtendOutcome::Extended { .. }
    ));
    let renewed = w.status("holder:labelled").await.unwrap().holder;
    assert_eq!(
        renewed.and_then(|h| h.label),
        Some("POST /orders/42".to_string()),
        "a renewal keeps the record"
    );
    guard.release().await.unwrap();
    let free = w.status("holder:labelled").await.unwrap();
    assert!(!free.held && free.holder.is_none(), "{free:?}");

    // Recording without a label, and not recording at all.
    let plain = w
        .lease("holder:labelled")
        .watchdog(false)
        .ttl(ttl)
        .record_holder(true);
    let guard = plain.attempt().await.unwrap().into_guard().unwrap();
    let holder = w.status("holder:labelled").await.unwrap().holder.unwrap();
    assert_eq!((holder.pid, holder.label), (me.pid, None));
    guard.release().await.unwrap();
    let silent = w.lease("holder:labelled").watchdog(false).ttl(ttl);
    let guard = silent.attempt().await.unwrap().into_guard().unwrap();
    let status = w.status("holder:labelled").await.unwrap();
    assert!(status.held && status.holder.is_none(), "{status:?}");
    guard.release().await.unwrap();

    // A bad label is refused by name before anything is written.
    let bad = w
        .lease("holder:labelled")
        .watchdog(false)
        .label("two\nlines");
    match bad.attempt().await {
        Err(Error::InvalidArgument { what: "label", .. }) => {}
        other => panic!("expected an invalid label, got {other:?}"),
    }
    assert!(!w.status("holder:labelled").await.unwrap().held);
}

/// A holder's record ends with its lease when the TTL runs out.
pub async fn holder_record_expires_with_the_lease(w: &Coordinator, t: &Timing) {
    let lease = w
        .lease("holder:expiring")
        .watchdog(false)
        .ttl(t.short)
        .label("short");
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(w.status("holder:expiring").await.unwrap().holder.is_some());
    until_expired(w, "holder:expiring", t).await;
    drop(guard);
    let status = w.status("holder:expiring").await.unwrap();
    assert!(status.holder.is_none(), "{status:?}");
    // The next holder that records nothing is not shown the old record.
    let next = w
        .lease("holder:expiring")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let guard = next.attempt().await.unwrap().into_guard().unwrap();
    let status = w.status("holder:expiring").await.unwrap();
    assert!(status.held && status.holder.is_none(), "{status:?}");
    guard.release().await.unwrap();
}

/// `list` shows the held leases under a prefix, in key order, with their
/// holders; a store that cannot list says so with a configuration error.
pub async fn list_shows_the_held_leases_under_a_prefix(w: &Coordinator, _t: &Timing) {
    let ttl = Duration::from_secs(30);
    let b = w
        .lease("ls:b")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap();
    let a = w
        .lease("ls:a")
        .watchdog(false)
        .ttl(ttl)
        .label("first")
        .attempt()
        .await;
    let other = w
        .lease("lx")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap();
    let free = w
        .lease("ls:c")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap();
    free.into_guard().unwrap().release().await.unwrap();
    let listed = match w.list("ls:").await {
        Ok(listed) => listed,
        Err(Error::Config { reason, .. }) => {
            assert!(reason.contains("cannot list"), "{reason}");
            return;
        }
        Err(e) => panic!("list failed: {e}"),
    };
    let keys: Vec<&str> = listed.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["ls:a", "ls:b"]);
    assert!(listed.iter().all(|(_, s)| s.held && s.ttl_left.is_some()));
    assert_eq!(
        listed[0].1.holder.as_ref().and_then(|h| h.label.as_deref()),
        Some("first")
    );
    assert!(listed[1].1.holder.is_none());
    a.unwrap().into_guard().unwrap().release().await.unwrap();
    let keys: Vec<String> = w
        .list("ls:")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["ls:b"]);
    assert_eq!(w.list("").await.unwrap().len(), 2, "every held lease");
    drop((b, other));
}

/// A waiter that gets the lease (handed over on release, or after the TTL)
/// records itself, not the previous holder.
pub async fn a_waiter_that_gets_the_lease_records_itself(w: &Coordinator, _t: &Timing) {
    let ttl = Duration::from_secs(30);
    let first = w
        .lease("holder:handoff")
        .watchdog(false)
        .ttl(ttl)
        .label("first");
    let guard = first.attempt().await.unwrap().into_guard().unwrap();
    let waiter = {
        let lease = w
            .lease("holder:handoff")
            .watchdog(false)
            .ttl(ttl)
            .label("second");
        tokio::spawn(async move { lease.attempt_within(Duration::from_secs(10)).await })
    };
    // Let the waiter stand in line before the release.
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    let second = waiter
        .await
        .unwrap()
        .unwrap()
        .into_guard()
        .expect("handed over");
    let holder = w.status("holder:handoff").await.unwrap().holder;
    assert_eq!(holder.and_then(|h| h.label).as_deref(), Some("second"));
    second.release().await.unwrap();
}
