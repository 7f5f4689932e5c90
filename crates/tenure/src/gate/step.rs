//! The admission rules of a gate as pure steps over its state: `(state, now,
//! request) -> (answer, next state)`, with nothing about storage. The SQLite,
//! memory and etcd stores run these steps on a state they read and write in
//! one transaction; the Redis store runs the same rules as Lua
//! (`redis/scripts/gate_*.lua`) on the server's clock.
//!
//! The clock is an input of every step ([`Now`]): the store's deadline clock
//! for expiries and its wall clock for the fence floor (the Redis scripts
//! read both from `TIME`).
//!
//! A gate holds *holders* (token, mode, expiry, fence) and a *line* of
//! waiters in arrival order (token, mode, TTL, expiry). Every step first
//! drops what expired, then *promotes*: while the first waiter in line fits
//! beside the holders it becomes a holder with a fresh fence (it claims the
//! grant at its next look; unclaimed, the grant lives for the lease line's
//! claim window at most, and never longer than its place would have). A
//! newcomer is admitted directly only when nobody waits and it fits;
//! otherwise it stands at the end of the line — so a waiting writer blocks
//! new readers, and permits go in arrival order.
//!
//! A place in line lives for the lease line's place lifetime after the
//! waiter's last look (at most its TTL), not for its TTL: a waiter looks
//! again every heartbeat while it waits, so a waiter that was killed stops
//! counting within a second (`PLACE_LIFETIME`, `CLAIM_WINDOW` and
//! `HEARTBEAT` in lease/line.rs).

use serde::{Deserialize, Serialize};

use super::Mode;
use super::store::HolderRecord;
use crate::duration::millis_i64;
use crate::lease::{CLAIM_WINDOW, PLACE_LIFETIME};

/// The stored form of a mode: `"r"`, `"w"`, or the permit count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Kind {
    #[serde(rename = "r")]
    Read,
    #[serde(rename = "w")]
    Write,
    #[serde(rename = "p")]
    Permit(u32),
}

impl From<Mode> for Kind {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Read => Kind::Read,
            Mode::Write => Kind::Write,
            Mode::Permit(n) => Kind::Permit(n.get()),
        }
    }
}

/// One holder of a gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Held {
    pub(crate) token: String,
    pub(crate) kind: Kind,
    pub(crate) expires_ms: i64,
    /// A number, or a string where the state was written by a Redis script
    /// (JSON numbers there keep 14 digits only).
    #[serde(deserialize_with = "number_or_text")]
    pub(crate) fence: u64,
    /// Whether the holder has taken its grant (a promoted waiter has not,
    /// until its next look).
    #[serde(default)]
    pub(crate) claimed: bool,
    /// When the grant was claimed, on the store clock.
    #[serde(default)]
    pub(crate) since_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<HolderRecord>,
}

/// A `u64` written as a JSON number or as a string of digits.
fn number_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(u64),
        Text(String),
    }
    match Either::deserialize(d)? {
        Either::Number(n) => Ok(n),
        Either::Text(t) => t.parse().map_err(serde::de::Error::custom),
    }
}

/// One waiter in line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiting {
    pub(crate) token: String,
    pub(crate) kind: Kind,
    pub(crate) ttl_ms: i64,
    pub(crate) expires_ms: i64,
    /// Its place: the order of arrival (never reused within a state).
    pub(crate) seq: u64,
}

/// The store's clocks at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Now {
    /// The store's deadline clock in milliseconds: what expiries count on.
    pub(crate) ms: i64,
    /// The store's wall clock in microseconds since the Unix epoch: the
    /// floor of fences.
    pub(crate) wall_us: u64,
}

impl Now {
    /// `ms` on the deadline clock, and this host's wall clock.
    pub(crate) fn host(ms: i64) -> Self {
        Now {
            ms,
            wall_us: crate::fence::wall_clock_us(),
        }
    }
}

