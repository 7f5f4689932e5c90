//! Quorum leases against real redis-server processes, with real faults: killed and
//! SIGSTOPped nodes, split votes, restarts with and without persistence.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use tenure::quorum::{NodeOutcome, QuorumOptions, QuorumStore};
use tenure::{Attempt, Coordinator, Error, LeaseGuard};
use tenure_test::{ClosedPort, RedisServer};
use tokio::time::Instant;

use common::{redis_get, start_nodes};

fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

fn quorum(nodes: &[RedisServer], node_timeout: Duration) -> Coordinator {
    let backend = QuorumStore::new(
        urls(nodes),
        QuorumOptions::default().node_timeout(node_timeout),
    )
    .unwrap();
    Coordinator::with_backend(backend)
}

/// The value of the lease key on one node (`None` when absent).
async fn owner_on(url: &str, key: &str) -> Option<String> {
    redis_get(url, &format!("tenure:{{{key}}}")).await
}

async fn owners(nodes: &[RedisServer], key: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for n in nodes {
        out.push(owner_on(&n.url(), key).await);
    }
    out
}

/// Polls the lease key on every node until `ok` holds (votes of nodes that had
/// not answered when an attempt was decided are undone in the background), or
/// gives up after 3 s — far below the 30 s TTL the tests use, so a key left
/// behind is caught.
async fn settle(
    nodes: &[RedisServer],
    key: &str,
    ok: impl Fn(&[Option<String>]) -> bool,
) -> Vec<Option<String>> {
    let give_up = Instant::now() + Duration::from_secs(3);
    loop {
        let seen = owners(nodes, key).await;
        if ok(&seen) || Instant::now() > give_up {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_two_down_still_grant_leases_with_increasing_fences() {
    let mut nodes = start_nodes(5);
    nodes[1].kill();
    nodes[3].pause();
    let tenure = quorum(&nodes, Duration::from_millis(300));
    let lease = tenure
        .lease("two-down")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let mut last = None;
    for _ in 0..3 {
        let guard = lease
            .attempt()
            .await
            .unwrap()
            .into_guard()
            .expect("three of five nodes are a majority");
        assert!(last.is_none_or(|l| guard.fence() > l));
        last = Some(guard.fence());
        assert!(matches!(
            guard.extend().await.unwrap(),
            tenure::ExtendOutcome::Extended { .. }
        ));
        guard.release().await.unwrap();
    }
    nodes[3].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_three_down_never_grant_and_name_every_node() {
    // Nodes 0 and 2 are down: ports held closed, so no other test's server can
    // take them (as it could a killed server's) while this one runs.
    let up = start_nodes(3);
    let down = [ClosedPort::new(), ClosedPort::new()];
    up[2].pause();
    let urls = [
        down[0].redis_url(),
        up[0].url(),
        down[1].redis_url(),
        up[1].url(),
        up[2].url(),
    ];
    let node_timeout = Duration::from_millis(300);
    let backend = QuorumStore::new(
        urls.clone(),
        QuorumOptions::default().node_timeout(node_timeout),
    )
    .unwrap();
    let tenure = Coordinator::with_backend(backend);
    let lease = tenure
        .lease("three-down")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let give_up = Instant::now() + Duration::from_secs(1);
    let mut attempts = 0;
    while Instant::now() < give_up {
        let start = Instant::now();
        let max_wait = Duration::from_secs(2);
        // One attempt: a waiter (acquire_within) would retry an unavailable
        // quorum until its budget is spent, since nodes may come back.
        let err = match lease.attempt().await {
            Ok(Attempt::Acquired(_)) => panic!("a lease was granted by a minority"),
            Ok(Attempt::Held { .. }) => panic!("a minority must not look like contention"),
            Err(e) => e,
        };
        let took = start.elapsed();
        assert!(took < max_wait, "took {took:?}");
        attempts += 1;
        let Error::QuorumUnavailable {
            needed, ref votes, ..
        } = err
        else {
            panic!("expected a quorum error, got {err}");
        };
        assert_eq!(needed, 3);
        assert_eq!(votes.len(), 5);
        let msg = err.to_string();
        for url in &urls {
            assert!(msg.contains(url.as_str()), "{msg} names {url}");
        }
        assert!(
            matches!(votes[0].outcome, NodeOutcome::Unreachable { .. }),
            "{msg}"
        );
        assert!(
            matches!(votes[4].outcome, NodeOutcome::TimedOut { .. }),
            "{msg}"
        );
        assert_eq!(votes[1].outcome, NodeOutcome::Granted, "{msg}");
        // The minority's votes were undone.
        assert_eq!(owner_on(&up[0].url(), "three-down").await, None);
        assert_eq!(owner_on(&up[1].url(), "three-down").await, None);
    }
    assert!(attempts >= 2);
    up[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_does_not_slow_down_acquire_extend_or_release() {
    let nodes = start_nodes(3);
    // A node timeout far above what a healthy majority needs: waiting for the
    // frozen node even once would show.
    let node_timeout = Duration::from_secs(3);
    let tenure = quorum(&nodes, node_timeout);
    let lease = tenure
        .lease("frozen")
        .watchdog(false)
        .ttl(Duration::from_secs(20));
    // Connect to every node first, then freeze one.
    let warm_up = lease.attempt().await.unwrap().into_guard().unwrap();
    warm_up.release().await.unwrap();
    // The warm-up opened every connection; a vote that went out while a
    // connection was still being established can land after the release and is
    // undone in the background: start from a clean slate.
    let key = lease.key().to_string();
    settle(&nodes, &key, |s| s.iter().all(Option::is_none)).await;
    nodes[2].pause();
    for _ in 0..3 {
        let start = Instant::now();
        let guard = lease.attempt().await.unwrap().into_guard().unwrap();
        let _ = guard.extend().await.unwrap();
        guard.release().await.unwrap();
        let took = start.elapsed();
        assert!(took < node_timeout, "acquire+extend+release took {took:?}");
    }
    nodes[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_vote_ten_clients_at_most_one_holder_and_no_keys_left() {
    let nodes = start_nodes(3);
    let clients: Vec<Coordinator> = (0..10)
        .map(|_| quorum(&nodes, Duration::from_millis(500)))
        .collect();
    let mut rounds_without_winner = 0;
    for round in 0..15 {
        let key = format!("split-{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let mut tasks = Vec::new();
        for w in &clients {
            let lease = w
                .lease(key.clone())
                .watchdog(false)
                .ttl(Duration::from_secs(30));
            let barrier = Arc::clone(&barrier);
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                lease.attempt().await.unwrap().into_guard()
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            winners.extend(t.await.unwrap());
        }
        assert!(
            winners.len() <= 1,
            "round {round}: {} holders",
            winners.len()
        );
        let one_owner = |seen: &[Option<String>]| {
            let present: Vec<&String> = seen.iter().flatten().collect();
            present.iter().all(|o| *o == present[0])
        };
        match winners.pop() {
            None => {
                rounds_without_winner += 1;
                let seen = settle(&nodes, &key, |s| s.iter().all(Option::is_none)).await;
                assert!(
                    seen.iter().all(Option::is_none),
                    "round {round}: losers left {seen:?}"
                );
            }
            Some(guard) => {
                let seen = settle(&nodes, &key, one_owner).await;
                assert!(
                    one_owner(&seen),
                    "round {round}: keys of several owners {seen:?}"
                );
                assert!(
                    seen.iter().flatten().count() >= 2,
                    "round {round}: {seen:?}"
                );
                guard.release().await.unwrap();
                let seen = settle(&nodes, &key, |s| s.iter().all(Option::is_none)).await;
                assert!(seen.iter().all(Option::is_none), "round {round}: {seen:?}");
            }
        }
    }
    println!("rounds without a winner (split votes): {rounds_without_winner} of 15");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_strictly_increase_while_minority_nodes_are_killed_and_restarted() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let nodes: Vec<RedisServer> = (0..5)
        .map(|_| RedisServer::builder().persistent(true).start())
        .collect();
    let tenure = quorum(&nodes, Duration::from_millis(300));
    let nodes = Arc::new(std::sync::Mutex::new(nodes));
    let stop = Arc::new(AtomicBool::new(false));
    let restarts = Arc::new(AtomicUsize::new(0));
    // Chaos: kill -9 one or two random nodes (a minority of five), keep them down
    // a little, start them again on the same data directory; repeat.
    let chaos = {
        let (nodes, stop, restarts) = (nodes.clone(), stop.clone(), restarts.clone());
        std::thread::spawn(move || {
            use rand::Rng;
            use rand::seq::index::sample;
            let mut rng = rand::rng();
            while !stop.load(Ordering::SeqCst) {
                let how_many = rng.random_range(1..=2);
                let victims = sample(&mut rng, 5, how_many);
                for v in victims.iter() {
                    nodes.lock().unwrap()[v].kill();
                }
                std::thread::sleep(Duration::from_millis(rng.random_range(30..150)));
                for v in victims.iter() {
                    nodes.lock().unwrap()[v].start_again();
                    restarts.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // A node killed before our release comes back with our key: a short TTL
    // frees it soon.
    let lease = tenure
        .lease("chaos")
        .watchdog(false)
        .ttl(Duration::from_millis(500));
    let (mut fences, mut refused, mut errors) = (Vec::with_capacity(1000), 0, 0);
    let give_up = Instant::now() + Duration::from_secs(120);
    while fences.len() < 1000 {
        assert!(
            Instant::now() < give_up,
            "only {} acquisitions in 120 s",
            fences.len()
        );
        match lease.attempt().await {
            Ok(Attempt::Acquired(guard)) => {
                fences.push(guard.fence());
                let _ = guard.release().await;
            }
            Ok(Attempt::Held { ttl_left }) => {
                refused += 1;
                // A node killed before our release came back with our key: wait
                // for it to expire instead of hammering.
                let pause = ttl_left.unwrap_or_default().min(Duration::from_millis(50));
                tokio::time::sleep(pause).await;
            }
            Err(_) => errors += 1,
        }
    }
    stop.store(true, Ordering::SeqCst);
    chaos.join().unwrap();
    for pair in fences.windows(2) {
        assert!(
            pair[1] > pair[0],
            "fence went from {} to {}",
            pair[0],
            pair[1]
        );
    }
    let restarts = restarts.load(Ordering::SeqCst);
    println!(
        "1000 acquisitions, fences {}..={}, {restarts} node restarts, {refused} refused, {errors} errors",
        fences[0], fences[999]
    );
    assert!(restarts >= 5, "the chaos thread must actually have run");
}

/// Three nodes without persistence; ten fences handed out with all of them up,
/// then A acquires with a `ttl` while node 2 is down (so A holds nodes 0 and 1),
/// and node 2 comes back empty — harmless, it never granted A.
async fn a_holds_nodes_0_and_1(ttl: Duration) -> (Vec<RedisServer>, LeaseGuard) {
    let mut nodes = start_nodes(3);
    let tenure = quorum(&nodes, Duration::from_millis(300));
    for _ in 0..10 {
        let g = tenure
            .lease("restart")
            .watchdog(false)
            .attempt()
            .await
            .unwrap();
        g.into_guard().unwrap().release().await.unwrap();
    }
    nodes[2].kill();
    let a = tenure
        .lease("restart")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap();
    let a = a.into_guard().expect("nodes 0 and 1 are a majority");
    nodes[2].start_again();
    (nodes, a)
}

/// THE DOCUMENTED LIMIT. Node 2 is down while A acquires on nodes 0 and 1. Node 0
/// then restarts at once *without persistence*: it forgets A's key and its fence
/// counter. B now wins nodes 0 and 2 — a majority — while A still holds a valid
/// lease: a double grant. This is what the Redlock assumption "no node loses
/// acknowledged writes" is about; the test asserts the behaviour so that the
/// documentation stays honest. The fence does not go back: every node floors its
/// fences by its clock, so B's fence is greater than A's and a fenced resource
/// refuses A's writes once B has written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_limit_a_node_restarted_without_persistence_allows_a_double_grant() {
    let ttl = Duration::from_secs(10);
    let (mut nodes, a) = a_holds_nodes_0_and_1(ttl).await;
    nodes[0].restart(); // no persistence, no delay: A's key is gone from node 0

    // A generous node timeout: every failed attempt would bump the counters of
    // the nodes that granted it (and make the fence look less stale).
    let other = quorum(&nodes, Duration::from_secs(2));
    let give_up = Instant::now() + Duration::from_secs(10);
    let b = loop {
        if let Ok(Attempt::Acquired(b)) = other
            .lease("restart")
            .watchdog(false)
            .ttl(ttl)
            .attempt()
            .await
        {
            break b;
        }
        assert!(Instant::now() < give_up, "expected the double grant");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !a.is_lost() && a.remaining() > Duration::ZERO,
        "A still believes it holds"
    );
    assert!(
        b.fence() > a.fence(),
        "the second holder's fence must be the greater: A {} B {}",
        a.fence(),
        b.fence()
    );
}

/// The mitigation: the node that lost its data stays down for at least the TTL
/// before it rejoins (the Redis documentation's "delayed restart"). While A's
/// lease is valid, B never gets a majority; afterwards B gets the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_restart_prevents_the_double_grant() {
    let ttl = Duration::from_millis(1500);
    let (mut nodes, a) = a_holds_nodes_0_and_1(ttl).await;
    nodes[0].kill(); // it granted A and loses its data: it stays down for a TTL

    let other = quorum(&nodes, Duration::from_millis(300));
    let lease = other.lease("restart").watchdog(false).ttl(ttl);
    let mut tries = 0;
    // Node 1 keeps A's key at least as long as A's own validity lasts.
    while a.remaining() > Duration::from_millis(50) {
        match lease.attempt().await {
            Ok(Attempt::Acquired(_)) => panic!("double grant while A's lease is valid"),
            Ok(Attempt::Held { .. }) | Err(_) => tries += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(tries >= 5, "{tries} tries");
    tokio::time::timeout(ttl, a.lost().wait())
        .await
        .expect("A's own deadline passes");
    nodes[0].start_again();
    let b = lease.attempt_within(Duration::from_secs(3)).await.unwrap();
    assert!(b.is_acquired(), "after the delay the lease is free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_behind_a_proxy_is_not_waited_for() {
    let nodes = start_nodes(3);
    let proxy = tenure_test::Proxy::start(&nodes[2].addr());
    let mut node_urls = urls(&nodes[..2]);
    node_urls.push(proxy.url());
    let node_timeout = Duration::from_secs(6);
    let backend = QuorumStore::new(
        node_urls,
        QuorumOptions::default().node_timeout(node_timeout),
    )
    .unwrap();
    let tenure = Coordinator::with_backend(backend);
    let lease = tenure
        .lease("slow")
        .watchdog(false)
        .ttl(Duration::from_secs(20));
    let warm_up = lease.attempt().await.unwrap().into_guard().unwrap();
    warm_up.release().await.unwrap();
    // The warm-up opened every connection; a vote that went out while a
    // connection was still being established can land after the release and is
    // undone in the background: start from a clean slate.
    let key = lease.key().to_string();
    settle(&nodes, &key, |s| s.iter().all(Option::is_none)).await;
    // Each chunk waits 1.5 s per direction: an answer needs 3 s.
    proxy.delay(Duration::from_millis(1500));
    let start = Instant::now();
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    let _ = guard.extend().await.unwrap();
    guard.release().await.unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_millis(2500), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_no_key_behind() {
    let nodes = start_nodes(3);
    // Two nodes answer only after 300 ms each way: the acquire is still open
    // when the caller gives up after 100 ms.
    let proxies: Vec<tenure_test::Proxy> = nodes[1..]
        .iter()
        .map(|n| tenure_test::Proxy::start(&n.addr()))
        .collect();
    let mut node_urls = vec![nodes[0].url()];
    node_urls.extend(proxies.iter().map(tenure_test::Proxy::url));
    let backend = QuorumStore::new(
        node_urls,
        QuorumOptions::default().node_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let tenure = Coordinator::with_backend(backend);
    let lease = tenure
        .lease("cancelled")
        .watchdog(false)
        .ttl(Duration::from_secs(30));
    let warm_up = lease.attempt().await.unwrap().into_guard().unwrap();
    warm_up.release().await.unwrap();
    // The warm-up opened every connection; a vote that went out while a
    // connection was still being established can land after the release and is
    // undone in the background: start from a clean slate.
    let key = lease.key().to_string();
    settle(&nodes, &key, |s| s.iter().all(Option::is_none)).await;
    for p in &proxies {
        p.delay(Duration::from_millis(300));
    }
    let out = tokio::time::timeout(Duration::from_millis(100), lease.attempt()).await;
    assert!(out.is_err(), "the acquire was still waiting for a majority");
    for p in &proxies {
        p.delay(Duration::ZERO);
    }
    // Node 0 granted at once; the slow nodes grant later. Every vote is undone.
    let seen = settle(&nodes, "cancelled", |s| s.iter().all(Option::is_none)).await;
    assert!(seen.iter().all(Option::is_none), "left behind: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_without_a_majority_is_an_error_and_the_lost_signal_fires() {
    let mut nodes = start_nodes(3);
    let tenure = quorum(&nodes, Duration::from_millis(300));
    let ttl = Duration::from_millis(1200);
    let guard = tenure
        .lease("majority-gone")
        .ttl(ttl)
        .watchdog(true)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    nodes[0].kill();
    nodes[1].kill();
    let err = guard.extend().await.unwrap_err();
    assert!(
        matches!(err, Error::QuorumUnavailable { op: "extend", .. }),
        "{err}"
    );
    assert!(
        !guard.is_lost(),
        "not known to be lost yet: the nodes may come back"
    );
    let start = Instant::now();
    tokio::time::timeout(ttl * 2, guard.lost().wait())
        .await
        .expect("the watchdog cannot renew, so the deadline fires");
    assert!(start.elapsed() < ttl, "{:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_foreign_data_is_outvoted_and_reported() {
    let nodes = start_nodes(3);
    let tenure = quorum(&nodes, Duration::from_millis(300));
    nodes[0]
        .command("HSET tenure:{foreign} field value")
        .unwrap();
    let guard = tenure
        .lease("foreign")
        .watchdog(false)
        .attempt()
        .await
        .unwrap();
    assert!(guard.is_acquired(), "two of three nodes are a majority");
    drop(guard);
    nodes[1]
        .command("HSET tenure:{foreign2} field value")
        .unwrap();
    nodes[2]
        .command("HSET tenure:{foreign2} field value")
        .unwrap();
    let err = tenure
        .lease("foreign2")
        .watchdog(false)
        .attempt()
        .await
        .unwrap_err();
    let Error::QuorumUnavailable { ref votes, .. } = err else {
        panic!("{err}");
    };
    assert!(
        matches!(votes[1].outcome, NodeOutcome::WrongType { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("wrong type"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_configuration_is_checked() {
    let nodes = start_nodes(3);
    let err = QuorumStore::new(Vec::<String>::new(), QuorumOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");
    let twice = [nodes[0].url(), nodes[0].url(), nodes[1].url()];
    let err = QuorumStore::new(twice, QuorumOptions::default()).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    let err = QuorumStore::new(["redis://"], QuorumOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");

    // Several comma-separated URLs in `connect` form a quorum.
    let joined = urls(&nodes).join(",");
    let tenure = Coordinator::connect(&joined).await.unwrap();
    assert!(tenure.backend().describe().starts_with("quorum("));
    let backend = QuorumStore::new(urls(&nodes), QuorumOptions::default()).unwrap();
    assert_eq!((backend.len(), backend.quorum()), (3, 2));

    // connect_quorum needs a majority to answer; `new` needs nothing.
    let mut down = start_nodes(3);
    down[0].kill();
    down[1].kill();
    let err = Coordinator::connect_quorum(urls(&down)).await.unwrap_err();
    assert!(
        matches!(err, Error::QuorumUnavailable { op: "connect", .. }),
        "{err}"
    );
    assert!(QuorumStore::new(urls(&down), QuorumOptions::default()).is_ok());
}

/// The fence counters of one key on every node.
async fn counters(nodes: &[RedisServer], key: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for n in nodes {
        let client = redis::Client::open(n.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let v: Option<u64> = redis::cmd("GET")
            .arg(format!("tenure:{{{key}}}:fence"))
            .query_async(&mut c)
            .await
            .unwrap();
        out.push(v.unwrap_or(0));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winner_settles_its_fence_on_a_majority_so_any_next_majority_exceeds_it() {
    let nodes = start_nodes(3);
    let tenure = quorum(&nodes, Duration::from_millis(500));
    // Diverged counters, as after votes that node 0 granted to losers.
    nodes[0].command("SET tenure:{settle}:fence 10").unwrap();
    nodes[1].command("SET tenure:{settle}:fence 2").unwrap();
    nodes[2].command("SET tenure:{settle}:fence 2").unwrap();
    let lease = tenure
        .lease("settle")
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let first = lease.attempt().await.unwrap().into_guard().unwrap();
    let fence = first.fence().get();
    let at_least = counters(&nodes, "settle").await;
    assert!(
        at_least.iter().filter(|c| **c >= fence).count() >= 2,
        "fence {fence} is not settled on a majority: {at_least:?}"
    );
    first.release().await.unwrap();

    // Whichever majority comes next, its fence is larger.
    let mut last = fence;
    for frozen in [0, 1, 2] {
        nodes[frozen].pause();
        // Waits out a node resumed a moment ago that still runs its backlog (the
        // acquire it missed, then the release that followed it).
        let g = lease.attempt_within(Duration::from_secs(5)).await.unwrap();
        let g = g.into_guard().unwrap();
        assert!(
            g.fence().get() > last,
            "node {frozen} frozen: fence {} after {last}",
            g.fence()
        );
        last = g.fence().get();
        g.release().await.unwrap();
        nodes[frozen].resume();
    }
}
