//! The one fan-out every quorum operation uses: send to all nodes (or some) at
//! once, bound them by one deadline, collect the replies until the caller's
//! decision is known, and keep track of the nodes that stopped answering.
//!
//! A [`Fanout`] holds the node requests of one operation and is polled in place
//! by whoever waits on it — no task per node, no channel. Each request is
//! polled once before [`Quorum::fan_out`] returns, so it is queued on its
//! node's connection then, normally in the order the requests were made (not
//! always: see `cleanup.rs`). No request is dropped at the deadline; requests
//! still running when a decision is taken go on: a follow-up takes the
//! [`Fanout`] over, or dropping it hands the rest to one background task.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep, sleep_until};

use super::node::QuorumNode;
use super::store::Quorum;
use crate::error::{Error, NodeOutcome, NodeVote, Result};
use crate::token::OwnerToken;

/// A lease key and owner token shared by the node requests of one operation:
/// one allocation per operation instead of a copy of each per node.
pub(super) type Target = Arc<(Box<str>, OwnerToken)>;

/// The [`Target`] of an operation on `key` by `token`.
pub(super) fn target(key: &str, token: &OwnerToken) -> Target {
    Arc::new((key.into(), token.clone()))
}

/// One node's request of an operation.
type NodeCall<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// How one fan-out runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Call<'a> {
    /// The operation, for timeout errors.
    pub op: &'static str,
    /// The lease key, for timeout errors.
    pub key: &'a str,
    /// Each node's answer must arrive by then (`None`: the node's own timeout).
    pub deadline: Option<Instant>,
    /// Whether the replies mark nodes (un)responsive: real requests do; a
    /// fence raise or a subscription does not speak for the node's health.
    pub mark: bool,
    /// Only these nodes (`None`: all).
    pub only: Option<&'a [usize]>,
}

impl<'a> Call<'a> {
    /// A call to every node, bounded by `deadline`, marking slow nodes.
    pub(super) fn new(op: &'static str, key: &'a str, deadline: Option<Instant>) -> Self {
        Call {
            op,
            key,
            deadline,
            mark: true,
            only: None,
        }
    }
}

/// One node of a quorum, owned (a handle on the quorum and the node's index),
/// so that a node's request can outlive the caller that made it.
#[derive(Debug, Clone)]
pub(super) struct NodeRef<N> {
    quorum: Quorum<N>,
    i: usize,
}

impl<N: QuorumNode> Deref for NodeRef<N> {
    type Target = N;

    fn deref(&self) -> &N {
        &self.quorum.nodes()[self.i]
    }
}

/// The requests of one fan-out and their replies, by node; a reply is `None`
/// while its node has not answered.
pub(super) struct Fanout<N: QuorumNode, T: Send + 'static> {
    quorum: Quorum<N>,
    op: &'static str,
    /// The lease key, for timeout errors.
    key: Box<str>,
    mark: bool,
    started: Instant,
    calls: Vec<Option<NodeCall<T>>>,
    pub replies: Vec<Option<Result<T>>>,
    /// The requests still running fail with a timeout then.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Whether this is the background remainder of a dropped fan-out (which
    /// is not handed on again: a runtime shutting down drops it at once).
    detached: bool,
}

impl<N: QuorumNode, T: Send + 'static> std::fmt::Debug for Fanout<N, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fanout")
            .field("op", &self.op)
            .field("key", &self.key)
            .field("running", &self.running())
            .finish()
    }
}

