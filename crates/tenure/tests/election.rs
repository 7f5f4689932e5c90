//! Leader election on every store: ids, terms, resigning, observing, bad input.

#![allow(clippy::unwrap_used, missing_docs)]

mod recipes_common;

use std::time::Duration;

use recipes_common::Fixture;
use tenure::election::{Election, Leader};
use tenure::record::{PutOutcome, PutRule, Record};
use tenure::{Error, ReleaseOutcome};

/// A bound on waits that should end at once; reaching it fails the test.
const BOUND: Duration = Duration::from_secs(10);

async fn leader_is_named_and_terms_increase(fx: &Fixture) {
    let election = fx
        .tenure
        .election("elect:named")
        .ttl(Duration::from_secs(10));
    assert!(election.leader().await.unwrap().is_none());
    let a = election
        .try_campaign("node-a")
        .await
        .unwrap()
        .expect("nobody leads");
    assert!(election.try_campaign("node-b").await.unwrap().is_none());
    let now = election.leader().await.unwrap().expect("a leads");
    assert_eq!(now.id.as_deref(), Some("node-a"));
    assert_eq!(now.term, a.term());
    assert!(now.ttl_left.is_some_and(|t| t <= Duration::from_secs(10)));
    let first = a.term();
    assert_eq!(a.resign().await.unwrap(), ReleaseOutcome::Released);
    assert!(election.leader().await.unwrap().is_none());

    let b = tokio::time::timeout(BOUND, election.campaign("node-b"))
        .await
        .expect("elected at once")
        .unwrap();
    assert!(b.term() > first, "{} > {first}", b.term());
    let now = election.leader().await.unwrap().expect("b leads");
    assert_eq!((now.id.as_deref(), now.term), (Some("node-b"), b.term()));
    b.resign().await.unwrap();
}

async fn a_deposed_leader_cannot_overwrite_its_successors_id(fx: &Fixture) {
    let election = fx
        .tenure
        .election("elect:deposed")
        .ttl(Duration::from_secs(10));
    let old = election.try_campaign("old").await.unwrap().unwrap();
    let old_term = old.term();
    old.resign().await.unwrap();
    let new = election.try_campaign("new").await.unwrap().unwrap();
    // The old leader's id write arriving late, under its old term.
    let records = fx.tenure.records().expect("records");
    let late = Record {
        fence: old_term,
        value: b"old".to_vec(),
    };
    let put = records
        .put_record("elect:deposed", &late, None, PutRule::IfNotOlder)
        .await
        .unwrap();
    assert!(matches!(put, PutOutcome::Kept(r) if r.fence == new.term() && r.value == b"new"));
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!(now.id.as_deref(), Some("new"));
    new.resign().await.unwrap();
}

async fn campaigning_waits_for_the_leader_to_resign(fx: &Fixture) {
    let election = fx
        .tenure
        .election("elect:wait")
        .ttl(Duration::from_secs(10));
    let a = election.try_campaign("a").await.unwrap().unwrap();
    let waiting = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign_timeout("b", BOUND).await })
    };
    let term = a.term();
    a.resign().await.unwrap();
    let b = waiting.await.unwrap().expect("b elected after a resigned");
    assert!(b.term() > term);
    assert_eq!(b.id(), "b");
    b.resign().await.unwrap();
}

async fn observers_see_every_change(fx: &Fixture) {
    // On one Redis master and on etcd every change is pushed: with polling
    // set to an hour, this only passes if releases and new leaders' ids wake
    // the observer.
    let pushed = (fx.url.starts_with("redis") && !fx.url.contains(',')) || fx.etcd.is_some();
    let poll = if pushed {
        Duration::from_secs(3600)
    } else {
        Duration::from_millis(20)
    };
    let election = fx
        .tenure
        .election("elect:observe")
        .ttl(Duration::from_secs(10))
        .poll_every(poll);
    let mut observer = election.observe();
    let first = tokio::time::timeout(BOUND, observer.changed())
        .await
        .unwrap()
        .unwrap();
    assert!(first.is_none());
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn(async move {
        for _ in 0..3 {
            let change = tokio::time::timeout(BOUND, observer.changed())
                .await
                .expect("change seen in time")
                .unwrap();
            seen_tx.send(change.map(|l| (l.id, l.term))).unwrap();
        }
    });
    // Each change is made only after the one before was seen: an observer
    // reports the state it reads, not every intermediate one.
    let a = election.try_campaign("a").await.unwrap().unwrap();
    assert_eq!(
        seen_rx.recv().await.unwrap(),
        Some((Some("a".to_string()), a.term()))
    );
    a.resign().await.unwrap();
    assert_eq!(seen_rx.recv().await.unwrap(), None);
    let b = election.try_campaign("b").await.unwrap().unwrap();
    assert_eq!(
        seen_rx.recv().await.unwrap(),
        Some((Some("b".to_string()), b.term()))
    );
    watching.await.unwrap();
    b.resign().await.unwrap();
}