/// Everything a store keeps for one gate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    /// The last fence handed out (0: none, or lost with the store's data).
    #[serde(default)]
    pub(crate) fence: u64,
    #[serde(default)]
    pub(crate) holders: Vec<Held>,
    #[serde(default)]
    pub(crate) line: Vec<Waiting>,
    #[serde(default)]
    pub(crate) next_seq: u64,
}

/// A look by `token`: what it asks for.
#[derive(Debug, Clone)]
pub(crate) struct Ask<'a> {
    pub(crate) token: &'a str,
    pub(crate) kind: Kind,
    pub(crate) ttl_ms: i64,
    /// Stand in line when refused (a waiter), or not (a single attempt).
    pub(crate) stand: bool,
    pub(crate) holder: Option<&'a HolderRecord>,
}

/// What a look answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Held by the asker, with this fence.
    Granted(u64),
    /// Refused; `place` is the asker's place in line when it stands there,
    /// `ttl_left_ms` the time until the soonest blocking holder expires.
    Refused {
        place: Option<u64>,
        ttl_left_ms: Option<i64>,
    },
}

impl State {
    /// Drops the holders and places that expired by `now`.
    pub(crate) fn prune(&mut self, now: i64) {
        self.holders.retain(|h| h.expires_ms > now);
        self.line.retain(|w| w.expires_ms > now);
    }

    /// Whether a holder of `kind` fits beside the current holders.
    fn fits(&self, kind: Kind) -> bool {
        match kind {
            Kind::Write => self.holders.is_empty(),
            Kind::Read => self.holders.iter().all(|h| h.kind == Kind::Read),
            Kind::Permit(n) => self.holders.len() < n as usize,
        }
    }

    /// A fresh fence, floored by the wall clock as lease fences are
    /// ([`fence::next_fence`](crate::fence::next_fence)), so a gate whose
    /// state was lost goes on above every fence it handed out before
    /// (saturating: a counter at `u64::MAX` is refused by the caller before).
    fn next_fence(&mut self, wall_us: u64) -> u64 {
        let last = (self.fence > 0).then_some(self.fence);
        self.fence = crate::fence::next_fence(last, wall_us, crate::fence::FloorUnit::Micros).unwrap_or(u64::MAX);
        self.fence
    }

    /// Admits the waiters at the head of the line while they fit, each for
    /// the claim window (at most as long as its place would have lived);
    /// returns their tokens (to be woken).
    pub(crate) fn promote(&mut self, at: Now) -> Vec<String> {
        let mut woken = Vec::new();
        while let Some(head) = self.line.first() {
            if !self.fits(head.kind) {
                break;
            }
            let head = self.line.remove(0);
            let fence = self.next_fence(at.wall_us);
            let claim_ms = head.ttl_ms.min(millis_i64(CLAIM_WINDOW));
            self.holders.push(Held {
                token: head.token.clone(),
                kind: head.kind,
                expires_ms: head.expires_ms.min(at.ms.saturating_add(claim_ms)),
                fence,
                claimed: false,
                since_ms: 0,
                holder: None,
            });
            woken.push(head.token);
        }
        woken
    }

    /// Time until the soonest holder expires.
    fn ttl_left(&self, now: i64) -> Option<i64> {
        self.holders
            .iter()
            .map(|h| (h.expires_ms - now).max(1))
            .min()
    }

