//! Several keys at once (`Coordinator::lease_all`): 20 holders asking for
//! random overlapping sets in random orders on every store — no key ever has
//! two holders, nobody deadlocks, nothing is left held — and the same on one
//! Redis behind the fault proxy; then what a set gives back on every way out.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Fixture;
use tenure::{Coordinator, Error, ExtendOutcome, ReleaseOutcome};
use tenure_test::nemesis::Rng;
use tenure_test::{Proxy, RedisCluster, RedisServer};
use tokio::time::Instant;

/// The keys the holders draw from: few, so that sets overlap often.
const KEYS: [&str; 6] = ["set:a", "set:b", "set:c", "set:d", "set:e", "set:f"];

/// How many holders run at once.
const HOLDERS: usize = 20;

/// One holder's hold of one key: from when its acquire returned to when it
/// began releasing, and whether its guard still held the lease at the end.
#[derive(Debug, Clone)]
struct Hold {
    holder: usize,
    fence: u64,
    start: Instant,
    end: Instant,
    valid: bool,
}

/// The shared checker: every hold of every key.
#[derive(Default)]
struct Checker {
    holds: Mutex<HashMap<String, Vec<Hold>>>,
}

impl Checker {
    fn record(&self, key: &str, hold: Hold) {
        let mut holds = self.holds.lock().unwrap();
        holds.entry(key.to_string()).or_default().push(hold);
    }

    /// No two valid holds of one key overlap, and fences grow with time.
    /// Returns how many holds were valid, and how many there were.
    fn verify(&self) -> (usize, usize) {
        let holds = self.holds.lock().unwrap();
        let (mut valid, mut total) = (0, 0);
        for (key, list) in holds.iter() {
            total += list.len();
            let mut list: Vec<&Hold> = list.iter().filter(|h| h.valid).collect();
            list.sort_by_key(|h| h.start);
            for pair in list.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                assert!(
                    b.start >= a.end,
                    "{key}: holder {} (fence {}) and holder {} (fence {}) held it at once",
                    a.holder,
                    a.fence,
                    b.holder,
                    b.fence
                );
                assert!(
                    b.fence > a.fence,
                    "{key}: fence {} after {}",
                    b.fence,
                    a.fence
                );
            }
            valid += list.len();
        }
        (valid, total)
    }
}

/// 2 to 4 distinct keys in a random order.
fn random_set(rng: &mut Rng) -> Vec<&'static str> {
    let mut keys: Vec<&str> = KEYS.to_vec();
    let n = 2 + usize::try_from(rng.below(3)).unwrap();
    for i in 0..n {
        let j = i + usize::try_from(rng.below((KEYS.len() - i) as u64)).unwrap();
        keys.swap(i, j);
    }
    keys.truncate(n);
    keys
}

/// One holder: `rounds` sets, each held a few milliseconds.
async fn holder(
    w: Coordinator,
    id: usize,
    seed: u64,
    rounds: usize,
    ttl: Duration,
    c: Arc<Checker>,
) {
    let mut rng = Rng::new(seed);
    for _ in 0..rounds {
        let set = random_set(&mut rng);
        let guard = w
            .lease_all(set.iter().copied())
            .ttl(ttl)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("holder {id} {set:?}: {e}"));
        let start = Instant::now();
        assert_eq!(guard.keys().count(), set.len());
        tokio::time::sleep(rng.between(Duration::ZERO, Duration::from_millis(10))).await;
        let end = Instant::now();
        // Checked after `end`: a guard not lost now held its keys until then.
        let valid = !guard.is_lost();
        for (key, fence) in guard.fences() {
            let hold = Hold {
                holder: id,
                fence: fence.get(),
                start,
                end,
                valid,
            };
            c.record(key, hold);
        }
        let _ = guard.release().await;
    }
}

