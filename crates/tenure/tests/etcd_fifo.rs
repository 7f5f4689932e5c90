//! Waiting is first-in-first-out on etcd: each waiter stands in line with a
//! key of its own (`tenure/lease/KEY\0line\0TOKEN`, bound to an etcd lease of
//! its own) whose create revision is its place, and only the first in line
//! takes a free lease. A waiter that disappears is skipped: at once when it
//! left the line, after its TTL when it was killed. A plain attempt does not
//! jump a line.

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)]

mod etcd_admin;
mod fifo_common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_admin::Admin;
use tenure::etcd::{EtcdOptions, EtcdStore};
use tenure::{Attempt, Coordinator};
use tenure_test::EtcdCluster;
use tokio::time::Instant;

async fn connect(url: &str) -> Coordinator {
    let options = EtcdOptions::default().timeout(Duration::from_secs(2));
    Coordinator::with_backend(EtcdStore::connect(url, options).await.unwrap())
}

/// A client of our own, to look at (and plant) keys.
async fn client(etcd: &EtcdCluster) -> Admin {
    Admin::connect(&etcd.member(0).addr()).await
}

/// The prefix of the places in the waiting line of `key`.
fn line_of(key: &str) -> String {
    format!("tenure/lease/{key}\0line\0")
}

/// How many stand in line for `key`.
async fn in_line(c: &mut Admin, key: &str) -> i64 {
    c.count_prefix(&line_of(key)).await
}

