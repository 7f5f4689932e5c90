//! Gates (semaphores, read-write leases) in this process's memory: the pure
//! steps of [`gate`](crate::gate) on a map (fences floored by the host's
//! wall clock), every waiter woken on a change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::clock::{Clock, SystemClock};
use crate::error::Result;
use crate::gate::{
    self, GateAsk, GateKind, GateStatus, GateStore, Look, Mode, Now, Request, State,
};
use crate::lease::{AcquireReply, ExtendReply, QueuePlace, ReleaseOutcome, ReleaseWatch};
use crate::token::OwnerToken;

/// [`GateStore`] in this process's memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryGates {
    inner: Arc<Mutex<HashMap<(GateKind, String), Entry>>>,
}

#[derive(Debug)]
struct Entry {
    state: State,
    changed: watch::Sender<u64>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            state: State::default(),
            changed: watch::channel(0).0,
        }
    }
}

/// Milliseconds on the deadline clock.
fn now_ms() -> i64 {
    i64::try_from(SystemClock.now().since_origin().as_millis()).unwrap_or(i64::MAX)
}

impl MemoryGates {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` on the gate's state; wakes its watchers when `f` says so.
    fn with<T>(
        &self,
        kind: GateKind,
        key: &str,
        f: impl FnOnce(&mut State, Now) -> (T, bool),
    ) -> T {
        // Every update completes under the lock; poisoning cannot leave a
        // gate half-updated.
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry((kind, key.to_string())).or_default();
        let (out, wake) = f(&mut entry.state, Now::host(now_ms()));
        if wake {
            entry.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
        out
    }
}

#[async_trait]
impl GateStore for MemoryGates {
    async fn look(
        &self,
        key: &str,
        ask: GateAsk<'_>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let (request, look) = (Request::look(&ask), Look::of(&ask));
        let answer = self.with(request.kind, key, |state, now| {
            let (answer, woken) = state.look(now, &look.step());
            (answer, !woken.is_empty())
        });
        Ok(request.reply(&answer))
    }

    async fn extend(
        &self,
        mode: Mode,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let request = Request::new(mode, ttl);
        let ok = self.with(request.kind, key, |state, now| {
            (state.extend(now, token.as_str(), request.ttl_ms), false)
        });
        Ok(request.extended(ok))
    }

    async fn release(&self, mode: Mode, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let kind = mode.kind();
        let released = self.with(kind, key, |state, now| {
            let (released, _) = state.release(now, token.as_str());
            (released, true)
        });
        Ok(gate::release_outcome(released))
    }

    async fn status(&self, kind: GateKind, key: &str) -> Result<GateStatus> {
        let storage = format!("{key} ({})", kind.name());
        Ok(self.with(kind, key, |state, now| {
            (gate::status_of(state, now.ms, storage), false)
        }))
    }

    async fn watch(&self, kind: GateKind, key: &str, _token: Option<&OwnerToken>) -> ReleaseWatch {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry((kind, key.to_string())).or_default();
        ReleaseWatch::from_channel(entry.changed.subscribe(), None)
    }

    async fn list(&self, kind: GateKind, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_ms();
        let mut held: Vec<(String, GateStatus)> = map
            .iter()
            .filter(|((k, key), _)| *k == kind && key.starts_with(prefix))
            .map(|((_, key), entry)| {
                let storage = format!("{key} ({})", kind.name());
                (key.clone(), gate::status_of(&entry.state, now, storage))
            })
            .filter(|(_, status)| !status.holders.is_empty())
            .collect();
        held.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(held)
    }

    fn describe_gates(&self) -> String {
        "memory:".into()
    }
}