    /// One look by `ask.token` at `now`: claims a grant handed to it, admits
    /// it when nobody waits and it fits, else keeps (or takes) its place in
    /// line when it stands. Returns the answer and the tokens to wake.
    pub(crate) fn look(&mut self, at: Now, ask: &Ask<'_>) -> (Answer, Vec<String>) {
        let now = at.ms;
        self.prune(now);
        let woken = self.promote(at);
        let expires_ms = now.saturating_add(ask.ttl_ms);
        if let Some(held) = self.holders.iter_mut().find(|h| h.token == ask.token) {
            held.expires_ms = expires_ms;
            if !held.claimed {
                held.claimed = true;
                held.since_ms = now;
                held.holder = ask.holder.cloned();
            }
            return (Answer::Granted(held.fence), woken);
        }
        let place_ms = ask.ttl_ms.min(millis_i64(PLACE_LIFETIME));
        let place_expires_ms = now.saturating_add(place_ms);
        if let Some(i) = self.line.iter().position(|w| w.token == ask.token) {
            let place = &mut self.line[i];
            place.expires_ms = place_expires_ms;
            place.ttl_ms = ask.ttl_ms;
            let place = Some(place.seq);
            let ttl_left_ms = self.ttl_left(now);
            return (Answer::Refused { place, ttl_left_ms }, woken);
        }
        if self.line.is_empty() && self.fits(ask.kind) {
            let fence = self.next_fence(at.wall_us);
            self.holders.push(Held {
                token: ask.token.to_string(),
                kind: ask.kind,
                expires_ms,
                fence,
                claimed: true,
                since_ms: now,
                holder: ask.holder.cloned(),
            });
            return (Answer::Granted(fence), woken);
        }
        let place = ask.stand.then(|| {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.line.push(Waiting {
                token: ask.token.to_string(),
                kind: ask.kind,
                ttl_ms: ask.ttl_ms,
                expires_ms: place_expires_ms,
                seq,
            });
            seq
        });
        let ttl_left_ms = self.ttl_left(now);
        (Answer::Refused { place, ttl_left_ms }, woken)
    }

    /// Resets the expiry of `token`'s grant; `false` when it holds none.
    pub(crate) fn extend(&mut self, at: Now, token: &str, ttl_ms: i64) -> bool {
        self.prune(at.ms);
        match self.holders.iter_mut().find(|h| h.token == token) {
            Some(held) => {
                held.expires_ms = at.ms.saturating_add(ttl_ms);
                true
            }
            None => false,
        }
    }

    /// Gives back `token`'s grant and its place in line, if any, and
    /// promotes the waiters that fit now. Returns whether a grant was given
    /// back, and the tokens to wake.
    pub(crate) fn release(&mut self, at: Now, token: &str) -> (bool, Vec<String>) {
        self.prune(at.ms);
        let before = self.holders.len();
        self.holders.retain(|h| h.token != token);
        self.line.retain(|w| w.token != token);
        let released = self.holders.len() != before;
        (released, self.promote(at))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ask(token: &str, kind: Kind) -> Ask<'_> {
        Ask {
            token,
            kind,
            ttl_ms: 1000,
            stand: true,
            holder: None,
        }
    }

    /// The clocks `ms` into a run that starts at a wall clock of 2025.
    fn at(ms: i64) -> Now {
        Now {
            ms,
            wall_us: 1_764_673_200_000_000 + ms.unsigned_abs() * 1000,
        }
    }

    fn granted(answer: &Answer) -> bool {
        matches!(answer, Answer::Granted(_))
    }

    #[test]
    fn readers_share_and_a_writer_waits_for_them() {
        let mut s = State::default();
        assert!(granted(&s.look(at(0), &ask("r1", Kind::Read)).0));
        assert!(granted(&s.look(at(0), &ask("r2", Kind::Read)).0));
        let (w, _) = s.look(at(0), &ask("w", Kind::Write));
        assert!(matches!(w, Answer::Refused { place: Some(_), .. }));
        // A waiting writer blocks new readers.
        assert!(!granted(&s.look(at(0), &ask("r3", Kind::Read)).0));
        assert!(s.release(at(1), "r1").1.is_empty());
        assert_eq!(s.release(at(1), "r2").1, vec!["w".to_string()]);
        let (w, _) = s.look(at(2), &ask("w", Kind::Write));
        assert!(granted(&w));
        // r3 waits behind the writer, then gets in when it leaves.
        assert!(!granted(&s.look(at(2), &ask("r3", Kind::Read)).0));
        assert_eq!(s.release(at(3), "w").1, vec!["r3".to_string()]);
    }

