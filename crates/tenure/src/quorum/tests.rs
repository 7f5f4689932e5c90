//! The quorum's decision logic over in-process nodes: no Redis, so every case —
//! a node that is down, slow, frozen, busy, or answers after the decision; a
//! split vote; grants with differing fences — is set up exactly. Slowness is a
//! gate the test opens, not a sleep.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Semaphore, watch};

use super::node::{Ballot, NodeStatus, QuorumNode, Renewal};
use super::options::QuorumOptions;
use super::store::Quorum;
use crate::error::{Error, NodeOutcome, Result};
use crate::lease::{AcquireReply, HolderInfo, LeaseStatus, ReleaseOutcome, ReleaseWatch};
use crate::token::OwnerToken;

/// How an in-process node answers votes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Like a Redis node: grants a free key, refuses a held one.
    Normal,
    /// Unreachable: every call fails at once.
    Down,
    /// Every vote and status read waits for the gate (see [`MemNode::open`]);
    /// undos do not.
    Gated,
    /// Like `Gated`, and a vote's answer is then lost: the vote is applied
    /// but the quorum sees it time out (a request held up on a connection
    /// being established, run after the requests made behind it, and answered
    /// too late).
    GatedMute,
    /// Deletes (undo, release) take two seconds and happen only if the caller
    /// still waits then — as redis-rs skips a request still queued on its
    /// connection once nobody waits for its answer.
    SlowDelete,
    /// Extends wait for the gate (see [`MemNode::open`]); the rest does not.
    GatedExtend,
    /// A vote is sent, and the server runs it once [`MemNode::open_server`]
    /// is called, on a thread of its own — whether or not the process that
    /// sent it still runs — and only then answers. Undos and releases run at
    /// once (they overtook the vote).
    ServerLate,
}

#[derive(Debug, Default)]
struct State {
    /// key → owner token.
    holders: HashMap<String, String>,
    /// key → fence counter.
    fences: HashMap<String, u64>,
    raises: usize,
    /// Free keys an extend took.
    takes: usize,
}

/// An in-process quorum node. Cheap to clone; clones share the state.
#[derive(Debug, Clone)]
struct MemNode {
    name: String,
    mode: Arc<Mutex<Mode>>,
    state: Arc<Mutex<State>>,
    gate: Arc<Semaphore>,
    /// Bumped on every change, so a test can wait for one.
    changed: Arc<watch::Sender<u64>>,
    /// Opened by [`MemNode::open_server`] for [`Mode::ServerLate`].
    server_gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

impl MemNode {
    fn new(i: usize, mode: Mode) -> Self {
        MemNode {
            name: format!("mem{i}"),
            mode: Arc::new(Mutex::new(mode)),
            state: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
            changed: Arc::new(watch::channel(0).0),
            server_gate: Arc::default(),
        }
    }

    /// Lets the server run the votes it holds back ([`Mode::ServerLate`]).
    fn open_server(&self) {
        let (open, cv) = &*self.server_gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }

    /// Grants `key` to `token` if it is free, on the node's state.
    fn apply_vote(state: &Mutex<State>, key: &str, token: &str, ttl: Duration) -> Ballot {
        let mut state = state.lock().unwrap();
        if state.holders.contains_key(key) {
            Ballot::Held(Some(ttl))
        } else {
            state.holders.insert(key.into(), token.into());
            let fence = state.fences.entry(key.into()).or_default();
            *fence += 1;
            Ballot::Granted(*fence)
        }
    }

