//! Whom a change in a waiting line concerns: the in-process filter behind a
//! waiter's watch on etcd (see `line.rs`).
//!
//! Every waiter watches the lease key and the line, like etcd's own
//! concurrency mutex watches the key just ahead of it — but a waiter here
//! takes the lease *and* deletes its place in one transaction, so "the place
//! ahead of me is gone" alone would wake the next waiter at every hand-off
//! for nothing. The filter therefore wakes a waiter only when:
//!
//! - it is first in line and the lease key is deleted (released, expired); or
//! - the place just ahead of it is deleted *without* the lease key being
//!   created in the same revision (that waiter left or died: it may be our
//!   turn now). When the lease key is created in the same revision, the
//!   waiter ahead took the lease and this one is first in line now, without
//!   a look.
//!
//! What a waiter stands behind comes from its last look, as of that look's
//! revision; changes after that revision that reached the watch before the
//! look's answer are kept and judged again against it, so none is missed.
//! Changes are kept only while a look is under way: between looks each one
//! is judged as it comes and dropped (a look sent later reads it anyway), so
//! a waiter that stands behind many hand-offs keeps nothing, and is not
//! woken to look afresh because it kept too much.
//! The deletion of the waiter's own place (its etcd lease ran out) wakes it
//! too, so that it stands in line again.
//!
//! While nothing has concerned the waiter since its last look, the view is
//! *undisturbed*: a look then could only find the lease held or someone
//! ahead, and is answered without a transaction (see `line.rs`); it is
//! *quiet* when the waiter's holder etcd lease was also refreshed recently.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How many changes are kept for the answer of a look under way; beyond
/// that the waiter is woken to look afresh.
const MAX_KEPT: usize = 256;

/// One change of a key in the watched range, at an etcd revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Change {
    /// The revision of the change (the key's `mod_revision` in the event).
    pub(super) rev: i64,
    /// The key.
    pub(super) key: Vec<u8>,
    /// A deletion (else a put).
    pub(super) deleted: bool,
}

/// Where a waiter stood at its last look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Standing {
    /// The revision the look read at.
    pub(super) as_of: i64,
    /// The place just ahead of ours then; `None` when we were first.
    pub(super) ahead: Option<Vec<u8>>,
}

/// A waiter's view of its line, shared by its watch task (which feeds it
/// changes) and its looks (which tell it where the waiter stands).
#[derive(Debug)]
pub(super) struct Turn {
    lease_key: Vec<u8>,
    line_prefix: Vec<u8>,
    /// The waiter's own place.
    place_key: Vec<u8>,
    standing: Option<Standing>,
    /// Whether a change concerned the waiter since its last look.
    woken: bool,
    /// When the waiter's holder etcd lease was last refreshed (granted or
    /// kept alive).
    refreshed: Option<Instant>,
    /// Changes seen since the look under way was sent, for its answer (all
    /// of them before the first look).
    later: Vec<Change>,
    /// Whether a look is under way (or none answered yet).
    looking: bool,
    /// Wakes the waiter; `None` once the watch has ended.
    tx: Option<watch::Sender<u64>>,
}

impl Turn {
    /// The view of a waiter for the lease key `lease_key`, whose line's
    /// places start with `line_prefix` and whose own place is `place_key`,
    /// woken through `tx`.
    pub(super) fn new(
        lease_key: &str,
        line_prefix: &str,
        place_key: &str,
        tx: watch::Sender<u64>,
    ) -> Turn {
        Turn {
            lease_key: lease_key.as_bytes().to_vec(),
            line_prefix: line_prefix.as_bytes().to_vec(),
            place_key: place_key.as_bytes().to_vec(),
            standing: None,
            woken: false,
            refreshed: None,
            later: Vec::new(),
            looking: true,
            tx: Some(tx),
        }
    }

    /// Changes seen by the watch, in revision order; wakes the waiter when
    /// one concerns it.
    pub(super) fn saw(&mut self, changes: impl IntoIterator<Item = Change>) {
        let relevant = changes.into_iter().filter(|c| {
            c.key == self.lease_key || (c.deleted && c.key.starts_with(&self.line_prefix))
        });
        let start = self.later.len();
        self.later.extend(relevant);
        if self.later.len() > MAX_KEPT {
            self.later.clear();
            self.standing = None;
            self.wake();
            return;
        }
        if let Some(standing) = self.standing.as_mut()
            && judge(
                standing,
                &self.lease_key,
                &self.place_key,
                &self.later[start..],
            )
        {
            self.wake();
        }
        if !self.looking {
            self.later.clear();
        }
    }