    #[test]
    fn a_writers_fence_is_above_every_earlier_fence() {
        let mut s = State::default();
        let Answer::Granted(r) = s.look(at(0), &ask("r", Kind::Read)).0 else {
            panic!()
        };
        s.look(at(0), &ask("w", Kind::Write));
        s.release(at(0), "r");
        let Answer::Granted(w) = s.look(at(0), &ask("w", Kind::Write)).0 else {
            panic!()
        };
        assert!(w > r);
    }

    #[test]
    fn permits_go_in_arrival_order() {
        let mut s = State::default();
        let two = Kind::Permit(2);
        assert!(granted(&s.look(at(0), &ask("a", two)).0));
        assert!(granted(&s.look(at(0), &ask("b", two)).0));
        for t in ["c", "d", "e"] {
            assert!(!granted(&s.look(at(0), &ask(t, two)).0));
        }
        // e looks again first: still behind c and d.
        assert!(!granted(&s.look(at(1), &ask("e", two)).0));
        assert_eq!(s.release(at(1), "a").1, vec!["c".to_string()]);
        assert!(!granted(&s.look(at(1), &ask("e", two)).0));
        assert_eq!(s.release(at(1), "b").1, vec!["d".to_string()]);
    }

    /// A waiter's look with the default lease TTL (30 s).
    fn long(token: &str) -> Ask<'_> {
        Ask {
            ttl_ms: 30_000,
            ..ask(token, Kind::Permit(1))
        }
    }

    #[test]
    fn a_dead_waiters_place_dies_a_place_lifetime_after_its_last_look() {
        let mut s = State::default();
        assert!(granted(&s.look(at(0), &long("a")).0));
        s.look(at(0), &long("dead"));
        s.look(at(0), &long("live"));
        // The live waiter beats; the dead one stopped at 0.
        for t in [250, 500, 750, 999] {
            s.look(at(t), &long("live"));
        }
        assert_eq!(s.line.len(), 2);
        s.look(at(1000), &long("live"));
        assert_eq!(s.line.len(), 1, "the dead place is gone");
        assert_eq!(s.release(at(1100), "a").1, vec!["live".to_string()]);
    }

    #[test]
    fn a_grant_to_a_dead_waiter_is_free_again_after_the_claim_window() {
        let mut s = State::default();
        assert!(granted(&s.look(at(0), &long("a")).0));
        s.look(at(0), &long("dead"));
        s.look(at(0), &long("live"));
        // The holder leaves; the dead waiter is promoted but never claims.
        assert_eq!(s.release(at(100), "a").1, vec!["dead".to_string()]);
        assert!(!granted(&s.look(at(350), &long("live")).0));
        assert!(!granted(&s.look(at(599), &long("live")).0));
        // Its grant lived for the claim window (500 ms): the live waiter is next.
        let Answer::Granted(_) = s.look(at(600), &long("live")).0 else {
            panic!("{s:?}")
        };
        assert_eq!(
            s.holders[0].expires_ms, 30_600,
            "a claim takes the full TTL"
        );
    }

    #[test]
    fn a_single_attempt_does_not_stand_in_line() {
        let mut s = State::default();
        assert!(granted(&s.look(at(0), &ask("w", Kind::Write)).0));
        let mut single = ask("r", Kind::Read);
        single.stand = false;
        let (answer, _) = s.look(at(0), &single);
        assert_eq!(
            answer,
            Answer::Refused {
                place: None,
                ttl_left_ms: Some(1000)
            }
        );
        assert!(s.line.is_empty());
    }

    #[test]
    fn a_lost_state_goes_on_above_its_fences() {
        let mut s = State::default();
        let mut fences = Vec::new();
        for t in 0..5 {
            let Answer::Granted(f) = s.look(at(0), &ask(&format!("t{t}"), Kind::Read)).0 else {
                panic!()
            };
            fences.push(f);
        }
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
        assert!(fences[0] >= at(0).wall_us, "{fences:?}");
        // The store lost the state; it comes back a millisecond later.
        let mut lost = State::default();
        let Answer::Granted(after) = lost.look(at(1), &ask("n", Kind::Write)).0 else {
            panic!()
        };
        assert!(fences.iter().all(|&f| f < after), "{fences:?} {after}");
    }
}