    /// A vote the server runs on its own thread once opened; the answer
    /// comes back then.
    async fn server_late_vote(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Ballot {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (gate, state, changed) = (
            Arc::clone(&self.server_gate),
            Arc::clone(&self.state),
            Arc::clone(&self.changed),
        );
        let (key, token) = (key.to_string(), token.as_str().to_string());
        std::thread::spawn(move || {
            let (open, cv) = &*gate;
            let mut opened = open.lock().unwrap();
            while !*opened {
                opened = cv.wait(opened).unwrap();
            }
            drop(opened);
            let ballot = MemNode::apply_vote(&state, &key, &token, ttl);
            changed.send_modify(|n| *n += 1);
            let _ = tx.send(ballot);
        });
        rx.await.expect("the server thread answers")
    }

    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Lets the gated votes through.
    fn open(&self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    /// Someone else holds `key` here, with fence `fence`.
    fn held_by_other(self, key: &str, fence: u64) -> Self {
        let mut state = self.state();
        state.holders.insert(key.into(), "someone-else".into());
        state.fences.insert(key.into(), fence);
        drop(state);
        self
    }

    fn with_fence(self, key: &str, fence: u64) -> Self {
        self.state().fences.insert(key.into(), fence);
        self
    }

    fn holder(&self, key: &str) -> Option<String> {
        self.state().holders.get(key).cloned()
    }

    fn fence(&self, key: &str) -> u64 {
        self.state().fences.get(key).copied().unwrap_or(0)
    }

    /// Waits until `cond` holds on this node (bounded, so a bug fails the test
    /// instead of hanging it).
    async fn wait_for(&self, what: &str, cond: impl Fn(&MemNode) -> bool) {
        let mut rx = self.changed.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while !cond(self) {
                rx.changed().await.expect("the node outlives the test");
            }
        })
        .await;
        assert!(waited.is_ok(), "{}: never saw {what}", self.name);
    }

