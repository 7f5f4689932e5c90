//! One etcd watch per waiting line per process, shared by this process's
//! waiters in it (see `line.rs`).
//!
//! A watch of its own per waiter would make etcd send every change of the
//! line (a release, a take, a place coming or going) once per waiter: N
//! messages per change, so a hand-off costs O(N) with N waiters. Here etcd
//! sends each change once per process; the watch task hands it to every
//! waiter's [`Turn`] here, whose filter wakes at most the waiter it concerns.
//!
//! The first waiter of a line opens the watch and waits for etcd to confirm
//! it; later waiters join it without a round trip
//! ([`LineWatches::join_open`]), so their first look already stands them in
//! line. A waiter joins before its look is sent, so every change after the
//! look's revision reaches its view. When the watch ends (etcd cancels it,
//! the connection breaks), its waiters fall back to polling and the next
//! waiter opens a new one; it is closed with its last waiter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::api::mvccpb::event::EventType;
use super::client::Watch;
use super::lock;
use super::turn::{Change, Turn};
use crate::lease::ReleaseWatch;

/// The waiters of one line in this process, by token.
type Waiters = HashMap<String, Arc<Mutex<Turn>>>;

/// The lines this process watches, by lease key.
#[derive(Default, Clone)]
pub(super) struct LineWatches {
    lines: Arc<Mutex<HashMap<String, Arc<LineWatch>>>>,
}

/// One line's watch and the waiters it feeds.
struct LineWatch {
    waiters: Mutex<Waiters>,
    /// The task reading the etcd watch; set once it is spawned.
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

/// Where a waiter's view of its line is kept, for its looks.
pub(super) struct WaiterId<'a> {
    /// The lease key (the line's name).
    pub(super) lease: &'a str,
    /// The line's prefix.
    pub(super) prefix: &'a str,
    /// The waiter's place.
    pub(super) place: &'a str,
    /// The waiter's token.
    pub(super) token: &'a str,
}

impl LineWatches {
    /// The view of waiter `token` in the line of `lease`, while it watches.
    pub(super) fn turn(&self, lease: &str, token: &str) -> Option<Arc<Mutex<Turn>>> {
        let line = lock(&self.lines).get(lease).cloned()?;
        lock(&line.waiters).get(token).cloned()
    }

    /// Joins the line's watch when this process has one open: no round
    /// trip. `None` when there is none.
    pub(super) fn join_open(&self, id: &WaiterId<'_>) -> Option<ReleaseWatch> {
        let lines = lock(&self.lines);
        let line = lines.get(id.lease)?;
        Some(self.join(line, id))
    }

    /// Joins the line's watch, installing `stream` (a watch etcd confirmed
    /// on the line) as it when this process has none open; a stream not
    /// needed is dropped, which ends that etcd watch.
    pub(super) fn join_or_install(&self, id: &WaiterId<'_>, stream: Watch) -> ReleaseWatch {
        let mut lines = lock(&self.lines);
        if let Some(line) = lines.get(id.lease) {
            return self.join(line, id);
        }
        let line = Arc::new(LineWatch {
            waiters: Mutex::default(),
            task: Mutex::default(),
        });
        lines.insert(id.lease.to_string(), Arc::clone(&line));
        let joined = self.join(&line, id);
        let task = tokio::spawn(feed(
            self.clone(),
            id.lease.to_string(),
            line.clone(),
            stream,
        ));
        *lock(&line.task) = Some(task.abort_handle());
        joined
    }

    /// Registers the waiter's view with `line` (under the lines' lock).
    fn join(&self, line: &Arc<LineWatch>, id: &WaiterId<'_>) -> ReleaseWatch {
        let (tx, rx) = watch::channel(0u64);
        let turn = Turn::new(id.lease, id.prefix, id.place, tx);
        lock(&line.waiters).insert(id.token.to_string(), Arc::new(Mutex::new(turn)));
        let watching = Watching {
            watches: self.clone(),
            line: Arc::clone(line),
            lease: id.lease.to_string(),
            token: id.token.to_string(),
        };
        ReleaseWatch::from_channel(rx, Some(Box::new(watching)))
    }

    /// Forgets `line` if it is still the one watched for `lease`.
    fn remove(lines: &mut HashMap<String, Arc<LineWatch>>, lease: &str, line: &Arc<LineWatch>) {
        if lines.get(lease).is_some_and(|l| Arc::ptr_eq(l, line)) {
            lines.remove(lease);
        }
    }
}

/// Hands every change the etcd watch reports to each waiter of the line;
/// when the watch ends, its waiters poll and the line is forgotten (the
/// next waiter opens a new watch).
async fn feed(watches: LineWatches, lease: String, line: Arc<LineWatch>, mut stream: Watch) {
    while let Ok(Some(reply)) = stream.message().await {
        if reply.canceled {
            break;
        }
        let changes: Vec<Change> = reply
            .events
            .iter()
            .filter_map(|e| {
                let kv = e.kv.as_ref()?;
                Some(Change {
                    rev: kv.mod_revision,
                    key: kv.key.clone(),
                    deleted: e.r#type() == EventType::Delete,
                })
            })
            .collect();
        for turn in lock(&line.waiters).values() {
            lock(turn).saw(changes.iter().cloned());
        }
    }
    let mut lines = lock(&watches.lines);
    LineWatches::remove(&mut lines, &lease, &line);
    for turn in lock(&line.waiters).values() {
        // Dropping the sender makes the waiter poll.
        lock(turn).ended();
    }
}

/// A waiter's share of its line's watch: dropping it forgets the waiter's
/// view, and the last one closes the watch.
struct Watching {
    watches: LineWatches,
    line: Arc<LineWatch>,
    lease: String,
    token: String,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut lines = lock(&self.watches.lines);
        let mut waiters = lock(&self.line.waiters);
        waiters.remove(&self.token);
        if waiters.is_empty() {
            if let Some(task) = lock(&self.line.task).take() {
                task.abort();
            }
            LineWatches::remove(&mut lines, &self.lease, &self.line);
        }
    }
}
