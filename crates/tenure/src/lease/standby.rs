//! Monitors started when they are first needed.
//!
//! A guard that renews needs its monitor task only once its first renewal is
//! due (a third of the TTL by default), and one taken from a hand-off only
//! once its claim is due (near the end of the claim window); most guards are
//! released before that: a task per guard from the grant on cost more than
//! the acquire's own work. So such a guard waits here instead. One task per thread that
//! acquires sleeps until the earliest first renewal — re-reading the clock at
//! least every [`SLICE`], as the monitor does, so a host that was suspended
//! is noticed — and starts the monitors of the guards still held then, on the
//! runtime each was acquired on. A guard released before leaves by removing
//! its entry. The task ends after a second in which no guard entered.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::guard::Shared;
use super::monitor::SLICE;
use crate::clock::Moment;

/// How long the task stays after the last guard entered before it ends.
const LINGER: Duration = Duration::from_secs(1);

thread_local! {
    /// This thread's standby.
    static STANDBY: Arc<Standby> = Arc::default();
}

/// The guards of one thread that wait for their monitor.
#[derive(Debug, Default)]
struct Standby {
    state: Mutex<State>,
    /// Wakes the task for an entry earlier than it sleeps.
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    waiting: BTreeMap<(Instant, u64), Entry>,
    next_id: u64,
    /// When the task wakes next; `None` while no task runs.
    task: Option<Instant>,
    /// How many tasks this standby started.
    #[cfg(test)]
    starts: u64,
}

#[derive(Debug)]
struct Entry {
    guard: Weak<Shared>,
    /// When the first renewal is due, on the guard's own clock.
    due: Moment,
    runtime: Handle,
}

impl Entry {
    /// Whether the guard's own clock says its renewal is due (a clock that
    /// counts suspended time runs ahead of tokio's timers).
    fn due_by_its_clock(&self) -> bool {
        self.guard.upgrade().is_some_and(|s| s.now() >= self.due)
    }
}

/// A guard's place in the standby.
#[derive(Debug)]
pub(super) struct Ticket {
    standby: Arc<Standby>,
    key: (Instant, u64),
}

impl Ticket {
    /// Leaves the standby: the guard's monitor is not started by it.
    pub(super) fn leave(&self) {
        self.standby.lock().waiting.remove(&self.key);
    }
}

impl Standby {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Has `shared`'s monitor started when its first renewal is `due` (on its own
/// clock), unless it leaves first. `None` outside a tokio runtime.
pub(super) fn enter(shared: &Arc<Shared>, due: Moment) -> Option<Ticket> {
    let runtime = Handle::try_current().ok()?;
    let at = Instant::now() + due.saturating_duration_since(shared.now());
    let standby = STANDBY.with(Arc::clone);
    let mut state = standby.lock();
    let key = (at, state.next_id);
    state.next_id += 1;
    let entry = Entry {
        guard: Arc::downgrade(shared),
        due,
        runtime: runtime.clone(),
    };
    state.waiting.insert(key, entry);
    let running = state.task;
    if running.is_none_or(|wakes| at < wakes) {
        state.task = Some(at);
    }
    drop(state);
    match running {
        None => {
            #[cfg(test)]
            {
                standby.lock().starts += 1;
            }
            // The guard is part of the future from here on, so it is dropped
            // with it even if the runtime goes away before polling it.
            runtime.spawn(run(Ended {
                standby: Arc::clone(&standby),
                cleanly: false,
            }));
        }
        Some(wakes) if at < wakes => standby.wake.notify_one(),
        Some(_) => {}
    }
    Some(Ticket { standby, key })
}

/// The task: starts the monitors that are due, sleeps until the next. It
/// wakes at least every [`SLICE`], also with nobody waiting, so a guard
/// whose first renewal is further off than that never has to wake it (a
/// wake for an entry that is gone again by then would find nothing to do);
/// it ends once no guard entered for [`LINGER`].
async fn run(mut ended: Ended) {
    let standby = Arc::clone(&ended.standby);
    // The next entry id when the task last looked, and when it last changed
    // (a guard entered).
    let (mut seen, mut entered_by) = (standby.lock().next_id, Instant::now());
    loop {
        let now = Instant::now();
        let (ready, wake) = {
            let mut state = standby.lock();
            if seen != state.next_id {
                (seen, entered_by) = (state.next_id, now);
            }
            let ready = take_due(&mut state.waiting, now);
            let wake = match state.waiting.first_key_value() {
                Some(((at, _), _)) => (*at).min(now + SLICE),
                None if ready.is_empty() && now.saturating_duration_since(entered_by) >= LINGER => {
                    state.task = None;
                    ended.cleanly = true;
                    return;
                }
                None => now + SLICE,
            };
            state.task = Some(wake);
            (ready, wake)
        };
        for entry in ready {
            if let Some(shared) = entry.guard.upgrade() {
                let _runtime = entry.runtime.enter();
                shared.start_monitor();
            }
        }
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = standby.wake.notified() => {}
        }
    }
}

/// How many standby tasks this thread started.
#[cfg(test)]
pub(super) fn starts() -> u64 {
    STANDBY.with(|standby| standby.lock().starts)
}

/// Removes and returns the entries due at `now`, earliest first.
fn take_due(waiting: &mut BTreeMap<(Instant, u64), Entry>, now: Instant) -> Vec<Entry> {
    let mut ready = Vec::new();
    while let Some(first) = waiting.first_entry() {
        if first.key().0 > now && !first.get().due_by_its_clock() {
            break;
        }
        ready.push(first.remove());
    }
    ready
}

/// Marks the task gone if its runtime drops it (mid-sleep, or before it
/// ever ran), so the next entry starts another.
struct Ended {
    standby: Arc<Standby>,
    cleanly: bool,
}

impl Drop for Ended {
    fn drop(&mut self) {
        if !self.cleanly {
            self.standby.lock().task = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Coordinator;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// Holds a renewing lease for 2.5 TTLs; whether it was renewed throughout.
    async fn held_past_its_ttl(key: &str) -> bool {
        let tenure = Coordinator::memory();
        let ttl = Duration::from_secs(1);
        let guard = tenure.lease(key).ttl(ttl).try_acquire().await;
        let guard = guard.expect("acquire").expect("free");
        tokio::time::sleep(ttl * 5 / 2).await;
        let renewed = !guard.is_lost() && guard.remaining() > Duration::ZERO;
        guard.release().await.expect("release");
        renewed
    }

    #[test]
    fn a_guard_is_renewed_after_an_earlier_runtime_on_its_thread_is_gone() {
        // The first runtime starts this thread's standby task and drops it
        // with a guard still waiting; the next one must start its own.
        let first = runtime();
        first.block_on(async {
            let tenure = Coordinator::memory();
            let guard = tenure.lease("first").try_acquire().await;
            std::mem::forget(guard.expect("acquire").expect("free"));
        });
        drop(first);
        assert!(runtime().block_on(held_past_its_ttl("second")));
    }
}
