//! The waiting line of a lease on one Redis master: waiters stand in a list
//! (`tenure:{KEY}:queue`) and a release hands the lease to the first live one
//! and wakes only that waiter, so a contended lease changes hands in FIFO
//! order with one notification per hand-off (`scripts/lease_wait.lua`,
//! `scripts/lease_leave.lua`; the hand-off itself is in
//! `scripts/lease_line.lua`, shared with the release).
//!
//! A wait's first look is its first attempt (`look_in_line` with no place):
//! it takes a free key when nobody lives in line and otherwise stands in
//! line at once; `ready_watch` gives it a watch before that look when
//! the release channel is subscribed already. A hand-off publishes
//! the waiter's token, and the waiter claims the lease with its next look; for
//! a TTL of at most half a second it publishes `<token> <fence> <entry>`, and
//! the waiter whose last look wrote `entry` takes the lease from the message
//! (see `lease/line.rs`).
//!
//! Each entry carries the waiter's token, its TTL and an expiry on the
//! server's clock that every look of the waiter pushes forward, and so does
//! the process's keeper (`keeper.rs`: one call per line every 250 ms for all
//! the process's waiters in it, whose looks are then answered in the
//! process): a waiter that disappears without leaving the line (killed, cut
//! off) is skipped once its entry has gone a second without a refresh. A
//! lease handed to a waiter is set for it for its TTL or half a second,
//! whichever is shorter, and the waiter's look claims the rest: a waiter that
//! died just before its hand-off holds the lease no longer. A release with
//! nobody in line publishes nothing; so that observers of releases (an
//! election's observer, a run-once waiter) are still woken,
//! [`watch_releases`](RedisStore) puts an observer's marker in the line while
//! it watches.

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis::Script;

use super::keys::millis;
use super::keys::suffix::{FENCE, HOLDER, LEASE, QUEUE, RELEASED};
use super::lease::{Grant, RedisStore, line_script};
use super::subscriber::TurnWatch;
use crate::error::Result;
use crate::lease::{AcquireReply, HolderInfo, QueuePlace, ReleaseOutcome, ReleaseWatch};
use crate::token::OwnerToken;

/// A waiter's look may grant, and record the holder: the line's helpers
/// and `scripts/lease_holder.lua`. A first look behind others ends in
/// `scripts/lease_stand.lua`, before those helpers are defined.
pub(super) const WAIT_LUA: &str = concat!(
    include_str!("scripts/lease_settings.lua"),
    include_str!("scripts/lease_line_basics.lua"),
    include_str!("scripts/lease_stand.lua"),
    include_str!("scripts/lease_fence.lua"),
    include_str!("scripts/lease_holder.lua"),
    include_str!("scripts/lease_line.lua"),
    include_str!("scripts/lease_wait.lua")
);
/// A look's reply: `{won, value, place}`, or the place alone from a first
/// look that stood behind others without looking at the key (a bulk string,
/// `scripts/lease_stand.lua`), read as `{0, -1, place}`.
struct Look(i64, i64, String);

impl redis::FromRedisValue for Look {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        match v {
            redis::Value::BulkString(place) => Ok(Look(0, -1, String::from_utf8(place)?)),
            v => {
                let (won, value, place) = <(i64, i64, String)>::from_redis_value(v)?;
                Ok(Look(won, value, place))
            }
        }
    }
}

pub(super) const LEAVE_LUA: &str = line_script!("lease_leave.lua");
const OBSERVE_LUA: &str = line_script!("lease_observe.lua");
static OBSERVE: LazyLock<Script> = LazyLock::new(|| Script::new(OBSERVE_LUA));

/// How long an observer's marker lives without a refresh.
const MARKER_LIFETIME: Duration = Duration::from_secs(30);

/// How often a watching observer refreshes its marker.
const MARKER_REFRESH: Duration = Duration::from_secs(10);