async fn bad_ids_are_refused(fx: &Fixture) {
    let election = fx.tenure.election("elect:bad");
    let long = "x".repeat(257);
    for id in ["", "a\nb", long.as_str()] {
        let e = election.try_campaign(id).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    what: "candidate id",
                    ..
                }
            ),
            "{e}"
        );
    }
    // Nothing was taken on the way.
    assert!(!fx.tenure.status("elect:bad").await.unwrap().held);
    // A leader elected before the bad attempts is still the leader, named.
    let leader = election.try_campaign("a").await.unwrap().unwrap();
    for id in ["", long.as_str()] {
        assert!(election.try_campaign(id).await.is_err());
    }
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!((now.id.as_deref(), now.term), (Some("a"), leader.term()));
    leader.resign().await.unwrap();
    let e = fx.tenure.election("").leader().await.unwrap_err();
    assert!(matches!(e, Error::InvalidKey { .. }), "{e}");
}

/// Leadership lost in the store (the key deleted, as by a failover that lost
/// it) is signalled to the leader by its watchdog, and the next candidate is
/// elected with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_vanishes_is_told_and_replaced_on_redis() {
    let fx = recipes_common::redis().await;
    let election = fx
        .tenure
        .election("elect:vanish")
        .ttl(Duration::from_millis(600));
    let a = election.try_campaign("a").await.unwrap().unwrap();
    fx.server
        .as_ref()
        .unwrap()
        .command("DEL tenure:{elect:vanish}")
        .unwrap();
    tokio::time::timeout(BOUND, a.lost().wait())
        .await
        .expect("the watchdog noticed");
    assert!(a.is_lost());
    let b = election
        .try_campaign("b")
        .await
        .unwrap()
        .expect("free again");
    assert!(b.term() > a.term());
    assert_eq!(
        election.leader().await.unwrap().unwrap().id.as_deref(),
        Some("b")
    );
    assert_eq!(a.resign().await.unwrap(), ReleaseOutcome::NotHeld);
    b.resign().await.unwrap();
}

fn _types(_: &Election, _: &Leader) {}

on_store!(memory: leader_is_named_and_terms_increase, a_deposed_leader_cannot_overwrite_its_successors_id,
    campaigning_waits_for_the_leader_to_resign, observers_see_every_change, bad_ids_are_refused);
on_store!(sqlite: leader_is_named_and_terms_increase, a_deposed_leader_cannot_overwrite_its_successors_id,
    campaigning_waits_for_the_leader_to_resign, observers_see_every_change, bad_ids_are_refused);
on_store!(redis: leader_is_named_and_terms_increase, a_deposed_leader_cannot_overwrite_its_successors_id,
    campaigning_waits_for_the_leader_to_resign, observers_see_every_change, bad_ids_are_refused);
#[cfg(feature = "etcd")]
on_store!(etcd: leader_is_named_and_terms_increase, a_deposed_leader_cannot_overwrite_its_successors_id,
    campaigning_waits_for_the_leader_to_resign, observers_see_every_change, bad_ids_are_refused);

/// Foreign data in any key of an election (the lease, its fence counter, the
/// leader's record): campaigning is an error naming the key, the data is left
/// as it was, and the lease taken on the way (when the record is at fault) is
/// given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_election_key_of_a_foreign_type_is_refused_and_left_alone_on_redis() {
    let fx = recipes_common::redis().await;
    let tenure = &fx.tenure;
    recipes_common::foreign_keys_are_refused(
        fx.server.as_ref().unwrap(),
        "elect:foreign",
        "",
        |name| async move { tenure.election(name).try_campaign("a").await.unwrap_err() },
    )
    .await;
    // Reading who leads fails the same way, rather than guessing.
    let server = fx.server.as_ref().unwrap();
    recipes_common::Foreign::Hash.plant(server, "tenure:{elect:read}:record");
    let election = tenure.election("elect:read");
    let a = election.try_campaign("a").await;
    assert!(matches!(a, Err(Error::WrongType { .. })), "{a:?}");
    assert!(matches!(
        election.leader().await,
        Err(Error::WrongType { .. })
    ));
}

/// On a quorum the term is the quorum's fence (monotonic across leaders); the
/// id is not kept there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_increase_on_a_quorum_without_ids() {
    let fx = recipes_common::quorum().await;
    let election = fx
        .tenure
        .election("elect:quorum")
        .ttl(Duration::from_secs(5));
    let a = election.try_campaign("a").await.unwrap().unwrap();
    assert!(election.try_campaign("b").await.unwrap().is_none());
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!((now.id, now.term), (None, a.term()));
    let first = a.term();
    a.resign().await.unwrap();
    assert!(election.leader().await.unwrap().is_none());
    // Campaigning, not one try: a vote racing the resignation's last node may
    // split and be retried.
    let b = election
        .campaign_timeout("b", BOUND)
        .await
        .expect("elected after the resignation");
    assert!(b.term() > first);
    b.resign().await.unwrap();
}