    /// A look is about to be sent: the changes seen so far are in what it
    /// reads; those seen from now on are kept for its answer.
    pub(super) fn looks(&mut self) {
        self.looking = true;
        self.later.clear();
    }

    /// Where the waiter stands after a look, its holder etcd lease last
    /// refreshed at `refreshed`; wakes it at once when a change after that
    /// look already concerns it.
    pub(super) fn stands(&mut self, mut standing: Standing, refreshed: Option<Instant>) {
        self.woken = false;
        self.refreshed = refreshed.or(self.refreshed);
        self.later.retain(|c| c.rev > standing.as_of);
        let wake = judge(&mut standing, &self.lease_key, &self.place_key, &self.later);
        self.later.clear();
        self.looking = false;
        self.standing = Some(standing);
        if wake {
            self.wake();
        }
    }

    /// Whether a look now could only find what the last one found, and no
    /// keep-alive of the waiter's holder etcd lease is due: the watch lives,
    /// nothing concerned the waiter since its last look, and that lease was
    /// refreshed less than `refresh_every` ago.
    pub(super) fn is_quiet(&self, refresh_every: Duration) -> bool {
        self.is_undisturbed() && self.refreshed.is_some_and(|r| r.elapsed() < refresh_every)
    }

    /// Whether the watch lives and nothing concerned the waiter since its
    /// last look (its etcd leases may still need a refresh).
    pub(super) fn is_undisturbed(&self) -> bool {
        self.tx.is_some() && self.standing.is_some() && !self.woken
    }

    /// The waiter's holder etcd lease was refreshed at `at`, without a look.
    pub(super) fn refreshed(&mut self, at: Instant) {
        self.refreshed = Some(at);
    }

    /// The watch has ended: the waiter falls back to polling (and asks etcd
    /// at every look).
    pub(super) fn ended(&mut self) {
        self.tx = None;
    }