impl RedisStore {
    /// One look of a waiter in line (see [`LeaseStore::wait_turn`]).
    ///
    /// [`LeaseStore::wait_turn`]: crate::lease::LeaseStore::wait_turn
    pub(super) async fn look_in_line(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        // Every name of the look in one allocation.
        let names = self
            .keys()
            .names(key, [LEASE, FENCE, QUEUE, HOLDER, RELEASED]);
        let [lease, fence, queue, holder_key, channel] = names.get();
        if place.is_some()
            && let Some(quiet) = self.quiet_look(channel, token)
        {
            return Ok(quiet);
        }
        let mut start = self.look_starts(channel, token, place.is_none());
        let kept = start.take_kept();
        let keys = [lease, fence, queue, holder_key];
        let ttl_ms = millis(ttl).to_string();
        // The entry this process last wrote: the keeper may have replaced
        // the one the waiter knows.
        let old = place.map_or("", |p| kept.as_deref().unwrap_or(p.as_str()));
        let behind = if start.behind() { "1" } else { "" };
        let recorded = super::holder::acquire_args(holder);
        let mut args = vec![token.as_str(), &ttl_ms, channel, old, behind];
        args.extend(recorded.iter().map(String::as_str));
        let grant = Grant {
            op: "wait",
            key,
            token,
            ttl,
        };
        let looked = self
            .run_grant(
                grant,
                self.counters().wait.pair(),
                &keys,
                &args,
                |Look(won, value, place)| (won, value, Some(place)),
            )
            .await?;
        let stood = match &looked {
            (AcquireReply::Held { ttl_left }, Some(place)) => Some((place.as_str(), *ttl_left)),
            _ => None,
        };
        self.look_ends(key, channel, token, start, stood);
        Ok(looked)
    }

