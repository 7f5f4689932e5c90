//! Waking the waiters of a SQLite file without polling.
//!
//! One [`Notifier`] per database file and process, alive while something in
//! the process watches a key of that file. It remembers, per watched key, the
//! lease row's *state*: its fence and owner token, which change on every
//! grant, hand-off and release and never on a renewal (fences never repeat, so
//! a state never comes back). A watcher is woken when the state of its key
//! changes in a way that concerns it: an observer on any change, a waiter in
//! line when the lease is handed to its token or becomes free.
//!
//! Changes arrive two ways:
//! - from this process: every committed grant, hand-off and release reports
//!   the new state at once ([`SqliteStore::changed`]);
//! - from other processes: a task follows the file's change events
//!   ([`FileEvents`], inotify on Linux) and re-reads the watched rows after
//!   each burst, in one read transaction. Where the OS gives no events it
//!   re-reads them every [`SqliteOptions::poll_interval`](super::SqliteOptions)
//!   instead — still one read per process for all its waiters, instead of a
//!   write transaction per waiter.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};

use rusqlite::{OptionalExtension, TransactionBehavior};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::SqliteStore;
use super::file_events::FileEvents;
use crate::error::Result;
use crate::lease::ReleaseWatch;

/// A lease row's fence and owner token (`None`: no row yet).
pub(crate) type RowState = Option<(i64, Option<String>)>;

/// What wakes a watcher.
#[derive(Debug)]
pub(crate) enum Wanted {
    /// Every change of the key's lease (an observer of releases).
    Any,
    /// The lease handed to this token, or free (a waiter in line).
    Turn(String),
}

#[derive(Debug)]
struct Watcher {
    wanted: Wanted,
    tx: watch::Sender<u64>,
}

#[derive(Debug)]
struct Watched {
    seen: RowState,
    watchers: Vec<Watcher>,
}

/// The watchers of one database file in this process.
#[derive(Debug)]
pub(crate) struct Notifier {
    keys: Mutex<HashMap<String, Watched>>,
    /// The task that follows other processes' changes; stopped with the
    /// notifier.
    follower: Mutex<Option<AbortHandle>>,
}

/// The live notifiers, by canonical database path.
static NOTIFIERS: LazyLock<Mutex<HashMap<PathBuf, Weak<Notifier>>>> = LazyLock::new(Mutex::default);