/// Runs [`HOLDERS`] holders of `rounds` sets each within `budget`, then checks
/// the holds and that every key is free; returns how many holds were lost
/// (and so not counted).
async fn twenty_holders(w: &Coordinator, rounds: usize, ttl: Duration, budget: Duration) -> usize {
    let seed = std::env::var("LEASE_SET_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()));
    eprintln!("seed {seed} (set LEASE_SET_SEED to replay)");
    let mut rng = Rng::new(seed);
    let checker = Arc::new(Checker::default());
    let tasks: Vec<_> = (0..HOLDERS)
        .map(|id| {
            let task = holder(
                w.clone(),
                id,
                rng.next_u64(),
                rounds,
                ttl,
                Arc::clone(&checker),
            );
            tokio::spawn(task)
        })
        .collect();
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(budget, all)
        .await
        .unwrap_or_else(|_| panic!("the holders did not finish within {budget:?}: deadlock?"));
    let (valid, total) = checker.verify();
    assert!(total >= HOLDERS * rounds * 2, "{total} holds");
    for key in KEYS {
        assert!(common::freed(w, key).await, "{key} is left held");
    }
    total - valid
}

macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        contract!($($name),*);
        mod cluster_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let cluster = tenure_test::RedisCluster::start(3);
                    let fx = super::cluster_fixture(&cluster).await;
                    super::$name(&fx).await;
                }
            )*
        }
    };
}

async fn cluster_fixture(cluster: &RedisCluster) -> Fixture {
    Fixture {
        tenure: Coordinator::connect(&cluster.url()).await.unwrap(),
        server: None,
        dir: None,
        nodes: Vec::new(),
    }
}

on_every_store!(
    twenty_holders_of_overlapping_sets_never_overlap_nor_deadlock,
    a_refused_set_gives_back_what_it_took,
    a_dropped_acquire_gives_back_what_it_took,
    bad_input_takes_nothing,
    a_set_is_lost_when_any_key_is,
);

async fn twenty_holders_of_overlapping_sets_never_overlap_nor_deadlock(fx: &Fixture) {
    let lost = twenty_holders(
        &fx.tenure,
        4,
        Duration::from_secs(5),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(lost, 0, "holds lost without a fault");
}

async fn a_refused_set_gives_back_what_it_took(fx: &Fixture) {
    let w = &fx.tenure;
    let other = w.lease("gb:z").try_acquire().await.unwrap().unwrap();
    // "gb:a" comes first in the canonical order: taken, then given back.
    assert!(
        w.lease_all(["gb:z", "gb:a"])
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !w.status("gb:a").await.unwrap().held,
        "gb:a kept after a refusal"
    );
    let busy = w
        .lease_all(["gb:z", "gb:a"])
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(&busy, Error::Busy { key, .. } if key == "gb:z"),
        "{busy}"
    );
    assert!(
        !w.status("gb:a").await.unwrap().held,
        "gb:a kept after a timeout"
    );
    other.release().await.unwrap();
    let both = w
        .lease_all(["gb:z", "gb:a", "gb:z"])
        .try_acquire()
        .await
        .unwrap();
    let both = both.expect("free now");
    assert_eq!(both.keys().collect::<Vec<_>>(), ["gb:a", "gb:z"]);
    assert_eq!(both.release().await.unwrap(), ReleaseOutcome::Released);
}

async fn a_dropped_acquire_gives_back_what_it_took(fx: &Fixture) {
    let w = &fx.tenure;
    let other = w.lease("drop:z").try_acquire().await.unwrap().unwrap();
    let set = w.lease_all(["drop:z", "drop:a"]);
    // Cut short while holding "drop:a" and waiting for "drop:z".
    let cut = tokio::time::timeout(Duration::from_millis(500), set.acquire()).await;
    assert!(cut.is_err(), "acquired a held key");
    assert!(
        common::freed(w, "drop:a").await,
        "drop:a kept after a dropped acquire"
    );
    other.release().await.unwrap();
    let guard = set.acquire_timeout(Duration::from_secs(5)).await.unwrap();
    guard.release().await.unwrap();
}

