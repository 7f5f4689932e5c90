//! Keeping this process's places in Redis's waiting lines alive: one script
//! call per line and heartbeat for all the process's waiters in that line,
//! instead of one look per waiter.
//!
//! A waiter looks every heartbeat (250 ms) to keep its place, whose expiry a
//! look pushes a [`PLACE_LIFETIME`] (a second) ahead. Most of those looks
//! could only find what the last one found: the lease held by someone else,
//! the waiter still in line. So while nothing concerned the waiter since its
//! last look (no message for its token on the release channel, no lost
//! subscriber connection), its place was refreshed recently and the lease as
//! last seen has not run out, a look is answered in this process without a
//! round trip ([`Stand`]). Instead, the keeper refreshes the places of every
//! waiter of the process that still looks, one call per line
//! (`scripts/lease_keep.lua`: a line's keys share one hash slot, the lines of
//! different keys need not), and in the same call hands a free lease (its
//! holder's TTL ran out: nothing was published) to the first live waiter,
//! as any waiter's look would have; it reads how long the lease is held,
//! which is how long its waiters' looks may stay quiet, and who holds it: a
//! waiter of this process the lease was handed to is woken even when its
//! notification was lost.
//!
//! The keeper writes a new entry for each place it refreshes, and remembers
//! when it sent that call: a hand-off that names such an entry ran after
//! that, which is what the waiter counts its validity from
//! ([`QueuePlace::written`]).
//!
//! A waiter that dies with its process loses its place a [`PLACE_LIFETIME`]
//! after the keeper's last refresh; one whose watch is dropped, or which
//! stops looking, is no longer refreshed.
//!
//! [`PLACE_LIFETIME`]: crate::lease::PLACE_LIFETIME

use std::collections::HashMap;
use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;
use tokio::time::MissedTickBehavior;

use super::keys::from_millis;
use super::lease::{RedisStore, line_script};
use super::subscriber::{Subscriber, Turn};
use crate::clock::Moment;
use crate::lease::{AcquireReply, HEARTBEAT, QueuePlace};
use crate::token::OwnerToken;

/// Refreshes the places of one process's waiters in one line.
pub(super) const KEEP_LUA: &str = line_script!("lease_keep.lua");

/// A look may be answered from a [`Stand`] while its place was refreshed
/// less than two heartbeats ago: the place then still has half of its
/// [lifetime](crate::lease::PLACE_LIFETIME) left.
const QUIET_FOR: Duration = HEARTBEAT.saturating_mul(2);

/// A place is kept alive for its waiter only while the waiter looked within
/// two heartbeats: a waiter that stops looking (its task no longer polled)
/// loses its place as if it had died.
const KEPT_WHILE_LOOKING: Duration = HEARTBEAT.saturating_mul(2);

/// A place refreshed less than this long ago is left for the next round:
/// refreshed at most two heartbeats apart, it keeps more than half of its
/// [lifetime](crate::lease::PLACE_LIFETIME) and stays within [`QUIET_FOR`],
/// and a waiter that gets its turn within two heartbeats of standing in
/// line (a line that moves) is refreshed once at most.
const FRESH_FOR: Duration = Duration::from_millis(200);

/// The most waiters one keeper call refreshes (a longer list of this
/// process's waiters in one line takes several calls).
const MAX_PER_CALL: usize = 500;

/// A waiter's place in line as its last look (or the keeper) left it.
#[derive(Debug)]
pub(super) struct Stand {
    /// The lease's key.
    key: String,
    /// The waiter's entry in line, as the last call that wrote it wrote it.
    entry: String,
    /// When that call was sent: a hand-off of `entry` ran after this.
    written: Moment,
    /// The waiter's wake count when its last look began.
    seen: u64,
    /// When the place was last refreshed: the refreshing call was sent
    /// then or later, so the place lives a lifetime past this at least.
    refreshed: Instant,
    /// When the waiter last looked (answered quietly or not).
    looked: Instant,
    /// When the lease, as last seen, runs out at the earliest.
    held_until: Instant,
}

impl Stand {
    /// `place` as a hand-off names it: dated when this stand wrote it.
    pub(super) fn dated(&self, place: &str) -> QueuePlace {
        if place == self.entry {
            QueuePlace::written_at(place, self.written)
        } else {
            QueuePlace::new(place)
        }
    }