/// How many notifiers are alive: a change with none skips the registry.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here can leave the maps half-changed: poisoning is ignored.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Notifier {
    /// The notifier of `store`'s file, if something in this process watches
    /// it.
    fn existing(store: &SqliteStore) -> Option<Arc<Notifier>> {
        if LIVE.load(Ordering::Acquire) == 0 {
            return None;
        }
        lock(&NOTIFIERS).get(store.file()).and_then(Weak::upgrade)
    }

    /// The notifier of `store`'s file, started (with its follower) if none
    /// is alive.
    fn get_or_start(store: &SqliteStore) -> Arc<Notifier> {
        let file = store.file().to_path_buf();
        let mut all = lock(&NOTIFIERS);
        if let Some(live) = all.get(&file).and_then(Weak::upgrade) {
            return live;
        }
        all.retain(|_, n| n.strong_count() > 0);
        let notifier = Arc::new(Notifier {
            keys: Mutex::default(),
            follower: Mutex::default(),
        });
        LIVE.fetch_add(1, Ordering::AcqRel);
        all.insert(file, Arc::downgrade(&notifier));
        drop(all);
        let events = FileEvents::open(store.file());
        let task = tokio::spawn(follow(Arc::downgrade(&notifier), store.clone(), events));
        *lock(&notifier.follower) = Some(task.abort_handle());
        notifier
    }

    fn is_watched(&self, key: &str) -> bool {
        lock(&self.keys).contains_key(key)
    }

    /// A new watcher of `key`, whose state (when first watched) is `state`.
    fn add(&self, key: &str, state: RowState, wanted: Wanted) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(0);
        lock(&self.keys)
            .entry(key.to_string())
            .or_insert_with(|| Watched {
                seen: state,
                watchers: Vec::new(),
            })
            .watchers
            .push(Watcher { wanted, tx });
        rx
    }

    /// Records that `key` is now in `state`, and wakes the watchers the
    /// change concerns.
    fn update(&self, key: &str, state: RowState) {
        let mut keys = lock(&self.keys);
        let Some(watched) = keys.get_mut(key) else {
            return;
        };
        if watched.seen == state {
            return;
        }
        let owner = state.as_ref().and_then(|(_, token)| token.as_deref());
        watched.watchers.retain(|w| !w.tx.is_closed());
        for w in &watched.watchers {
            let concerned = match &w.wanted {
                Wanted::Any => true,
                Wanted::Turn(token) => owner.is_none_or(|o| o == token),
            };
            if concerned {
                w.tx.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
        watched.seen = state;
    }

    /// The keys somebody still watches (forgetting the others).
    fn watched_keys(&self) -> Vec<String> {
        let mut keys = lock(&self.keys);
        keys.retain(|_, w| {
            w.watchers.retain(|x| !x.tx.is_closed());
            !w.watchers.is_empty()
        });
        keys.keys().cloned().collect()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        if let Some(task) = lock(&self.follower).take() {
            task.abort();
        }
    }
}

/// Follows the changes other processes make to the file until the notifier
/// is gone: after each change event (or poll tick), re-reads the watched rows.
async fn follow(notifier: Weak<Notifier>, store: SqliteStore, mut events: Option<FileEvents>) {
    loop {
        // A writer's event comes when it writes its log, before its commit
        // is visible; it holds the write lock until then. Reading under the
        // write lock (IMMEDIATE, no change, so no write of our own) reads
        // after that commit.
        let behavior = match events.as_mut() {
            Some(ev) => match ev.changed().await {
                Ok(()) => TransactionBehavior::Immediate,
                Err(e) => {
                    tracing::debug!(error = %e, "file events failed; waiters poll");
                    events = None;
                    continue;
                }
            },
            None => {
                tokio::time::sleep(store.inner.poll_interval).await;
                TransactionBehavior::Deferred
            }
        };
        let Some(keys) = notifier.upgrade().map(|n| n.watched_keys()) else {
            return;
        };
        if keys.is_empty() {
            continue;
        }
        match store.row_states(keys, behavior).await {
            Ok(states) => {
                let Some(n) = notifier.upgrade() else { return };
                for (key, state) in states {
                    n.update(&key, state);
                }
            }
            Err(e) => tracing::debug!(error = %e, "re-reading watched leases failed"),
        }
    }
}

impl SqliteStore {
    /// A watch on `key` for what `wanted` says. Falls back to polling when
    /// the key's state cannot be read.
    pub(super) async fn watch_key(&self, key: &str, wanted: Wanted) -> ReleaseWatch {
        let notifier = Notifier::get_or_start(self);
        // The state is read after the notifier exists, so every change from
        // here on is seen as one (a change before it wakes nobody: the
        // caller looks after subscribing).
        let state = if notifier.is_watched(key) {
            None
        } else {
            match self
                .row_states(vec![key.to_string()], TransactionBehavior::Deferred)
                .await
            {
                Ok(mut states) => states.pop().and_then(|(_, s)| s),
                Err(e) => {
                    tracing::debug!(key, error = %e, "cannot watch the lease; polling");
                    return ReleaseWatch::polling();
                }
            }
        };
        let rx = notifier.add(key, state, wanted);
        ReleaseWatch::from_channel(rx, Some(Box::new(notifier)))
    }

    /// Reports a committed change of `key` to this process's watchers.
    pub(super) fn changed(&self, key: &str, state: RowState) {
        if let Some(n) = Notifier::existing(self) {
            n.update(key, state);
        }
    }

    /// The state of each of `keys`, in one transaction that only reads.
    async fn row_states(
        &self,
        keys: Vec<String>,
        behavior: TransactionBehavior,
    ) -> Result<Vec<(String, RowState)>> {
        self.transact("watch", "", behavior, move |tx, _| {
            let mut select = tx.prepare("SELECT fence, token FROM tenure_leases WHERE key = ?1")?;
            let mut states = Vec::with_capacity(keys.len());
            for key in &keys {
                let state = select
                    .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                states.push((key.clone(), state));
            }
            Ok(states)
        })
        .await
    }
}