    /// Leaves the line of `key` and passes on a lease handed to `token`
    /// meanwhile (see [`LeaseStore::leave_line`]).
    ///
    /// [`LeaseStore::leave_line`]: crate::lease::LeaseStore::leave_line
    pub(super) async fn leave(
        &self,
        key: &str,
        token: &OwnerToken,
        place: Option<&QueuePlace>,
    ) -> Result<ReleaseOutcome> {
        let keys = self.keys().lease_fence_queue(key);
        let channel = self.keys().released(key);
        let args = [
            token.as_str(),
            &channel,
            place.map_or("", QueuePlace::as_str),
        ];
        let passed: i64 = self
            .run_script("leave", self.counters().leave.pair(), &keys, &args)
            .await?;
        Ok(if passed == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// A watch on the release channel of `key`: for hand-offs to `token`, or
    /// (`None`) for every release — with `mark`, with an observer's marker in
    /// line for as long as the watch lives (a quorum node needs none: its
    /// releases wake everyone). Without a subscriber the watch polls.
    pub(super) async fn watch_channel(
        &self,
        key: &str,
        token: Option<&OwnerToken>,
        mark: bool,
    ) -> ReleaseWatch {
        let Some(sub) = self.subscriber().await else {
            return ReleaseWatch::polling();
        };
        let channel = self.keys().released(key);
        if let Some(token) = token {
            return match sub.watch_turn(channel, token.as_str()).await {
                Some(turn) => self.turn_release_watch(turn),
                None => ReleaseWatch::polling(),
            };
        }
        let Some(rx) = sub.watch_all(channel).await else {
            return ReleaseWatch::polling();
        };
        if !mark {
            return ReleaseWatch::from_channel(rx, None);
        }
        match Observer::start(self.clone(), key).await {
            Ok(observer) => ReleaseWatch::from_channel(rx, Some(Box::new(observer))),
            Err(e) => {
                // Without a marker a release with nobody in line is not
                // published: poll instead of waiting for it.
                tracing::debug!(key, error = %e, "cannot mark the waiting line; polling");
                ReleaseWatch::polling()
            }
        }
    }

    /// A watch for hand-offs to `token` that needs no round trip: the
    /// release channel of `key` is subscribed and confirmed in this process
    /// (see [`LeaseStore::ready_turn_watch`]).
    ///
    /// [`LeaseStore::ready_turn_watch`]: crate::lease::LeaseStore::ready_turn_watch
    pub(super) fn ready_watch(&self, key: &str, token: &OwnerToken) -> Option<ReleaseWatch> {
        let sub = self.subscriber_if_open()?;
        let turn = sub.ready_turn(self.keys().released(key), token.as_str())?;
        Some(self.turn_release_watch(turn))
    }

    /// A waiter's watch that takes its watcher away when dropped.
    fn turn_release_watch(&self, turn: TurnWatch) -> ReleaseWatch {
        ReleaseWatch::for_signal(turn.receiver, self.trusts_handoffs())
            .keeping(Box::new(turn.unwatch))
    }

    /// Puts (or refreshes) an observer's marker in the line of `key`.
    async fn mark(&self, key: &str, id: &str, last: &str) -> Result<String> {
        let queue = self.keys().lease_fence_queue(key)[2].clone();
        let lifetime = millis(MARKER_LIFETIME).to_string();
        self.run_script(
            "watch",
            (&OBSERVE, OBSERVE_LUA),
            &[queue],
            &[id, &lifetime, last],
        )
        .await
    }
}

/// An observer's marker in a waiting line, refreshed by a task until dropped;
/// dropping it removes the marker (in the background: nothing blocks in
/// `Drop`; [`Coordinator::close`](crate::Coordinator::close) waits for it).
struct Observer {
    store: RedisStore,
    key: String,
    marker: Arc<Mutex<String>>,
    refresh: tokio::task::AbortHandle,
}

impl Observer {
    async fn start(store: RedisStore, key: &str) -> Result<Observer> {
        let id = OwnerToken::generate()?;
        let marker = Arc::new(Mutex::new(store.mark(key, id.as_str(), "").await?));
        let (task_store, task_key, task_marker) =
            (store.clone(), key.to_string(), Arc::clone(&marker));
        let refresh = tokio::spawn(async move {
            loop {
                tokio::time::sleep(MARKER_REFRESH).await;
                let last = task_marker.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match task_store.mark(&task_key, id.as_str(), &last).await {
                    Ok(next) => *task_marker.lock().unwrap_or_else(|e| e.into_inner()) = next,
                    Err(e) => tracing::debug!(key = task_key, error = %e, "refreshing an observer's marker failed"),
                }
            }
        })
        .abort_handle();
        Ok(Observer {
            store,
            key: key.to_string(),
            marker,
            refresh,
        })
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.refresh.abort();
        let marker = self
            .marker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, queue) = (
            self.store.clone(),
            self.store.keys().lease_fence_queue(&self.key)[2].clone(),
        );
        crate::lease::cleanup::spawn(&handle, async move {
            let _ = store
                .conn()
                .call("unwatch", &queue.clone(), |mut c| async move {
                    redis::cmd("LREM")
                        .arg(&queue)
                        .arg(1)
                        .arg(&marker)
                        .query_async::<i64>(&mut c)
                        .await
                })
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::lease::{CLAIM_WINDOW, PLACE_LIFETIME};

    /// The scripts' timings are the lease layer's.
    #[test]
    fn the_line_scripts_use_the_lease_layers_timings() {
        let ms = crate::duration::millis;
        let place = format!("local PLACE_MS = {}\n", ms(PLACE_LIFETIME));
        let claim = format!("local CLAIM_MS = {}\n", ms(CLAIM_WINDOW));
        assert!(super::WAIT_LUA.contains(&place), "{place}");
        assert!(super::WAIT_LUA.contains(&claim), "{claim}");
    }

    /// A stand's reply is its place alone; every other look answers the
    /// array; a place that is not text is a parsing error, not a panic.
    #[test]
    fn a_look_reads_a_stands_place_and_the_array() {
        use redis::{FromRedisValue, Value};

        use super::Look;
        let stand = Look::from_redis_value(Value::BulkString(b"17 3000 tok".to_vec())).unwrap();
        assert_eq!((stand.0, stand.1, stand.2.as_str()), (0, -1, "17 3000 tok"));
        let array = Value::Array(vec![
            Value::Int(1),
            Value::Int(42),
            Value::BulkString(Vec::new()),
        ]);
        let grant = Look::from_redis_value(array).unwrap();
        assert_eq!((grant.0, grant.1, grant.2.as_str()), (1, 42, ""));
        assert!(Look::from_redis_value(Value::BulkString(vec![0xff, 0xfe])).is_err());
    }
}