async fn bad_input_takes_nothing(fx: &Fixture) {
    let w = &fx.tenure;
    let none: [&str; 0] = [];
    let empty = w.lease_all(none).try_acquire().await.unwrap_err();
    assert!(matches!(empty, Error::InvalidArgument { .. }), "{empty}");
    let bad = w.lease_all(["bad:a", ""]).try_acquire().await.unwrap_err();
    assert!(matches!(bad, Error::InvalidKey { .. }), "{bad}");
    assert!(!w.status("bad:a").await.unwrap().held);
}

async fn a_set_is_lost_when_any_key_is(fx: &Fixture) {
    let w = &fx.tenure;
    let guard = w.lease_all(["lost:a", "lost:b"]).acquire().await.unwrap();
    assert!(!guard.is_lost());
    let fence_b = guard.fence("lost:b").unwrap();
    assert!(guard.fence("lost:c").is_none());
    match w.force_release("lost:b").await {
        Ok(_) => {}
        // A quorum cannot read the holder's token: take the key over instead.
        Err(Error::Config { .. }) => return,
        Err(e) => panic!("{e}"),
    }
    let next = w.lease("lost:b").try_acquire().await.unwrap().unwrap();
    assert!(next.fence() > fence_b);
    assert_eq!(guard.extend().await.unwrap(), ExtendOutcome::NotHeld);
    assert!(guard.is_lost());
    assert_eq!(guard.loss_cause(), Some(tenure::LossCause::NotHeld));
    tokio::time::timeout(Duration::from_secs(1), guard.lost().wait())
        .await
        .expect("the set's signal fires");
    let ran = guard.run(std::future::pending::<()>()).await;
    assert!(
        matches!(&ran, Err(Error::LeaseLost { key }) if key == "lost:b"),
        "{ran:?}"
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert!(!w.status("lost:a").await.unwrap().held);
    next.release().await.unwrap();
}

/// The same 20 holders on one Redis behind the fault proxy: latency with
/// jitter throughout, and the link cut for 100–300 ms now and then (shorter
/// than the validity, so renewals get through between cuts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_holders_under_proxy_faults_never_overlap_nor_deadlock() {
    let server = RedisServer::start();
    let proxy = Arc::new(Proxy::start(&server.addr()));
    let backend = tenure::redis::RedisStore::connect(
        &proxy.url(),
        tenure::redis::RedisOptions::default().timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    let w = Coordinator::with_backend(backend);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let nemesis = {
        let (proxy, stop) = (Arc::clone(&proxy), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut rng = Rng::new(7);
            let mut cuts = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                proxy.latency(
                    rng.between(Duration::ZERO, Duration::from_millis(20)),
                    Duration::from_millis(10),
                );
                tokio::time::sleep(
                    rng.between(Duration::from_millis(200), Duration::from_millis(600)),
                )
                .await;
                if rng.percent(40) {
                    proxy.cut();
                    tokio::time::sleep(
                        rng.between(Duration::from_millis(100), Duration::from_millis(300)),
                    )
                    .await;
                    proxy.restore();
                    cuts += 1;
                }
            }
            proxy.latency(Duration::ZERO, Duration::ZERO);
            proxy.restore();
            cuts
        })
    };
    let lost = twenty_holders(&w, 4, Duration::from_secs(3), Duration::from_secs(180)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let cuts = nemesis.await.unwrap();
    eprintln!("{cuts} cuts, {lost} holds lost");
    assert!(cuts > 0, "no fault was injected");
}

#[cfg(feature = "etcd")]
mod etcd_store {
    use super::*;

    /// etcd counts TTLs in whole seconds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn twenty_holders_of_overlapping_sets_never_overlap_nor_deadlock() {
        let etcd = tenure_test::EtcdCluster::single();
        let w = Coordinator::connect(&etcd.url()).await.unwrap();
        let lost = twenty_holders(&w, 4, Duration::from_secs(5), Duration::from_secs(180)).await;
        assert_eq!(lost, 0, "holds lost without a fault");
    }
}