    fn wake(&mut self) {
        self.woken = true;
        if let Some(tx) = &self.tx {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// Whether `changes` (after `standing.as_of`, in revision order) concern a
/// waiter that stands as `standing`; moves it to the front of the line when
/// the waiter ahead took the lease.
fn judge(standing: &mut Standing, lease_key: &[u8], place_key: &[u8], changes: &[Change]) -> bool {
    let mut wake = false;
    for c in changes
        .iter()
        .filter(|c| c.deleted && c.rev > standing.as_of)
    {
        if c.key == place_key {
            // Our own place is gone: only a look can stand us in line again.
            wake = true;
        } else if c.key == lease_key {
            wake |= standing.ahead.is_none();
        } else if standing.ahead.as_deref() == Some(c.key.as_slice()) {
            let took_the_lease = changes
                .iter()
                .any(|o| o.rev == c.rev && !o.deleted && o.key == lease_key);
            if took_the_lease {
                standing.ahead = None;
            } else {
                wake = true;
            }
        }
    }
    wake
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: &str = "p/k";
    const LINE: &str = "p/k\0line\0";

    fn place(token: &str) -> Vec<u8> {
        format!("{LINE}{token}").into_bytes()
    }

    fn deleted(rev: i64, key: Vec<u8>) -> Change {
        Change {
            rev,
            key,
            deleted: true,
        }
    }

    fn put(rev: i64, key: Vec<u8>) -> Change {
        Change {
            rev,
            key,
            deleted: false,
        }
    }

    fn turn() -> (Turn, watch::Receiver<u64>) {
        let (tx, rx) = watch::channel(0);
        (Turn::new(LEASE, LINE, &format!("{LINE}me"), tx), rx)
    }

    fn standing(as_of: i64, ahead: Option<&str>) -> Standing {
        Standing {
            as_of,
            ahead: ahead.map(place),
        }
    }

    #[test]
    fn the_first_in_line_wakes_on_the_lease_keys_deletion_only() {
        let (mut t, mut rx) = turn();
        t.stands(standing(10, None), Some(Instant::now()));
        t.saw([put(11, format!("{LEASE}\0holder").into_bytes())]);
        t.saw([deleted(12, place("zz"))]);
        assert!(!rx.has_changed().unwrap(), "others' places are not ours");
        t.saw([deleted(13, LEASE.as_bytes().to_vec())]);
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
    }

    #[test]
    fn a_waiter_behind_others_ignores_releases() {
        let (mut t, rx) = turn();
        t.stands(standing(10, Some("aa")), Some(Instant::now()));
        t.saw([deleted(11, LEASE.as_bytes().to_vec())]);
        assert!(!rx.has_changed().unwrap());
    }

    #[test]
    fn the_place_ahead_taking_the_lease_moves_us_first_without_waking() {
        let (mut t, rx) = turn();
        t.stands(standing(10, Some("aa")), Some(Instant::now()));
        t.saw([put(11, LEASE.as_bytes().to_vec()), deleted(11, place("aa"))]);
        assert!(
            !rx.has_changed().unwrap(),
            "a hand-off ahead is not our turn"
        );
        t.saw([deleted(12, LEASE.as_bytes().to_vec())]);
        assert!(rx.has_changed().unwrap(), "now first: the release is ours");
    }

    #[test]
    fn the_place_ahead_leaving_or_dying_wakes() {
        let (mut t, rx) = turn();
        t.stands(standing(10, Some("aa")), Some(Instant::now()));
        t.saw([deleted(11, place("aa"))]);
        assert!(rx.has_changed().unwrap());
    }

    #[test]
    fn changes_before_the_looks_answer_are_judged_against_it() {
        let (mut t, rx) = turn();
        // The release reached the watch before the look (at revision 10)
        // that found us first in line was answered.
        t.saw([deleted(11, LEASE.as_bytes().to_vec())]);
        assert!(!rx.has_changed().unwrap(), "no look yet");
        t.stands(standing(10, None), Some(Instant::now()));
        assert!(rx.has_changed().unwrap());
    }

    #[test]
    fn changes_the_look_already_read_are_not_judged_again() {
        let (mut t, rx) = turn();
        t.saw([deleted(9, LEASE.as_bytes().to_vec())]);
        t.stands(standing(10, None), Some(Instant::now()));
        assert!(!rx.has_changed().unwrap());
    }

    #[test]
    fn losing_our_own_place_wakes() {
        let (mut t, rx) = turn();
        t.stands(standing(10, Some("aa")), Some(Instant::now()));
        t.saw([deleted(11, place("me"))]);
        assert!(rx.has_changed().unwrap());
    }

    #[test]
    fn quiet_until_something_concerns_the_waiter_or_its_place_needs_a_refresh() {
        let (mut t, _rx) = turn();
        let every = Duration::from_secs(10);
        assert!(!t.is_quiet(every), "no look yet");
        t.stands(standing(10, Some("aa")), Some(Instant::now()));
        assert!(t.is_quiet(every));
        t.saw([deleted(11, LEASE.as_bytes().to_vec())]);
        assert!(t.is_quiet(every), "a release while others are ahead");
        t.saw([deleted(12, place("aa"))]);
        assert!(!t.is_quiet(every), "the place ahead left");
        t.stands(standing(12, None), None);
        assert!(
            t.is_quiet(every),
            "looked again; the refresh is still fresh"
        );
        assert!(!t.is_quiet(Duration::ZERO), "a refresh is due");
        t.ended();
        assert!(!t.is_quiet(every), "without a watch every look asks etcd");
    }

    #[test]
    fn a_waiter_behind_many_hand_offs_keeps_nothing_and_is_not_woken() {
        let (mut t, rx) = turn();
        t.stands(standing(10, Some("aa")), Some(Instant::now()));
        // Hand-offs between the waiters ahead: each takes the lease (its
        // place deleted with the key's creation), then releases it.
        for i in 0..MAX_KEPT as i64 {
            let rev = 11 + 2 * i;
            t.saw([
                put(rev, LEASE.as_bytes().to_vec()),
                deleted(rev, place("zz")),
            ]);
            t.saw([deleted(rev + 1, LEASE.as_bytes().to_vec())]);
        }
        assert!(!rx.has_changed().unwrap(), "none of them concerned us");
        assert!(t.later.is_empty(), "{} changes kept", t.later.len());
    }

    #[test]
    fn changes_during_a_look_are_judged_against_its_answer() {
        let (mut t, rx) = turn();
        t.stands(standing(10, None), Some(Instant::now()));
        t.saw([put(11, LEASE.as_bytes().to_vec())]);
        t.looks();
        // Released after the look read (at 12), before its answer came.
        t.saw([deleted(13, LEASE.as_bytes().to_vec())]);
        assert!(rx.has_changed().unwrap(), "first in line: woken at once");
        t.stands(standing(12, None), None);
        assert!(!t.is_quiet(Duration::from_secs(10)), "woken again");
    }

    #[test]
    fn too_many_kept_changes_wake_to_look_afresh() {
        let (mut t, rx) = turn();
        t.saw((0..=MAX_KEPT as i64).map(|r| deleted(r, place("x"))));
        assert!(rx.has_changed().unwrap());
    }
}