impl<N: QuorumNode, T: Send + 'static> Fanout<N, T> {
    /// Moves the requests and replies out, leaving an empty fan-out.
    pub(super) fn take(&mut self) -> Fanout<N, T> {
        Fanout {
            quorum: self.quorum.clone(),
            op: self.op,
            key: std::mem::take(&mut self.key),
            mark: self.mark,
            started: self.started,
            calls: std::mem::take(&mut self.calls),
            replies: std::mem::take(&mut self.replies),
            deadline: self.deadline.take(),
            detached: false,
        }
    }

    /// Whether node `i`'s request has ended (answered, failed, or was never
    /// made): a request queued after this holds reaches the node behind it.
    /// A request that merely timed out for the decision has not ended.
    pub(super) fn ended(&self, i: usize) -> bool {
        self.calls[i].is_none()
    }

    /// How many requests are still running.
    pub(super) fn running(&self) -> usize {
        self.calls.iter().filter(|c| c.is_some()).count()
    }

    /// How many requests have not answered yet (and are not overdue).
    fn unanswered(&self) -> usize {
        self.calls
            .iter()
            .zip(&self.replies)
            .filter(|(c, r)| c.is_some() && r.is_none())
            .count()
    }

    /// Polls every running request. Once the deadline has passed, those that
    /// have not answered count as timed out — but they are not dropped: they
    /// run on until their node answers or its own (longer) timeout ends them.
    /// A request dropped while still queued on its connection might never be
    /// sent (redis-rs skips a queued request nobody waits for), while the
    /// requests queued behind it would be: a release could be lost that way
    /// behind the vote it was meant to delete. A late answer replaces the
    /// timeout (the follow-ups read it).
    fn poll_calls(&mut self, cx: &mut Context<'_>) {
        for i in 0..self.calls.len() {
            let Some(call) = self.calls[i].as_mut() else {
                continue;
            };
            if let Poll::Ready(reply) = call.as_mut().poll(cx) {
                self.calls[i] = None;
                self.land(i, reply);
            }
        }
        let expired = self.unanswered() > 0
            && self
                .deadline
                .as_mut()
                .is_some_and(|d| d.as_mut().poll(cx).is_ready());
        if expired {
            for i in 0..self.calls.len() {
                if self.calls[i].is_some() && self.replies[i].is_none() {
                    let e = self.quorum.timeout(i, self.op, &self.key, self.started);
                    self.land(i, Err(e));
                }
            }
        }
    }

    /// Records node `i`'s reply.
    fn land(&mut self, i: usize, reply: Result<T>) {
        if self.mark {
            self.quorum.note(i, &reply);
        }
        self.quorum
            .report(i, self.op, &self.key, &reply, self.started);
        self.replies[i] = Some(reply);
    }

    /// Collects replies until `decided` holds or every node asked has
    /// answered or timed out.
    pub(super) async fn until(&mut self, mut decided: impl FnMut(&[Option<Result<T>>]) -> bool) {
        std::future::poll_fn(|cx| {
            self.poll_calls(cx);
            if self.unanswered() == 0 || decided(&self.replies) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Runs every request to its end (each ends by the node's own timeout at
    /// the latest): a request that was queued on its connection has been sent
    /// by then, or never will be, so a request made after this returns reaches
    /// the node behind it.
    pub(super) async fn finish(&mut self) {
        std::future::poll_fn(|cx| {
            self.poll_calls(cx);
            if self.running() == 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

impl<N: QuorumNode, T: Send + 'static> Drop for Fanout<N, T> {
    /// Requests still running are finished by one background task, so that
    /// each is sent and its node marked by its answer.
    fn drop(&mut self) {
        if self.running() == 0 || self.detached {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut rest = self.take();
        rest.detached = true;
        let quorum = rest.quorum.clone();
        quorum.spawn_on(async move { rest.finish().await }, &runtime);
    }
}

impl<N: QuorumNode> Quorum<N> {
    /// Starts `op` on the nodes of `call`: every request is polled once, so it
    /// is queued on its node's connection when this returns.
    pub(super) async fn fan_out<T, F, Fut>(&self, call: Call<'_>, op: F) -> Fanout<N, T>
    where
        T: Send + 'static,
        F: Fn(NodeRef<N>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let n = self.nodes().len();
        let calls = (0..n)
            .map(|i| {
                let asked = call.only.is_none_or(|only| only.contains(&i));
                asked.then(|| {
                    let node = NodeRef {
                        quorum: self.clone(),
                        i,
                    };
                    Box::pin(op(node)) as NodeCall<T>
                })
            })
            .collect();
        let mut fanout = Fanout {
            quorum: self.clone(),
            op: call.op,
            key: call.key.into(),
            mark: call.mark,
            started: Instant::now(),
            calls,
            replies: (0..n).map(|_| None).collect(),
            deadline: call.deadline.map(|d| Box::pin(sleep_until(d))),
            detached: false,
        };
        std::future::poll_fn(|cx| {
            fanout.poll_calls(cx);
            Poll::Ready(())
        })
        .await;
        fanout
    }

    /// Runs `op` on the nodes of `call` and collects the replies until
    /// `decided` says the outcome is known or every node has answered.
    /// Requests still running go on in the background, so a slow node never
    /// holds up a decided operation.
    pub(super) async fn gather<T, F, Fut>(
        &self,
        call: Call<'_>,
        op: F,
        decided: impl FnMut(&[Option<Result<T>>]) -> bool,
    ) -> Vec<Option<Result<T>>>
    where
        T: Send + 'static,
        F: Fn(NodeRef<N>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut fanout = self.fan_out(call, op).await;
        fanout.until(decided).await;
        // The requests still running finish in the background (on drop).
        fanout.replies.iter_mut().map(Option::take).collect()
    }

    fn timeout(&self, node: usize, op: &'static str, key: &str, started: Instant) -> Error {
        Error::Timeout {
            backend: self.names()[node].clone(),
            op,
            key: key.to_string(),
            after: started.elapsed(),
        }
    }

    /// Tells the `tracing` subscriber (at `trace`) and the metrics recorder
    /// how node `i` answered `op`.
    fn report<T>(
        &self,
        i: usize,
        op: &'static str,
        key: &str,
        reply: &Result<T>,
        started: Instant,
    ) {
        let outcome = match reply {
            Ok(_) => "answered",
            Err(Error::Timeout { .. }) => "timed_out",
            Err(Error::Unreachable { .. }) => "unreachable",
            Err(_) => "failed",
        };
        let node = &self.names()[i];
        tracing::trace!(
            op,
            key,
            node = %node,
            outcome,
            latency_us = crate::duration::micros(started.elapsed()),
            "quorum reply"
        );
        crate::telemetry::quorum_reply(node, op, outcome);
    }

    /// Records whether node `i` answered: a timeout marks it unresponsive, any
    /// answer (even an error reply) marks it responsive again.
    fn note<T>(&self, i: usize, reply: &Result<T>) {
        let unresponsive = matches!(reply, Err(Error::Timeout { .. }));
        self.unresponsive()[i].store(unresponsive, Ordering::Relaxed);
    }

    /// How many nodes have not answered yet and may still answer soon: a node
    /// that timed out last time and has not answered since is not counted, so
    /// a decision that only that node could change is taken without it.
    pub(super) fn pending<T>(&self, replies: &[Option<T>]) -> usize {
        replies
            .iter()
            .zip(self.unresponsive())
            .filter(|(r, slow)| r.is_none() && !slow.load(Ordering::Relaxed))
            .count()
    }

    /// One vote per node, in node order.
    pub(super) fn votes<T>(
        &self,
        replies: &[Option<Result<T>>],
        outcome: impl Fn(&T) -> NodeOutcome,
    ) -> Vec<NodeVote> {
        replies
            .iter()
            .zip(self.names())
            .map(|(reply, name)| {
                let o = match reply {
                    None => NodeOutcome::Undecided,
                    Some(Ok(v)) => outcome(v),
                    Some(Err(e)) => NodeOutcome::from_error(e),
                };
                NodeVote::new(name.clone(), o)
            })
            .collect()
    }

    /// The error of an operation fewer than a majority of nodes answered.
    pub(super) fn unavailable(&self, op: &'static str, key: &str, votes: Vec<NodeVote>) -> Error {
        Error::QuorumUnavailable {
            op,
            key: key.to_string(),
            needed: self.quorum(),
            votes,
        }
    }
}

/// How many replies are `Ok` and satisfy `pred`.
pub(super) fn count_ok<T>(replies: &[Option<Result<T>>], pred: impl Fn(&T) -> bool) -> usize {
    replies
        .iter()
        .filter(|r| matches!(r, Some(Ok(v)) if pred(v)))
        .count()
}