    fn check(&self) -> Result<()> {
        if self.mode() == Mode::Down {
            return Err(Error::Unreachable {
                backend: self.name.clone(),
                op: "test",
                key: String::new(),
                cause: "connection refused".into(),
            });
        }
        Ok(())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

#[async_trait]
impl QuorumNode for MemNode {
    async fn ping(&self) -> Result<()> {
        self.check()
    }

    async fn vote(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        _holder: Option<&HolderInfo>,
    ) -> Result<Ballot> {
        self.check()?;
        let mode = self.mode();
        if mode == Mode::ServerLate {
            return Ok(self.server_late_vote(key, token, ttl).await);
        }
        if matches!(mode, Mode::Gated | Mode::GatedMute) {
            let _permit = self.gate.acquire().await.expect("the gate stays open");
        }
        let ballot = MemNode::apply_vote(&self.state, key, token.as_str(), ttl);
        self.bump();
        if mode == Mode::GatedMute {
            // The answer is lost; the node's own timeout ends the request.
            tokio::time::sleep(Duration::from_secs(5)).await;
            return Err(Error::Timeout {
                backend: self.name.clone(),
                op: "acquire",
                key: key.to_string(),
                after: Duration::from_secs(5),
            });
        }
        Ok(ballot)
    }

    async fn undo(&self, key: &str, token: &OwnerToken) -> Result<bool> {
        self.check()?;
        if self.mode() == Mode::SlowDelete {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let undone = {
            let mut state = self.state();
            let ours = state.holders.get(key).is_some_and(|t| t == token.as_str());
            if ours {
                state.holders.remove(key);
            }
            ours
        };
        self.bump();
        Ok(undone)
    }

    async fn raise_fence(&self, key: &str, token: &OwnerToken, fence: u64) -> Result<bool> {
        self.check()?;
        let raised = {
            let mut state = self.state();
            state.raises += 1;
            let ours = state.holders.get(key).is_some_and(|t| t == token.as_str());
            if ours {
                let counter = state.fences.entry(key.into()).or_default();
                *counter = (*counter).max(fence);
            }
            ours
        };
        self.bump();
        Ok(raised)
    }

    async fn extend_or_take(
        &self,
        key: &str,
        token: &OwnerToken,
        _ttl: Duration,
        fence: u64,
        may_take: bool,
    ) -> Result<Renewal> {
        self.check()?;
        if self.mode() == Mode::GatedExtend {
            let _permit = self.gate.acquire().await.expect("the gate stays open");
        }
        let renewal = {
            let mut state = self.state();
            match state.holders.get(key) {
                Some(t) if t == token.as_str() => Renewal::Extended,
                None if may_take => {
                    state.holders.insert(key.into(), token.as_str().into());
                    let counter = state.fences.entry(key.into()).or_default();
                    *counter = (*counter).max(fence);
                    state.takes += 1;
                    Renewal::Taken
                }
                _ => Renewal::NotOurs,
            }
        };
        self.bump();
        Ok(renewal)
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        Ok(if self.undo(key, token).await? {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn status(&self, key: &str) -> Result<NodeStatus> {
        self.check()?;
        if self.mode() == Mode::Gated {
            let _permit = self.gate.acquire().await.expect("the gate stays open");
        }
        let state = self.state();
        let fence = state.fences.get(key).copied().map(crate::fence::Fence::new);
        let mut lease = LeaseStatus::free(key.to_string(), fence);
        let owner = state.holders.get(key).cloned();
        lease.held = owner.is_some();
        Ok(NodeStatus { lease, owner })
    }

    async fn watch_releases(&self, _key: &str) -> ReleaseWatch {
        ReleaseWatch::polling()
    }

    fn storage_key(&self, key: &str) -> String {
        key.to_string()
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

/// A quorum over `nodes`; the node timeout is long, so no test depends on it
/// unless it freezes a node on purpose.
fn quorum(nodes: &[MemNode]) -> Quorum<MemNode> {
    let options = QuorumOptions::default()
        .node_timeout(Duration::from_secs(30))
        .retry_delay(Duration::from_millis(50));
    let names = nodes.iter().map(|n| n.name.clone()).collect();
    Quorum::from_nodes(nodes.to_vec(), names, options)
}

fn nodes(modes: &[Mode]) -> Vec<MemNode> {
    modes
        .iter()
        .enumerate()
        .map(|(i, m)| MemNode::new(i, *m))
        .collect()
}

fn token() -> OwnerToken {
    OwnerToken::generate().expect("randomness")
}

const TTL: Duration = Duration::from_secs(10);

fn fence_of(reply: &AcquireReply) -> u64 {
    match reply {
        AcquireReply::Acquired { fence, .. } => fence.get(),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[tokio::test]
async fn unanimous_grants_win_with_their_common_fence_and_no_raise() {
    let nodes = nodes(&[Mode::Normal; 3]);
    let q = quorum(&nodes);
    let t = token();
    let reply = q.acquire("k", &t, TTL, None).await.unwrap();
    assert_eq!(fence_of(&reply), 1);
    for n in &nodes {
        assert_eq!(n.holder("k").as_deref(), Some(t.as_str()));
        assert_eq!(
            n.state().raises,
            0,
            "the steady state needs no second round"
        );
    }
}

#[tokio::test]
async fn differing_fences_settle_on_the_highest_on_a_majority() {
    let nodes = vec![
        MemNode::new(0, Mode::Normal).with_fence("k", 4),
        MemNode::new(1, Mode::Normal).with_fence("k", 1),
        MemNode::new(2, Mode::Normal).with_fence("k", 2),
    ];
    let q = quorum(&nodes);
    let reply = q.acquire("k", &token(), TTL, None).await.unwrap();
    assert_eq!(fence_of(&reply), 5, "the maximum over the grants");
    let at_fence = nodes.iter().filter(|n| n.fence("k") >= 5).count();
    assert!(at_fence >= 2, "a majority has counter ≥ 5: {at_fence}");
    assert_eq!(
        nodes[0].state().raises,
        0,
        "the node at the fence is not raised"
    );
}

/// Once `lost` (a node of the lease's majority) no longer holds key `k`, the
/// quorum still reads the lease as held at `fence`.
async fn assert_fence_read_after_a_loss(q: &Quorum<MemNode>, lost: &MemNode, fence: u64) {
    lost.state().holders.remove("k");
    let status = q.status("k").await.unwrap();
    assert!(status.held);
    assert_eq!(status.fence.map(|f| f.get()), Some(fence));
}

/// Two nodes whose fence counter for `k` is at 4 and a third, in `mode`, at 2
/// (fences floored by each node's clock differ by a millisecond on fresh
/// counters), and a quorum of them that won `k` at fence 5.
async fn won_above_a_lower_node(mode: Mode) -> (Vec<MemNode>, Quorum<MemNode>) {
    let nodes = vec![
        MemNode::new(0, Mode::Normal).with_fence("k", 4),
        MemNode::new(1, Mode::Normal).with_fence("k", 4),
        MemNode::new(2, mode).with_fence("k", 2),
    ];
    let q = quorum(&nodes);
    let reply = q.acquire("k", &token(), TTL, None).await.unwrap();
    assert_eq!(fence_of(&reply), 5);
    (nodes, q)
}

/// A majority granted the same fence and one node a lower one: that node is
/// raised too, so the holder's fence reads right after a node of the majority
/// loses the key.
#[tokio::test]
async fn a_granting_node_below_a_majority_at_the_fence_is_raised_too() {
    let (nodes, q) = won_above_a_lower_node(Mode::Normal).await;
    for n in &nodes {
        assert_eq!(n.fence("k"), 5, "every granting node is at the fence");
    }
    assert_fence_read_after_a_loss(&q, &nodes[1], 5).await;
}

#[tokio::test]
async fn a_down_minority_is_outvoted_and_a_down_majority_is_unavailable() {
    let nodes = nodes(&[Mode::Normal, Mode::Normal, Mode::Down]);
    let q = quorum(&nodes);
    assert_eq!(
        fence_of(&q.acquire("k", &token(), TTL, None).await.unwrap()),
        1
    );

    let nodes = self::nodes(&[Mode::Normal, Mode::Down, Mode::Down]);
    let q = quorum(&nodes);
    let err = q.acquire("k", &token(), TTL, None).await.unwrap_err();
    let Error::QuorumUnavailable { votes, needed, .. } = err else {
        panic!("expected QuorumUnavailable, got {err:?}");
    };
    assert_eq!(needed, 2);
    assert_eq!(votes[0].outcome, NodeOutcome::Granted);
    assert!(matches!(votes[1].outcome, NodeOutcome::Unreachable { .. }));
    assert_eq!(nodes[0].holder("k"), None, "the lone grant is undone");
}

#[tokio::test]
async fn a_majority_held_by_another_reports_its_ttl_and_undoes_our_grant() {
    let nodes = vec![
        MemNode::new(0, Mode::Normal),
        MemNode::new(1, Mode::Normal).held_by_other("k", 7),
        MemNode::new(2, Mode::Normal).held_by_other("k", 7),
    ];
    let q = quorum(&nodes);
    let reply = q.acquire("k", &token(), TTL, None).await.unwrap();
    assert_eq!(
        reply,
        AcquireReply::Held {
            ttl_left: Some(TTL)
        }
    );
    assert_eq!(nodes[0].holder("k"), None, "our grant on node 0 is undone");
}

#[tokio::test]
async fn a_split_vote_is_refused_with_a_retry_delay_and_leaves_no_key() {
    // Five nodes: two grant, two are held by another, one is down. Nobody has
    // a majority; the grants are undone.
    let nodes = vec![
        MemNode::new(0, Mode::Normal),
        MemNode::new(1, Mode::Normal),
        MemNode::new(2, Mode::Normal).held_by_other("k", 3),
        MemNode::new(3, Mode::Normal).held_by_other("k", 3),
        MemNode::new(4, Mode::Down),
    ];
    let q = quorum(&nodes);
    let reply = q.acquire("k", &token(), TTL, None).await.unwrap();
    let AcquireReply::Held {
        ttl_left: Some(wait),
    } = reply
    else {
        panic!("expected Held with a retry delay, got {reply:?}");
    };
    assert!(
        wait <= Duration::from_millis(50),
        "a retry delay, not a TTL: {wait:?}"
    );
    assert_eq!(nodes[0].holder("k"), None);
    assert_eq!(nodes[1].holder("k"), None);
}

#[tokio::test]
async fn a_won_ballot_does_not_wait_for_a_slow_node_and_keeps_its_late_grant() {
    let nodes = nodes(&[Mode::Normal, Mode::Normal, Mode::Gated]);
    let q = quorum(&nodes);
    let t = token();
    // The gate is closed: returning at all proves the slow node was not waited for.
    let reply = q.acquire("k", &t, TTL, None).await.unwrap();
    assert_eq!(fence_of(&reply), 1);
    nodes[2].open();
    nodes[2]
        .wait_for("the late grant", |n| n.holder("k").is_some())
        .await;
    assert_eq!(
        nodes[2].holder("k").as_deref(),
        Some(t.as_str()),
        "still ours: the lease is held"
    );
}

/// A vote that answers after the ballot was won, granting a fence below the
/// won one, is raised to it: the holder's fence then reads right once a node
/// of the majority loses the key.
#[tokio::test]
async fn a_late_grant_below_the_won_fence_is_raised_to_it() {
    let (nodes, q) = won_above_a_lower_node(Mode::Gated).await;
    nodes[2].open();
    nodes[2]
        .wait_for("the late grant raised to the fence", |n| {
            n.holder("k").is_some() && n.fence("k") == 5
        })
        .await;
    assert_fence_read_after_a_loss(&q, &nodes[1], 5).await;
}

/// Opens a gated node, waits for its vote to grant (the fence counts it), then
/// for the follow-up to undo that grant.
async fn late_vote_grants_then_is_undone(node: &MemNode) {
    node.open();
    node.wait_for("the late vote", |n| n.fence("k") == 1).await;
    node.wait_for("the late grant undone", |n| n.holder("k").is_none())
        .await;
}

#[tokio::test]
async fn a_vote_granted_after_a_lost_decision_is_undone() {
    // Nodes 0 and 1 are held by another: the attempt is lost before node 2
    // votes. Its undo overtakes the gated vote and finds nothing; the vote then
    // grants, and the follow-up undoes it.
    let nodes = vec![
        MemNode::new(0, Mode::Normal).held_by_other("k", 2),
        MemNode::new(1, Mode::Normal).held_by_other("k", 2),
        MemNode::new(2, Mode::Gated),
    ];
    let q = quorum(&nodes);
    let reply = q.acquire("k", &token(), TTL, None).await.unwrap();
    assert!(matches!(reply, AcquireReply::Held { .. }), "{reply:?}");
    late_vote_grants_then_is_undone(&nodes[2]).await;
}

#[tokio::test]
async fn a_grant_arriving_after_the_release_is_undone() {
    let nodes = nodes(&[Mode::Normal, Mode::Normal, Mode::Gated]);
    let q = quorum(&nodes);
    let t = token();
    fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
    assert_eq!(q.release("k", &t).await.unwrap(), ReleaseOutcome::Released);
    late_vote_grants_then_is_undone(&nodes[2]).await;
}

/// A quorum over `nodes` with a node timeout of one second (for tests on
/// paused time, where it passes as soon as every task waits).
fn quorum_with_short_timeout(nodes: &[MemNode]) -> Quorum<MemNode> {
    let options = QuorumOptions::default().node_timeout(Duration::from_secs(1));
    let names = nodes.iter().map(|n| n.name.clone()).collect();
    Quorum::from_nodes(nodes.to_vec(), names, options)
}

#[tokio::test(start_paused = true)]
async fn a_vote_run_after_the_release_whose_answer_times_out_is_undone() {
    // Node 2's vote is held up until after the release (which finds nothing
    // there), then runs and grants; its answer never arrives, so the quorum
    // sees a timeout. The grant must still be undone: a timed-out vote's fate
    // is unknown, not "not granted".
    let nodes = nodes(&[Mode::Normal, Mode::Normal, Mode::GatedMute]);
    let q = quorum_with_short_timeout(&nodes);
    let t = token();
    fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
    assert_eq!(q.release("k", &t).await.unwrap(), ReleaseOutcome::Released);
    late_vote_grants_then_is_undone(&nodes[2]).await;
}

#[tokio::test(start_paused = true)]
async fn a_vote_run_after_a_refusal_whose_answer_times_out_is_undone() {
    // The attempt is lost on nodes 0 and 1; node 2's undo overtakes its
    // held-up vote, which then grants and is never answered.
    let nodes = vec![
        MemNode::new(0, Mode::Normal).held_by_other("k", 2),
        MemNode::new(1, Mode::Normal).held_by_other("k", 2),
        MemNode::new(2, Mode::GatedMute),
    ];
    let q = quorum_with_short_timeout(&nodes);
    let reply = q.acquire("k", &token(), TTL, None).await.unwrap();
    assert!(matches!(reply, AcquireReply::Held { .. }), "{reply:?}");
    late_vote_grants_then_is_undone(&nodes[2]).await;
}

#[tokio::test(start_paused = true)]
async fn an_undo_that_overtakes_a_vote_timed_out_for_the_decision_is_repeated() {
    // The vote splits on nodes 0 and 1 and is decided when node 2's vote
    // times out — which does not end that request: it is still queued. The
    // undo sent then overtakes it (a full queue lets waiting requests in in
    // the order their tasks run) and finds nothing; the vote then grants.
    let nodes = vec![
        MemNode::new(0, Mode::Normal),
        MemNode::new(1, Mode::Normal).held_by_other("k", 3),
        MemNode::new(2, Mode::GatedMute),
    ];
    let q = quorum_with_short_timeout(&nodes);
    let reply = q.acquire("k", &token(), TTL, None).await.unwrap();
    assert!(matches!(reply, AcquireReply::Held { .. }), "{reply:?}");
    assert_eq!(nodes[0].holder("k"), None, "our grant on node 0 is undone");
    late_vote_grants_then_is_undone(&nodes[2]).await;
}

#[tokio::test(start_paused = true)]
async fn a_release_the_quorum_stopped_waiting_for_still_reaches_its_node() {
    // Node 2 deletes only if its release is still awaited two seconds on,
    // past the one-second node timeout: the quorum answers without it, and
    // the release must still be carried through, not dropped at the deadline.
    let nodes = nodes(&[Mode::Normal, Mode::Normal, Mode::SlowDelete]);
    let q = quorum_with_short_timeout(&nodes);
    let t = token();
    fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
    assert_eq!(nodes[2].holder("k").as_deref(), Some(t.as_str()));
    assert_eq!(q.release("k", &t).await.unwrap(), ReleaseOutcome::Released);
    nodes[2]
        .wait_for("the slow release", |n| n.holder("k").is_none())
        .await;
}

#[tokio::test]
async fn a_split_vote_does_not_wait_for_a_node_that_timed_out_last_time() {
    // Node 2 is frozen (its vote waits for a gate never opened) and timed out
    // last time. Nodes 0 and 1 split the vote: decided without node 2, long
    // before the 30 s node timeout.
    let nodes = vec![
        MemNode::new(0, Mode::Normal),
        MemNode::new(1, Mode::Normal).held_by_other("k", 1),
        MemNode::new(2, Mode::Gated),
    ];
    let q = quorum(&nodes);
    q.unresponsive()[2].store(true, Ordering::Relaxed);
    let reply = tokio::time::timeout(Duration::from_secs(10), q.acquire("k", &token(), TTL, None))
        .await
        .expect("decided without the frozen node")
        .unwrap();
    assert!(matches!(reply, AcquireReply::Held { .. }), "{reply:?}");
    assert_eq!(nodes[0].holder("k"), None, "our grant is undone");
}

#[tokio::test]
async fn a_frozen_node_times_out_and_is_marked_unresponsive() {
    let nodes = nodes(&[Mode::Normal, Mode::Normal, Mode::Gated]);
    let options = QuorumOptions::default().node_timeout(Duration::from_millis(50));
    let names = nodes.iter().map(|n| n.name.clone()).collect();
    let q = Quorum::from_nodes(nodes.clone(), names, options);
    // Status waits for every node: the frozen one times out.
    let status = q.status("k").await.unwrap();
    assert!(!status.held);
    assert!(q.unresponsive()[2].load(Ordering::Relaxed));
    assert!(!q.unresponsive()[0].load(Ordering::Relaxed));
}

#[tokio::test]
async fn status_reports_the_fence_the_holding_nodes_agree_on() {
    // Node 2's counter is at 5, raised by a vote that failed elsewhere; the
    // key there is held by someone else. Nodes 0 and 1 grant fence 1: that is
    // the holder's fence, and the status must say so (not 5).
    let nodes = vec![
        MemNode::new(0, Mode::Normal),
        MemNode::new(1, Mode::Normal),
        MemNode::new(2, Mode::Normal).held_by_other("k", 5),
    ];
    let q = quorum(&nodes);
    let fence = fence_of(&q.acquire("k", &token(), TTL, None).await.unwrap());
    assert_eq!(fence, 1);
    let status = q.status("k").await.unwrap();
    assert!(status.held);
    assert_eq!(status.fence.map(|f| f.get()), Some(fence));
    // Once released, the lease is free and the highest counter is reported.
    nodes[0].state().holders.clear();
    nodes[1].state().holders.clear();
    let status = q.status("k").await.unwrap();
    assert!(!status.held, "one node held by another is no majority");
    assert_eq!(status.fence.map(|f| f.get()), Some(5));
}

#[tokio::test]
async fn status_is_free_when_no_token_holds_a_majority() {
    // Every node is held, but by three different owners: nobody holds the
    // lease.
    let nodes = vec![
        MemNode::new(0, Mode::Normal).held_by_other("k", 1),
        MemNode::new(1, Mode::Normal),
        MemNode::new(2, Mode::Normal),
    ];
    nodes[1].state().holders.insert("k".into(), "b".into());
    nodes[2].state().holders.insert("k".into(), "c".into());
    let q = quorum(&nodes);
    let status = q.status("k").await.unwrap();
    assert!(!status.held);
}

#[tokio::test]
async fn extend_takes_a_free_node_while_the_lease_is_valid() {
    let nodes = nodes(&[Mode::Normal; 3]);
    let q = quorum(&nodes);
    let t = token();
    let fence = fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
    // Node 2 lost our key (say it expired early there).
    nodes[2].state().holders.remove("k");
    let reply = q.extend("k", &t, TTL).await.unwrap();
    assert!(
        matches!(reply, crate::lease::ExtendReply::Extended { .. }),
        "{reply:?}"
    );
    assert_eq!(
        nodes[2].holder("k").as_deref(),
        Some(t.as_str()),
        "taken back"
    );
    assert!(nodes[2].fence("k") >= fence);
}

#[tokio::test]
async fn extend_reports_a_lease_a_majority_no_longer_holds() {
    let nodes = nodes(&[Mode::Normal; 3]);
    let q = quorum(&nodes);
    let t = token();
    fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
    for n in &nodes[..2] {
        n.state().holders.insert("k".into(), "someone-else".into());
    }
    let reply = q.extend("k", &t, TTL).await.unwrap();
    assert_eq!(reply, crate::lease::ExtendReply::NotHeld);
}

#[tokio::test]
async fn an_extend_that_takes_a_node_after_the_release_is_undone() {
    // Node 2 lost our key (it expired early there); the extend is decided on
    // nodes 0 and 1 while its request to node 2 is held up. The lease is
    // released (node 2 has nothing to release), then the held-up extend takes
    // the free key there: it must be undone, not left for a TTL.
    let nodes = nodes(&[Mode::Normal; 3]);
    let q = quorum(&nodes);
    let t = token();
    fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
    nodes[2].state().holders.remove("k");
    *nodes[2].mode.lock().unwrap() = Mode::GatedExtend;
    let reply = q.extend("k", &t, TTL).await.unwrap();
    assert!(
        matches!(reply, crate::lease::ExtendReply::Extended { .. }),
        "{reply:?}"
    );
    assert_eq!(q.release("k", &t).await.unwrap(), ReleaseOutcome::Released);
    nodes[2].open();
    nodes[2]
        .wait_for("the late take", |n| n.state().takes == 1)
        .await;
    nodes[2]
        .wait_for("the late take undone", |n| n.holder("k").is_none())
        .await;
}

#[tokio::test]
async fn an_extend_decided_after_a_concurrent_release_leaves_no_key() {
    // The extend waits for nodes 1 and 2 (gated) while the lease is released
    // everywhere; then their extends find the keys free and take them. The
    // extend must neither revive the released lease here nor leave its takes.
    let nodes = nodes(&[Mode::Normal; 3]);
    let q = quorum(&nodes);
    let t = token();
    fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
    for n in &nodes[1..] {
        *n.mode.lock().unwrap() = Mode::GatedExtend;
    }
    let (q2, t2) = (q.clone(), t.clone());
    let extend = tokio::spawn(async move { q2.extend("k", &t2, TTL).await });
    tokio::task::yield_now().await;
    assert_eq!(q.release("k", &t).await.unwrap(), ReleaseOutcome::Released);
    for n in &nodes[1..] {
        n.open();
    }
    let _ = extend.await.unwrap();
    assert!(
        q.holding("k", &t).is_none(),
        "a released lease is not revived"
    );
    for n in &nodes[1..] {
        n.wait_for("the take undone", |n| n.holder("k").is_none())
            .await;
    }
}

#[test]
fn a_short_lived_process_that_closes_the_quorum_leaves_no_late_grant() {
    // Node 2's vote reaches its server late, after the release overtook it
    // (which found nothing); the process then ends. Closing the quorum before
    // the runtime goes away lets the follow-up undo the late grant; without
    // it the grant would stay for a TTL.
    let nodes = nodes(&[Mode::Normal, Mode::Normal, Mode::ServerLate]);
    let q = quorum(&nodes);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let t = token();
        fence_of(&q.acquire("k", &t, TTL, None).await.unwrap());
        assert_eq!(q.release("k", &t).await.unwrap(), ReleaseOutcome::Released);
        nodes[2].open_server();
        q.close().await;
    });
    drop(runtime);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while nodes[2].fence("k") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the late vote never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        nodes[2].holder("k"),
        None,
        "a late grant outlived the process"
    );
}

#[test]
fn the_tally_decides_on_a_majority_either_way() {
    use super::ballot::Tally;
    let t = |granted, held, missing| Tally {
        granted,
        held,
        missing,
    };
    // 3 nodes, quorum 2.
    assert!(t(2, 0, 1).decided(2, 1), "won");
    assert!(!t(1, 0, 2).decided(2, 2), "one grant: wait");
    assert!(
        !t(1, 1, 1).decided(2, 1),
        "split, the third may still grant"
    );
    assert!(
        t(1, 1, 1).decided(2, 0),
        "split, the third timed out last time"
    );
    assert!(t(0, 2, 1).decided(2, 1), "held by a majority");
    assert!(t(0, 0, 1).decided(2, 1), "two failed: unavailable");
}

#[test]
fn a_majority_held_waits_for_enough_of_them_to_expire() {
    use super::ballot::held_ttl;
    let s = Duration::from_secs;
    // 5 nodes, quorum 3, two ours: one more must expire.
    assert_eq!(held_ttl(3, 2, vec![s(9), s(4), s(6)]), Some(s(4)));
    // None ours: three must expire.
    assert_eq!(held_ttl(3, 0, vec![s(9), s(4), s(6)]), Some(s(9)));
}