/// Waits (up to 10 s) until `n` waiters stand in line for `key`.
async fn until_in_line(c: &mut Admin, key: &str, n: i64) {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let now = in_line(c, key).await;
        if now == n {
            return;
        }
        assert!(Instant::now() < give_up, "{now} in line, not {n}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The places in line for `key`, for the shared waiting-line bodies.
async fn counted(c: &Admin, key: &str) -> usize {
    usize::try_from(in_line(&mut c.clone(), key).await).unwrap()
}

/// Whether the lease key of `key` exists.
async fn exists(c: &mut Admin, key: &str) -> bool {
    c.exists(&format!("tenure/lease/{key}")).await
}

/// The number of requests etcd has started for gRPC `method`, from its
/// `/metrics` page.
fn started(etcd: &EtcdCluster, method: &str) -> u64 {
    let mut stream = std::net::TcpStream::connect(etcd.member(0).addr()).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    let needle = format!("grpc_method=\"{method}\"");
    page.lines()
        .filter(|l| l.starts_with("grpc_server_started_total{") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// etcd's gauge of its open watchers, from its `/metrics` page.
fn watchers(etcd: &EtcdCluster) -> u64 {
    let mut stream = std::net::TcpStream::connect(etcd.member(0).addr()).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    page.lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Starts `n` waiters on `lease` one after the other, each once the one
/// before it stands in line; each records its turn and fence and releases it.
async fn queue_waiters(lease: &tenure::Lease, c: &Admin, n: usize) -> fifo_common::Line {
    let count = || counted(c, lease.key());
    let within = Duration::from_secs(30);
    fifo_common::stand_in_line(lease, n, within, &count, |guard| async move { guard }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lease_in_the_order_they_stood_in_line() {
    let etcd = EtcdCluster::single();
    let (tenure, mut c) = (connect(&etcd.url()).await, client(&etcd).await);
    let (lease, holder) = fifo_common::held(&tenure, "fifo").await;
    const WAITERS: usize = 8;
    let line = queue_waiters(&lease, &c, WAITERS).await;
    let status = tenure.status("fifo").await.unwrap();
    assert_eq!(status.waiters, Some(WAITERS as u64), "{status:?}");
    line.served_in_order(holder).await;
    assert_eq!(in_line(&mut c, "fifo").await, 0, "nobody is left in line");
    assert!(
        !exists(&mut c, "fifo").await,
        "the last release deleted the key"
    );
}

/// A hand-off wakes only the next waiter: the transactions of eight
/// hand-offs are about two each (the release, the next waiter's look), where
/// waking every waiter to race would cost one per waiter per hand-off
/// (8 + 7 + … + 1 looks, plus the releases: 44).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_costs_the_release_and_one_look() {
    let etcd = EtcdCluster::single();
    let (tenure, c) = (connect(&etcd.url()).await, client(&etcd).await);
    let (lease, holder) = fifo_common::held(&tenure, "cost").await;
    const WAITERS: usize = 8;
    let waiters = queue_waiters(&lease, &c, WAITERS).await.waiters;
    let methods = [
        "Txn",
        "LeaseGrant",
        "LeaseKeepAlive",
        "LeaseRevoke",
        "Watch",
    ];
    let before: Vec<u64> = methods.iter().map(|m| started(&etcd, m)).collect();
    let released = Instant::now();
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    let spent = released.elapsed();
    let spent_rpcs: Vec<String> = methods
        .iter()
        .zip(&before)
        .map(|(m, b)| format!("{m} {}", started(&etcd, m) - b))
        .collect();
    let txns = started(&etcd, "Txn") - before[0];
    // Each waiter also looks on its own once a second while it waits.
    let periodic = WAITERS as u64 * (spent.as_secs() + 1);
    let handoffs = WAITERS as u64;
    println!(
        "{handoffs} hand-offs in {spent:?}: {}",
        spent_rpcs.join(", ")
    );
    assert!(
        txns <= 2 * handoffs + 1 + periodic,
        "{txns} transactions for {handoffs} hand-offs in {spent:?}"
    );
}

/// The waiters of one process share one etcd watch of their line, so a
/// change of the line reaches the process once, not once per waiter; and
/// since the watch is open before a later waiter's first look, that look
/// stands it in line: one transaction each (a watch of its own, opened after
/// the first refusal, would need a second look).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_process_share_one_watch_and_stand_with_one_look() {
    let etcd = EtcdCluster::single();
    let (tenure, mut c) = (connect(&etcd.url()).await, client(&etcd).await);
    let (lease, holder) = fifo_common::held(&tenure, "shared").await;
    // The first waiter watches the line (and looks once more).
    let watches = started(&etcd, "Watch");
    let mut waiters = vec![fifo_common::spawn_wait(&lease)];
    until_in_line(&mut c, "shared", 1).await;
    let give_up = Instant::now() + Duration::from_secs(10);
    while started(&etcd, "Watch") == watches {
        assert!(Instant::now() < give_up, "the first waiter never watched");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    const LATER: usize = 7;
    let before = (started(&etcd, "Watch"), started(&etcd, "Txn"));
    for i in 1..=LATER {
        waiters.push(fifo_common::spawn_wait(&lease));
        until_in_line(&mut c, "shared", i as i64 + 1).await;
    }
    let watches = started(&etcd, "Watch") - before.0;
    let txns = started(&etcd, "Txn") - before.1;
    println!("{LATER} later waiters stood in line: {watches} Watch, {txns} Txn");
    assert_eq!(watches, 0, "the later waiters share the first one's watch");
    // A watch of its own, opened after the first look, would need a second.
    assert!(
        txns <= LATER as u64,
        "{txns} transactions for {LATER} waiters"
    );
    holder.release().await.unwrap();
    let mut last = None;
    for (i, w) in waiters.into_iter().enumerate() {
        let out = tokio::time::timeout(Duration::from_secs(10), w).await;
        let guard = out
            .unwrap_or_else(|_| panic!("waiter {i} was not served in its turn"))
            .unwrap()
            .unwrap()
            .into_guard()
            .expect("acquired");
        assert!(Some(guard.fence()) > last, "fences rise");
        last = Some(guard.fence());
        guard.release().await.unwrap();
    }
    assert_eq!(in_line(&mut c, "shared").await, 0);
}

/// A watch ends on etcd when its waiters are gone: waits that end one after
/// the other, each with its own watch of the line, leave no etcd watcher
/// behind (one that stayed would be sent every later change of the line,
/// so each wait would make every later hand-off dearer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watches_of_ended_waits_end_on_etcd() {
    let etcd = EtcdCluster::single();
    let tenure = connect(&etcd.url()).await;
    let (lease, holder) = fifo_common::held(&tenure, "ended").await;
    let before = watchers(&etcd);
    for _ in 0..5 {
        let out = lease.attempt_within(Duration::from_millis(300)).await;
        assert!(matches!(out, Ok(Attempt::Held { .. })), "{out:?}");
    }
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let now = watchers(&etcd);
        if now <= before {
            break;
        }
        assert!(Instant::now() < give_up, "{now} watchers, {before} before");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder.release().await.unwrap();
}

/// Waiters that nothing concerns run no transactions: their heartbeat looks
/// are answered by their watches and only keep their etcd leases alive —
/// the places' lease of the process, shared, about four times a second
/// whatever the number of waiters, and each holder's etcd lease once a
/// quarter of its TTL; they are still served in order when the lease comes
/// free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waiters_do_not_ask_etcd_every_second() {
    let etcd = EtcdCluster::single();
    let (tenure, c) = (connect(&etcd.url()).await, client(&etcd).await);
    let (lease, holder) = fifo_common::held(&tenure, "idle").await;
    const WAITERS: usize = 4;
    let fifo_common::Line { waiters, turns } = queue_waiters(&lease, &c, WAITERS).await;
    // Past the looks that follow each waiter's first one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = (started(&etcd, "Txn"), started(&etcd, "LeaseKeepAlive"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let txns = started(&etcd, "Txn") - before.0;
    let keep_alives = started(&etcd, "LeaseKeepAlive") - before.1;
    println!("{WAITERS} idle waiters in 3 s: {txns} Txn, {keep_alives} LeaseKeepAlive");
    // Asking at every look would be a transaction per waiter per second (12).
    assert!(txns <= 2, "{txns} transactions");
    // A keep-alive of each waiter's own etcd leases at every heartbeat would
    // be about 4 × 2 × 4 × 3 = 96.
    assert!(keep_alives <= 16, "{keep_alives} keep-alives");
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    let order: Vec<usize> = turns.lock().unwrap().iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_is_skipped_at_once() {
    let etcd = EtcdCluster::single();
    let (tenure, c) = (connect(&etcd.url()).await, client(&etcd).await);
    let (lease, holder) = fifo_common::held(&tenure, "cancel").await;
    fifo_common::a_cancelled_waiter_leaves_the_line(&lease, holder, || counted(&c, "cancel")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_wait_ends_leaves_the_line() {
    let etcd = EtcdCluster::single();
    let (tenure, c) = (connect(&etcd.url()).await, client(&etcd).await);
    let (lease, holder) = fifo_common::held(&tenure, "budget").await;
    let within = Duration::from_millis(300);
    fifo_common::a_waiter_whose_wait_ends_leaves_the_line(
        &lease,
        holder,
        within,
        || counted(&c, "budget"),
        || async { !exists(&mut c.clone(), "budget").await },
    )
    .await;
}

/// A place whose waiter vanished without a trace, as a killed process leaves
/// it: a line key bound to an etcd lease of `ttl_secs`, which nobody renews.
async fn plant_a_dead_place(c: &mut Admin, key: &str, ttl_secs: i64) {
    let lease = c.lease_grant(ttl_secs).await;
    let place = format!("{}{}", line_of(key), "ab".repeat(16));
    c.put(&place, "", lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_attempt_does_not_jump_the_line_and_a_dead_head_frees_it_after_its_ttl() {
    let etcd = EtcdCluster::single();
    let (tenure, mut c) = (connect(&etcd.url()).await, client(&etcd).await);
    let lease = tenure
        .lease("jump")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    plant_a_dead_place(&mut c, "jump", 2).await;
    let planted = Instant::now();
    // The lease is free, but someone stands in line: no jumping it.
    match lease.attempt().await.unwrap() {
        Attempt::Held { ttl_left } => {
            let left = ttl_left.expect("the first waiter's TTL");
            assert!(left <= Duration::from_secs(3), "{left:?}");
        }
        Attempt::Acquired(_) => panic!("a plain attempt jumped the line"),
    }
    // A waiter stands behind the dead place and gets the lease once its
    // etcd lease (2 s, plus etcd's 500 ms expiry sweep) has run out.
    let guard = lease
        .attempt_within(Duration::from_secs(10))
        .await
        .unwrap()
        .into_guard()
        .expect("acquired after the dead place's TTL");
    let waited = planted.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert_eq!(in_line(&mut c, "jump").await, 0);
    guard.release().await.unwrap();
    assert!(lease.attempt().await.unwrap().is_acquired());
}

/// The TTL of the waiter that is killed: etcd's shortest.
const KILLED_TTL: Duration = Duration::from_secs(1);

/// Run in a child process by [`a_killed_waiter_is_skipped_after_its_ttl`]:
/// waits in line until killed.
#[tokio::test]
#[ignore = "run as a child process by a_killed_waiter_is_skipped_after_its_ttl"]
async fn killed_waiter_child() {
    let Ok(url) = std::env::var("TENURE_ETCD_FIFO_CHILD_URL") else {
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
    let etcd = EtcdCluster::single();
    let (tenure, c) = (connect(&etcd.url()).await, client(&etcd).await);
    let (lease, holder) = fifo_common::held(&tenure, "killed").await;
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["killed_waiter_child", "--exact", "--ignored", "--nocapture"])
        .env("TENURE_ETCD_FIFO_CHILD_URL", etcd.url())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The killed waiter stays first in line; its place goes with its etcd
    // lease (1 s, plus etcd's 500 ms expiry sweep), and its deletion wakes the
    // next.
    let dead = fifo_common::DeadPlace::ExpiresWithin(KILLED_TTL * 4);
    fifo_common::a_killed_waiter_is_skipped(&lease, holder, child, dead, || counted(&c, "killed"))
        .await;
}

/// Elections are leases: candidates are elected in the order they began
/// campaigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_are_elected_in_the_order_they_campaigned() {
    let etcd = EtcdCluster::single();
    let (tenure, mut c) = (connect(&etcd.url()).await, client(&etcd).await);
    let election = tenure.election("chair").ttl(Duration::from_secs(30));
    let first = election.try_campaign("first").await.unwrap().unwrap();
    let elected: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut candidates = Vec::new();
    for i in 0..4 {
        let (election, elected) = (election.clone(), Arc::clone(&elected));
        candidates.push(tokio::spawn(async move {
            let id = format!("cand-{i}");
            let office = election
                .campaign_timeout(&id, Duration::from_secs(30))
                .await
                .expect("elected");
            elected.lock().unwrap().push(id);
            office.resign().await.unwrap();
        }));
        until_in_line(&mut c, "chair", i + 1).await;
    }
    first.resign().await.unwrap();
    for cand in candidates {
        cand.await.unwrap();
    }
    let elected = elected.lock().unwrap().clone();
    assert_eq!(elected, ["cand-0", "cand-1", "cand-2", "cand-3"]);
}