/// Announcing a new leader's id is best-effort: an ACL user without channel
/// rights (PUBLISH refused with NOPERM) is still elected and named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_rights_is_elected_and_named_on_redis() {
    let server = tenure_test::RedisServer::start();
    let url = server.acl_user("app", "s3cret", "~tenure:* resetchannels +@all");
    let tenure = tenure::Coordinator::connect(&url).await.unwrap();
    let election = tenure.election("elect:acl").ttl(Duration::from_secs(30));
    let a = election
        .try_campaign("a")
        .await
        .unwrap()
        .expect("nobody leads");
    assert_eq!(
        election.leader().await.unwrap().unwrap().id.as_deref(),
        Some("a")
    );
    assert_eq!(a.resign().await.unwrap(), ReleaseOutcome::Released);
}

/// On a quorum `leader()` reports the leader's own term — the fence the nodes
/// holding its lease agree on — also after a candidate's failed vote took a
/// node the leader had lost (here: the key deleted on one node) and raised
/// that node's counter above the leader's term. The key is deleted once every
/// node's counter has reached the term: a vote that answered after the
/// election was decided may have granted a lower fence (each node floors it
/// by its own clock), and is raised to the term in the background; until
/// then, with a node of the majority lost, the term reads low (docs/quorum.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_quorum_the_reported_term_is_the_leaders() {
    let fx = recipes_common::quorum().await;
    let election = fx
        .tenure
        .election("elect:split")
        .ttl(Duration::from_secs(30));
    let a = election.try_campaign("a").await.unwrap().unwrap();
    let settled = tokio::time::Instant::now() + BOUND;
    while fx
        .nodes
        .iter()
        .any(|node| fence_counter(node, "elect:split") < a.term().get())
    {
        assert!(
            tokio::time::Instant::now() < settled,
            "the late votes were never raised to the term"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fx.nodes[2].command("DEL tenure:{elect:split}").unwrap();
    assert!(election.try_campaign("b").await.unwrap().is_none());
    // The failed vote granted on node 2 (and was undone): its counter is now
    // above the leader's term.
    let counter = fence_counter(&fx.nodes[2], "elect:split");
    assert!(counter > a.term().get(), "{counter} vs {}", a.term());
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!(now.term, a.term());
    assert_eq!(now.id, None);
    let first = a.term();
    a.resign().await.unwrap();
    let b = election
        .campaign_timeout("b", BOUND)
        .await
        .expect("elected after the resignation");
    assert!(b.term() > first, "{} after {first}", b.term());
    b.resign().await.unwrap();
}

/// The leader's lost signal is due before any other candidate can win: with
/// the leader cut off from Redis (its renewals fail), its local deadline
/// passes strictly before a second candidate, connected directly, is
/// elected — whatever the scheduling, since that candidate can only win once
/// Redis expired the key, a drift margin after the leader's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_is_told_before_a_successor_is_elected_on_redis() {
    let server = tenure_test::RedisServer::start();
    let proxy = tenure_test::Proxy::start(&server.addr());
    let ttl = Duration::from_secs(1);
    let cut_off = tenure::Coordinator::connect(&proxy.url()).await.unwrap();
    let direct = tenure::Coordinator::connect(&server.url()).await.unwrap();
    let a = cut_off
        .election("elect:cut")
        .ttl(ttl)
        .try_campaign("a")
        .await
        .unwrap()
        .expect("nobody leads");
    proxy.cut();
    // No renewal can be confirmed from now on: this is the local deadline.
    let deadline = std::time::Instant::now() + a.guard().remaining();
    let b = direct
        .election("elect:cut")
        .ttl(ttl)
        .campaign_timeout("b", BOUND)
        .await
        .expect("b is elected once a's lease expired");
    let elected = std::time::Instant::now();
    assert!(
        deadline < elected,
        "b was elected {:?} before a's deadline",
        deadline - elected
    );
    tokio::time::timeout(BOUND, a.lost().wait())
        .await
        .expect("the lost signal fired");
    assert!(b.term() > a.term());
    b.resign().await.unwrap();
}

/// The fence counter of the lease `key` on `node` (0 when it has none).
fn fence_counter(node: &tenure_test::RedisServer, key: &str) -> u64 {
    let reply = node
        .command(&format!("GET tenure:{{{key}}}:fence"))
        .unwrap();
    reply
        .lines()
        .nth(1)
        .and_then(|line| line.parse().ok())
        .unwrap_or(0)
}
