//! The one fan-out every quorum operation uses: send to all nodes (or some) at
//! once, bound each node by a deadline, collect the replies until the caller's
//! decision is known, and keep track of the nodes that stopped answering.
//!
//! A node's request goes on its connection before the fan-out returns
//! ([`launch`]), so each node sees a handle's requests in the order they were
//! made. Replies that arrive after the decision stay in the [`Inbox`], for the
//! callers that follow up on them (late votes of an acquire).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};

use super::node::QuorumNode;
use super::store::Quorum;
use crate::error::{Error, NodeOutcome, NodeVote, Result};
use crate::token::OwnerToken;

/// A lease key and owner token shared by the node tasks of one operation: one
/// allocation per operation instead of a copy of each per node.
pub(super) type Target = Arc<(Box<str>, OwnerToken)>;

/// The [`Target`] of an operation on `key` by `token`.
pub(super) fn target(key: &str, token: &OwnerToken) -> Target {
    Arc::new((key.into(), token.clone()))
}

/// One node's part of an operation, run to its end even when the caller has its
/// answer already.
pub(super) type NodeTask = Pin<Box<dyn Future<Output = ()> + Send>>;

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

/// The replies of one fan-out, by node; `None` while a node has not answered.
#[derive(Debug)]
pub(super) struct Inbox<T> {
    pub replies: Vec<Option<Result<T>>>,
    rx: mpsc::UnboundedReceiver<(usize, Result<T>)>,
}

impl<T> Inbox<T> {
    /// Collects replies until `decided` holds, every node has answered, or
    /// `wait` (if any) has passed.
    pub(super) async fn until(
        &mut self,
        wait: Option<Instant>,
        mut decided: impl FnMut(&[Option<Result<T>>]) -> bool,
    ) {
        while !decided(&self.replies) {
            let next = match wait {
                Some(wait) => timeout_at(wait, self.rx.recv()).await.ok().flatten(),
                None => self.rx.recv().await,
            };
            let Some((i, reply)) = next else { break };
            self.replies[i] = Some(reply);
        }
    }

    /// Waits for the next reply, stores it and returns its node (`None` once
    /// every node has answered).
    pub(super) async fn next(&mut self) -> Option<usize> {
        let (i, reply) = self.rx.recv().await?;
        self.replies[i] = Some(reply);
        Some(i)
    }
}

impl<N: QuorumNode> Quorum<N> {
    /// One task per node of `call` running `op`, and the inbox their replies go
    /// to. Nothing runs until the tasks are polled: see [`launch`].
    pub(super) fn tasks<T, F, Fut>(&self, call: Call<'_>, op: F) -> (Vec<NodeTask>, Inbox<T>)
    where
        T: Send + 'static,
        F: Fn(N) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let n = self.nodes().len();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut tasks = Vec::with_capacity(n);
        // Only a timeout error needs the key, so it is copied once and shared.
        let key: Arc<str> = Arc::from(call.key);
        for (i, node) in self.nodes().iter().enumerate() {
            if call.only.is_some_and(|only| !only.contains(&i)) {
                continue;
            }
            let request = op(node.clone());
            let (tx, me, key) = (tx.clone(), self.clone(), Arc::clone(&key));
            let (op_name, deadline, mark) = (call.op, call.deadline, call.mark);
            tasks.push(Box::pin(async move {
                let started = Instant::now();
                let reply = match deadline {
                    None => request.await,
                    Some(deadline) => match timeout_at(deadline, request).await {
                        Ok(reply) => reply,
                        Err(_) => Err(me.timeout(i, op_name, &key, started)),
                    },
                };
                if mark {
                    me.note(i, &reply);
                }
                me.report(i, op_name, &key, &reply, started);
                let _ = tx.send((i, reply));
            }) as NodeTask);
        }
        let replies = (0..n).map(|_| None).collect();
        (tasks, Inbox { replies, rx })
    }

    /// Starts `op` on the nodes of `call`; the requests are on the wire when this
    /// returns.
    pub(super) async fn fan_out<T, F, Fut>(&self, call: Call<'_>, op: F) -> Inbox<T>
    where
        T: Send + 'static,
        F: Fn(N) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let (tasks, inbox) = self.tasks(call, op);
        launch(tasks).await;
        inbox
    }

    /// Runs `op` on the nodes of `call` and collects the replies until `decided`
    /// says the outcome is known or every node has answered. Tasks still running
    /// go on in the background, so a slow node never holds up a decided
    /// operation.
    pub(super) async fn gather<T, F, Fut>(
        &self,
        call: Call<'_>,
        op: F,
        decided: impl FnMut(&[Option<Result<T>>]) -> bool,
    ) -> Vec<Option<Result<T>>>
    where
        T: Send + 'static,
        F: Fn(N) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut inbox = self.fan_out(call, op).await;
        inbox.until(None, decided).await;
        inbox.replies
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

/// Polls every task once in the caller's context, then spawns those still
/// running. The first poll puts each node's request on that node's connection
/// *now*, so requests reach every node in the order the caller made them: a
/// release that returned early (a majority answered) is never overtaken on a
/// slower node by the caller's next acquire, and an acquire that returned early
/// is never overtaken by its own release.
pub(super) async fn launch(tasks: Vec<NodeTask>) {
    let mut tasks = tasks;
    let mut running = Vec::with_capacity(tasks.len());
    std::future::poll_fn(|cx| {
        for mut task in tasks.drain(..) {
            if task.as_mut().poll(cx).is_pending() {
                running.push(task);
            }
        }
        Poll::Ready(())
    })
    .await;
    for task in running {
        tokio::spawn(task);
    }
}
