//! Keeping this process's places in line alive: one transaction per
//! heartbeat for all its waiters of a file, instead of one per waiter.
//!
//! A waiter looks every heartbeat (250 ms) to keep its place, whose expiry a
//! look pushes a [`PLACE_LIFETIME`] (a second) ahead. Most of those looks
//! could only find what the last one found: the lease held by someone else,
//! the waiter still in line. So while nothing concerned the waiter since its last look
//! (the notifier wakes it on a hand-off to it and on a release), its place
//! was refreshed recently and the lease as last seen has not run out, a look
//! is answered in this process, without a transaction ([`Stand`]). Instead,
//! the keeper of the file's notifier refreshes the places of every waiter of
//! the process that still looks, in one transaction per heartbeat, and in the
//! same transaction serves each of their lines whose lease is free (its TTL
//! ran out: nothing in the file changed, so nothing woke anybody) — as any of
//! the waiters' looks would have — and reads how long each lease is held,
//! which is how long its waiters' looks may stay quiet, and who holds it: a
//! change that the follower of other processes' changes has not reported
//! still wakes whom it concerns.
//!
//! A waiter that dies with its process loses its place a [`PLACE_LIFETIME`]
//! after the keeper's last refresh; one whose watch is dropped, or which
//! stops looking, is no longer refreshed. With the keeper late (a busy
//! file), a look finds its place's refresh too old and asks the store.
//!
//! [`Stand`]: super::notify::Stand
//! [`PLACE_LIFETIME`]: crate::lease::PLACE_LIFETIME

use std::collections::HashMap;
use std::sync::Weak;
use std::time::{Duration, Instant};

use rusqlite::TransactionBehavior;
use tokio::time::MissedTickBehavior;

use super::line::{self, Served};
use super::notify::{Kept, Notifier};
use super::{Commit, SqliteStore};
use crate::error::Result;
use crate::lease::HEARTBEAT;

/// Refreshes the places of `notifier`'s waiters every [`HEARTBEAT`] until
/// the notifier is gone.
pub(super) async fn keep(notifier: Weak<Notifier>, store: SqliteStore) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(places) = notifier.upgrade().map(|n| n.kept()) else {
            return;
        };
        if places.is_empty() {
            continue;
        }
        let began = Instant::now();
        match store.keep_places(places.clone()).await {
            Ok((alive, served)) => {
                let Some(n) = notifier.upgrade() else { return };
                for (place, alive) in places.iter().zip(alive) {
                    let held_for = served.get(&place.key).and_then(|s| s.held_for);
                    n.refreshed(place, began, alive.then_some(held_for));
                }
                // A hand-off by the keeper, or a change that the follower
                // has not reported (yet): whom it concerns is woken.
                for (key, s) in served {
                    store.changed(&key, s.state);
                }
            }
            Err(e) => tracing::debug!(error = %e, "keeping the places in line failed"),
        }
    }
}

/// What a look began with: the waiter's wake count, when it watches.
pub(super) struct LookStart {
    seen: Option<u64>,
    began: Instant,
}

impl SqliteStore {
    /// The answer to a look by `token` from `place` in `key`'s line when
    /// its last look stands for it (see the module's docs): how long the
    /// lease has left.
    pub(super) fn quiet_look(&self, key: &str, token: &str, place: i64) -> Option<Duration> {
        Notifier::existing(self)?.quiet_look(key, token, place)
    }

    /// Notes a look by `token` in `key`'s line before it is sent.
    pub(super) fn look_starts(&self, key: &str, token: &str) -> LookStart {
        LookStart {
            seen: Notifier::existing(self).and_then(|n| n.wakes(key, token)),
            began: Instant::now(),
        }
    }

    /// Notes where the look `start` left the waiter: at `place` while the
    /// lease is held for `held_for`, or (`None`) without a place or holder.
    pub(super) fn look_ends(
        &self,
        key: &str,
        token: &str,
        start: LookStart,
        at: Option<(i64, Duration)>,
    ) {
        let (Some(seen), Some(n)) = (start.seen, Notifier::existing(self)) else {
            return;
        };
        n.stood(key, token, seen, start.began, at);
    }

    /// Refreshes `places` and serves the free leases of their lines, in one
    /// transaction. Returns which places were still in line, and what
    /// serving each line found and did.
    async fn keep_places(&self, places: Vec<Kept>) -> Result<(Vec<bool>, HashMap<String, Served>)> {
        // Relaxed, as the looks it stands for.
        self.transact_as(
            Commit::Relaxed,
            "wait",
            "",
            TransactionBehavior::Immediate,
            move |tx, now| {
                let refresh: Vec<(i64, &str)> =
                    places.iter().map(|p| (p.place, p.token.as_str())).collect();
                let alive = line::refresh_places(tx, &refresh, now)?;
                let mut served = HashMap::new();
                for p in &places {
                    if !served.contains_key(&p.key) {
                        served.insert(p.key.clone(), line::serve(tx, &p.key, now)?);
                    }
                }
                Ok((alive, served))
            },
        )
        .await
    }
}