    /// Whether a look now could only find what the last one found.
    fn is_quiet(&self, wakes: u64, now: Instant) -> bool {
        self.seen == wakes
            && now.saturating_duration_since(self.refreshed) < QUIET_FOR
            && now < self.held_until
    }
}

/// What a look began with: the waiter's wake count and its entry as this
/// process knows it, when it watches.
pub(super) struct LookStart {
    seen: Option<u64>,
    kept: Option<String>,
    /// Asked for a first look: another waiter of this process watches the
    /// channel for its turn, so the line is (most likely) not empty.
    behind: bool,
    began: Instant,
    sent: Moment,
}

impl LookStart {
    /// The waiter's entry in line as this process last wrote it (the
    /// keeper may have replaced the one the waiter knows).
    pub(super) fn take_kept(&mut self) -> Option<String> {
        self.kept.take()
    }

    /// Whether a first look may stand behind the others without looking
    /// at the key (a hint the script checks).
    pub(super) fn behind(&self) -> bool {
        self.behind
    }
}

impl RedisStore {
    /// The answer to a look by `token` on `channel`'s line when its last
    /// look stands for it (see the module's docs): held for as long as the
    /// lease was last seen held, at the place this process last wrote.
    pub(super) fn quiet_look(
        &self,
        channel: &str,
        token: &OwnerToken,
    ) -> Option<(AcquireReply, Option<QueuePlace>)> {
        let now = Instant::now();
        let sub = self.subscriber_if_open()?;
        sub.with_turn(channel, token.as_str(), |turn| {
            let wakes = turn.wakes();
            let stand = turn.stand.as_mut().filter(|s| s.is_quiet(wakes, now))?;
            stand.looked = now;
            let held = AcquireReply::Held {
                ttl_left: Some(stand.held_until - now),
            };
            let place = QueuePlace::written_at(stand.entry.clone(), stand.written);
            Some((held, Some(place)))
        })
        .flatten()
    }

    /// Notes a look by `token` on `channel`'s line before it is sent; for
    /// a `first` look, whether other waiters of this process watch it.
    pub(super) fn look_starts(&self, channel: &str, token: &OwnerToken, first: bool) -> LookStart {
        let token = token.as_str();
        let (watched, behind) = self
            .subscriber_if_open()
            .and_then(|sub| {
                sub.with_watchers(channel, |w| {
                    let behind = first && w.others_wait(token);
                    let watched = w
                        .live_turn(token)
                        .map(|turn| (turn.wakes(), turn.stand.as_ref().map(|s| s.entry.clone())));
                    (watched, behind)
                })
            })
            .unwrap_or_default();
        LookStart {
            seen: watched.as_ref().map(|(wakes, _)| *wakes),
            kept: watched.and_then(|(_, kept)| kept),
            behind,
            began: Instant::now(),
            sent: crate::clock::now(),
        }
    }

    /// Notes where the look `start` left `token` in the line of `key`: at
    /// `entry` while the lease is held for `held_for`, or (`None`) without a
    /// place.
    pub(super) fn look_ends(
        &self,
        key: &str,
        channel: &str,
        token: &OwnerToken,
        start: LookStart,
        stood: Option<(&str, Option<Duration>)>,
    ) {
        let (Some(seen), Some(sub)) = (start.seen, self.subscriber_if_open()) else {
            return;
        };
        sub.with_turn(channel, token.as_str(), |turn| {
            turn.stand = stood.map(|(entry, held_for)| Stand {
                key: key.to_string(),
                entry: entry.to_string(),
                written: start.sent,
                seen,
                refreshed: start.began,
                looked: start.began,
                held_until: start.began + held_for.unwrap_or_default(),
            });
        });
    }

    /// Starts the keeper of this store's waiters, which stops once
    /// `subscriber` is gone.
    pub(super) fn start_keeper(&self, subscriber: Weak<OnceCell<Subscriber>>) {
        tokio::spawn(keep(subscriber, self.detached()));
    }

