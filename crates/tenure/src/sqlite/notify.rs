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
//!
//! The notifier also remembers where each of its waiters stands in line
//! after its last look ([`Stand`]), so that the waiter's next look can be
//! answered without a transaction while nothing concerned it (see the
//! `keeper` module, which keeps those places alive).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use rusqlite::{OptionalExtension, TransactionBehavior};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::SqliteStore;
use super::file_events::FileEvents;
use super::keeper;
use crate::error::Result;
use crate::lease::{HEARTBEAT, ReleaseWatch};

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
    tx: watch::Sender<u64>,
    /// Where a waiter stood after its last look, while that look may stand
    /// for its next ones.
    stand: Option<Stand>,
}

impl Watcher {
    fn new(tx: watch::Sender<u64>) -> Self {
        Watcher { tx, stand: None }
    }

    fn wake(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// How often the watcher was woken: a change that concerned it since a
    /// look began changed this.
    fn wakes(&self) -> u64 {
        *self.tx.borrow()
    }
}

/// A waiter's place in line as its last look (or the keeper) left it.
#[derive(Debug, Clone)]
pub(crate) struct Stand {
    /// The place (its rowid).
    place: i64,
    /// The watcher's wake count when that look began.
    seen: u64,
    /// When the place was last refreshed: the refreshing transaction began
    /// then or later, so the place lives a
    /// [lifetime](crate::lease::PLACE_LIFETIME) past this at least.
    refreshed: Instant,
    /// When the waiter last looked (answered quietly or not).
    looked: Instant,
    /// When the lease, as the look found it, runs out at the earliest.
    held_until: Instant,
}

/// A look may be answered from a [`Stand`] while its place was refreshed
/// less than two heartbeats ago: the place then still has half of its
/// [lifetime](crate::lease::PLACE_LIFETIME) left.
const QUIET_FOR: Duration = HEARTBEAT.saturating_mul(2);

/// A place is kept alive for its waiter only while the waiter looked within
/// two heartbeats: a waiter that stops looking (its task no longer polled)
/// loses its place as if it had died.
const KEPT_WHILE_LOOKING: Duration = HEARTBEAT.saturating_mul(2);

/// A place the keeper refreshes.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) place: i64,
}

#[derive(Debug, Default)]
struct Watched {
    seen: RowState,
    /// Observers of every change.
    any: Vec<Watcher>,
    /// Waiters in line, by owner token: one watch each.
    turns: HashMap<String, Watcher>,
}

impl Watched {
    fn is_empty(&self) -> bool {
        self.any.is_empty() && self.turns.is_empty()
    }

    fn forget_closed(&mut self) {
        self.any.retain(|w| !w.tx.is_closed());
        self.turns.retain(|_, w| !w.tx.is_closed());
    }

    /// A new watcher for what `wanted` says.
    fn add(&mut self, wanted: Wanted) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(0);
        match wanted {
            Wanted::Any => self.any.push(Watcher::new(tx)),
            // A waiter watches once per token: a second watch replaces it.
            Wanted::Turn(token) => {
                self.turns.insert(token, Watcher::new(tx));
            }
        }
        rx
    }

    /// The live watch of the waiter `token`.
    fn turn(&mut self, token: &str) -> Option<&mut Watcher> {
        self.turns.get_mut(token).filter(|w| !w.tx.is_closed())
    }
}

/// The watchers of one database file in this process.
#[derive(Debug)]
pub(crate) struct Notifier {
    keys: Mutex<HashMap<String, Watched>>,
    /// The tasks that follow other processes' changes and keep this
    /// process's places in line; stopped with the notifier.
    tasks: Mutex<Vec<AbortHandle>>,
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
    pub(super) fn existing(store: &SqliteStore) -> Option<Arc<Notifier>> {
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
            tasks: Mutex::default(),
        });
        LIVE.fetch_add(1, Ordering::AcqRel);
        all.insert(file, Arc::downgrade(&notifier));
        drop(all);
        let events = FileEvents::open(store.file());
        let weak = Arc::downgrade(&notifier);
        let follower = tokio::spawn(follow(weak.clone(), store.clone(), events));
        let keeper = tokio::spawn(keeper::keep(weak, store.clone()));
        *lock(&notifier.tasks) = vec![follower.abort_handle(), keeper.abort_handle()];
        notifier
    }

    fn is_watched(&self, key: &str) -> bool {
        lock(&self.keys).contains_key(key)
    }

    /// A new watcher of `key`, whose state (when first watched) is `state`.
    fn add(&self, key: &str, state: RowState, wanted: Wanted) -> watch::Receiver<u64> {
        let mut keys = lock(&self.keys);
        keys.entry(key.to_string())
            .or_insert_with(|| Watched {
                seen: state,
                ..Watched::default()
            })
            .add(wanted)
    }

    /// A new watcher of `key` when `key` is watched already (its state is
    /// known), else `None`.
    fn add_if_watched(&self, key: &str, wanted: Wanted) -> Option<watch::Receiver<u64>> {
        lock(&self.keys).get_mut(key).map(|w| w.add(wanted))
    }

    /// Records that `key` is now in `state`, and wakes the watchers the
    /// change concerns: every observer, and the waiter the lease was handed
    /// to — every waiter when it is free.
    fn update(&self, key: &str, state: RowState) {
        let mut keys = lock(&self.keys);
        let Some(watched) = keys.get_mut(key) else {
            return;
        };
        if watched.seen == state {
            return;
        }
        // Closed waiters' watches are forgotten by `kept`, a few times a
        // second: a change costs the same however many wait.
        watched.any.retain(|w| !w.tx.is_closed());
        watched.any.iter().for_each(Watcher::wake);
        match state.as_ref().and_then(|(_, token)| token.as_deref()) {
            Some(owner) => watched.turns.get(owner).into_iter().for_each(Watcher::wake),
            None => watched.turns.values().for_each(Watcher::wake),
        }
        watched.seen = state;
    }

    /// The keys somebody still watches (forgetting the others; a key whose
    /// waiters all left is forgotten by `kept`).
    fn watched_keys(&self) -> Vec<String> {
        let mut keys = lock(&self.keys);
        keys.retain(|_, w| {
            w.any.retain(|x| !x.tx.is_closed());
            !w.is_empty()
        });
        keys.keys().cloned().collect()
    }

    /// How often the waiter `token` of `key` was woken, while it watches.
    pub(crate) fn wakes(&self, key: &str, token: &str) -> Option<u64> {
        let mut keys = lock(&self.keys);
        keys.get_mut(key)?.turn(token).map(|w| w.wakes())
    }

    /// After a look that began at `began` with the waiter woken `seen`
    /// times: it stands at `place` while the lease is held for `held_for`
    /// (`None`: the look left it without a place, or found no holder).
    pub(crate) fn stood(
        &self,
        key: &str,
        token: &str,
        seen: u64,
        began: Instant,
        at: Option<(i64, Duration)>,
    ) {
        let mut keys = lock(&self.keys);
        let Some(watcher) = keys.get_mut(key).and_then(|w| w.turn(token)) else {
            return;
        };
        watcher.stand = at.map(|(place, held_for)| Stand {
            place,
            seen,
            refreshed: began,
            looked: began,
            held_until: began + held_for,
        });
    }

    /// The answer to a look by the waiter `token` of `key` from `place`,
    /// when its last look stands for it: its watch lives, nothing concerned
    /// it since (a hand-off to it, a release), its place was refreshed
    /// within [`QUIET_FOR`] and the lease as last seen has not run out. Then
    /// a look could only find what the last one found. Returns how long
    /// that lease has left.
    pub(crate) fn quiet_look(&self, key: &str, token: &str, place: i64) -> Option<Duration> {
        let mut keys = lock(&self.keys);
        let watcher = keys.get_mut(key)?.turn(token)?;
        let wakes = watcher.wakes();
        let stand = watcher.stand.as_mut()?;
        let now = Instant::now();
        let quiet = stand.place == place
            && stand.seen == wakes
            && now.saturating_duration_since(stand.refreshed) < QUIET_FOR
            && now < stand.held_until;
        if !quiet {
            return None;
        }
        stand.looked = now;
        Some(stand.held_until - now)
    }

    /// The places to keep alive: those of the waiters that watch and looked
    /// within [`KEPT_WHILE_LOOKING`] (forgetting closed watches, and keys
    /// nobody watches).
    pub(crate) fn kept(&self) -> Vec<Kept> {
        let now = Instant::now();
        let mut keys = lock(&self.keys);
        keys.retain(|_, w| {
            w.forget_closed();
            !w.is_empty()
        });
        let mut kept = Vec::new();
        for (key, watched) in keys.iter() {
            for (token, watcher) in &watched.turns {
                let Some(stand) = &watcher.stand else {
                    continue;
                };
                if now.saturating_duration_since(stand.looked) < KEPT_WHILE_LOOKING {
                    kept.push(Kept {
                        key: key.clone(),
                        token: token.clone(),
                        place: stand.place,
                    });
                }
            }
        }
        kept
    }

    /// The keeper's transaction, begun at `began`, refreshed `place` and
    /// found its lease held for `Some(held_for)` (`Some(None)`: free), or
    /// found the place gone (`None`): then the waiter's next look asks the
    /// store.
    pub(crate) fn refreshed(&self, place: &Kept, began: Instant, kept: Option<Option<Duration>>) {
        let mut keys = lock(&self.keys);
        let Some(watcher) = keys.get_mut(&place.key).and_then(|w| w.turn(&place.token)) else {
            return;
        };
        let Some(stand) = watcher.stand.as_mut().filter(|s| s.place == place.place) else {
            return;
        };
        match kept {
            Some(held_for) => {
                stand.refreshed = stand.refreshed.max(began);
                stand.held_until = began + held_for.unwrap_or_default();
            }
            None => watcher.stand = None,
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        for task in lock(&self.tasks).drain(..) {
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

    /// A watch on `key` for what `wanted` says, when this process watches
    /// `key` already: it costs no read of the file.
    pub(super) fn ready_watch(&self, key: &str, wanted: Wanted) -> Option<ReleaseWatch> {
        let notifier = Notifier::existing(self)?;
        let rx = notifier.add_if_watched(key, wanted)?;
        Some(ReleaseWatch::from_channel(rx, Some(Box::new(notifier))))
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
            let mut select =
                tx.prepare_cached("SELECT fence, token FROM tenure_leases WHERE key = ?1")?;
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