    /// Refreshes `line`'s places (one call at least, which serves the line
    /// even with no place to refresh), and wakes whom what the call found
    /// concerns.
    async fn keep_line(&self, subscriber: &Weak<OnceCell<Subscriber>>, line: &KeptLine) {
        let keys = self.keys().lease_fence_queue(&line.key);
        let none: &[String] = &[];
        let calls = line.tokens.chunks(MAX_PER_CALL);
        for tokens in calls.chain(line.tokens.is_empty().then_some(none)) {
            let began = Instant::now();
            let sent = crate::clock::now();
            let mut args = vec![line.channel.as_str()];
            args.extend(tokens.iter().map(String::as_str));
            let kept: crate::error::Result<(i64, String, Vec<String>)> = self
                .run_script("keep", self.counters().keep.pair(), &keys, &args)
                .await;
            let (pttl, owner, entries) = match kept {
                Ok(kept) => kept,
                Err(e) => {
                    tracing::debug!(key = line.key, error = %e, "keeping the places in line failed");
                    return;
                }
            };
            let Some(cell) = subscriber.upgrade() else {
                return;
            };
            let Some(sub) = cell.get() else { return };
            let found = Found {
                began,
                sent,
                held_for: from_millis(pttl).unwrap_or_default(),
            };
            for token in &line.standing {
                sub.with_turn(&line.channel, token, |turn| found.held(turn));
            }
            for (token, entry) in tokens.iter().zip(entries) {
                sub.with_turn(&line.channel, token, |turn| found.refreshed(turn, entry));
            }
            // A waiter of this process the lease was handed to: its
            // notification may be lost, and its look claims the lease.
            sub.with_turn(&line.channel, &owner, |turn| {
                if turn.stand.is_some() {
                    turn.nudge();
                }
            });
        }
    }
}

/// A line this process's waiters stand in, and the places to refresh.
#[derive(Debug)]
struct KeptLine {
    key: String,
    channel: String,
    /// The waiters whose places are due.
    tokens: Vec<String>,
    /// Every waiter that stands in it.
    standing: Vec<String>,
}

/// What one keeper call found.
struct Found {
    began: Instant,
    sent: Moment,
    held_for: Duration,
}

impl Found {
    /// Notes how long the lease was seen held (a stand whose look did not
    /// see it, or saw it earlier, may answer quietly for as long).
    fn held(&self, turn: &mut Turn) {
        if let Some(stand) = turn.stand.as_mut() {
            stand.held_until = stand.held_until.max(self.began + self.held_for);
        }
    }

    /// Notes that the waiter of `turn` stands at `entry` (`""`: it has no
    /// place left).
    fn refreshed(&self, turn: &mut Turn, entry: String) {
        if entry.is_empty() {
            turn.stand = None;
            return;
        }
        if let Some(stand) = turn.stand.as_mut() {
            stand.entry = entry;
            stand.written = self.sent;
            stand.refreshed = stand.refreshed.max(self.began);
        }
    }
}

/// The lines of the waiters that looked within [`KEPT_WHILE_LOOKING`], with
/// the places of those not refreshed within [`FRESH_FOR`].
fn kept_lines(sub: &Subscriber) -> Vec<KeptLine> {
    let now = Instant::now();
    let mut lines: HashMap<String, KeptLine> = HashMap::new();
    sub.each_turn(|channel, token, turn| {
        let Some(stand) = &turn.stand else { return };
        if now.saturating_duration_since(stand.looked) >= KEPT_WHILE_LOOKING {
            return;
        }
        let line = lines
            .entry(channel.to_string())
            .or_insert_with(|| KeptLine {
                key: stand.key.clone(),
                channel: channel.to_string(),
                tokens: Vec::new(),
                standing: Vec::new(),
            });
        line.standing.push(token.to_string());
        if now.saturating_duration_since(stand.refreshed) >= FRESH_FOR {
            line.tokens.push(token.to_string());
        }
    });
    lines.into_values().collect()
}

/// Refreshes the places of `subscriber`'s waiters every [`HEARTBEAT`] until
/// the subscriber is gone.
async fn keep(subscriber: Weak<OnceCell<Subscriber>>, store: RedisStore) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(cell) = subscriber.upgrade() else {
            return;
        };
        let lines = cell.get().map(kept_lines).unwrap_or_default();
        drop(cell);
        for line in &lines {
            store.keep_line(&subscriber, line).await;
        }
    }
}
