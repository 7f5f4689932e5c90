//! Holders: who believed it held which key when, their overlaps (double
//! grants), fences handed out twice, the fence order of read-write grants,
//! and lease sets granted without a fence for every key.

use std::collections::{BTreeMap, HashMap};

use super::Report;
use super::faults::Faults;
use crate::history::{Event, Kind, Op};

/// How a holder held its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A lease (alone, or one key of a set): nobody else may hold the key.
    Lease,
    /// A read-write lease's writer: nobody else may hold the key.
    Writer,
    /// A read-write lease's reader: only writers are excluded.
    Reader,
}

impl Mode {
    /// The mode an acquire's note names (`read`, `write`; else a lease).
    fn of(note: Option<&str>) -> Mode {
        match note {
            Some("read") => Mode::Reader,
            Some("write") => Mode::Writer,
            _ => Mode::Lease,
        }
    }
}

/// One acquisition of one key, from the acquire's reply to the end of its
/// holder's belief.
#[derive(Debug, Clone)]
struct Hold {
    client: String,
    released: bool,
    lease: String,
    key: String,
    fence: u64,
    mode: Mode,
    /// When the acquire was invoked (what was granted before it, is before it).
    invoked: u64,
    start: u64,
    end: u64,
    /// When its lost signal fired, if it did: the holder knew from then on.
    lost_at: Option<u64>,
}

/// Every acquisition of a history, by lease and key (a lease set holds
/// several keys under one lease id).
#[derive(Debug, Default)]
pub(super) struct Holders {
    holds: HashMap<(String, String), Hold>,
    /// When each lease got its (first) fence.
    starts: HashMap<String, u64>,
    /// The keys each lease set was granted with.
    sets: HashMap<String, Vec<String>>,
}

impl Holders {
    /// An acquire's ok reply (or one key of a set's): a holder until its
    /// release, or for one TTL. `invoked`: when its acquire was invoked.
    pub(super) fn acquired(&mut self, e: &Event, ttl_ns: u64, invoked: Option<u64>) {
        if let (Some(lease), Some(fence), Some(key)) = (&e.lease, e.fence, &e.key) {
            let hold = Hold {
                client: e.client.clone(),
                released: false,
                lease: lease.clone(),
                key: key.clone(),
                fence,
                mode: Mode::of(e.note.as_deref()),
                invoked: invoked.unwrap_or(e.t).min(e.t),
                start: e.t,
                end: e.t + ttl_ns,
                lost_at: None,
            };
            self.starts.entry(lease.clone()).or_insert(e.t);
            self.holds.insert((lease.clone(), key.clone()), hold);
        }
    }

    /// A lease set's ok reply: its keys (`key` is them joined by `+`) must
    /// each have been granted with a fence.
    pub(super) fn set_acquired(&mut self, e: &Event) {
        if let (Some(lease), Some(keys)) = (&e.lease, &e.key) {
            let keys = keys.split('+').map(str::to_string).collect();
            self.sets.insert(lease.clone(), keys);
        }
    }

    /// A release's invoke: the holder's belief ended at its `until`.
    pub(super) fn released(&mut self, e: &Event) {
        let (Some(lease), Some(key)) = (&e.lease, &e.key) else {
            return;
        };
        if let Some(h) = self.holds.get_mut(&(lease.clone(), key.clone())) {
            h.end = e.until.unwrap_or(e.t).min(e.t).max(h.start);
            h.released = true;
        }
    }

    /// A lost signal: the holder of `lease` (every key of a set) believed
    /// it held no longer than this.
    pub(super) fn lost(&mut self, e: &Event) {
        let Some(lease) = &e.lease else { return };
        let keys: Vec<String> = match self.sets.get(lease) {
            Some(keys) => keys.clone(),
            None => e.key.iter().cloned().collect(),
        };
        for key in keys {
            if let Some(h) = self.holds.get_mut(&(lease.clone(), key)) {
                h.lost_at = Some(h.lost_at.map_or(e.t, |t| t.min(e.t)));
            }
        }
    }

    /// When `lease` was granted, if it was.
    pub(super) fn start_of(&self, lease: &str) -> Option<u64> {
        self.starts.get(lease).copied()
    }

    /// A holder without a release event — a `tenure run` whose command was
    /// killed, or ended by a signal, before it recorded its release — held
    /// until its process was known to be gone: the kill of its slot, or the
    /// slot's record of the process's exit (or its next acquire). Its
    /// acquire was recorded when the command started, after the grant, so
    /// start + TTL would overstate its validity.
    pub(super) fn end_at_kills(&mut self, events: &[Event]) {
        for h in self.holds.values_mut().filter(|h| !h.released) {
            let gone = events.iter().find(|e| {
                let killed = e.op == Op::Fault
                    && e.note.as_deref() == Some("client-kill")
                    && e.value.is_some_and(|slot| format!("s{slot}") == h.client);
                let exited = e.client == h.client
                    && e.op == Op::Acquire
                    && matches!(e.kind, Kind::Invoke | Kind::Fail | Kind::Info);
                (killed || exited) && e.t >= h.start
            });
            if let Some(g) = gone {
                h.end = h.end.min(g.t);
            }
        }
    }

    /// When each lease got its fence (for blaming a fence's reuse).
    pub(super) fn granted(&self) -> HashMap<String, u64> {
        self.starts.clone()
    }

    /// Counts double grants, lease fence reuse and misordered read-write
    /// fences per key, and lease sets missing a key's grant.
    pub(super) fn check(self, faults: &Faults, report: &mut Report) {
        for (lease, keys) in &self.sets {
            let missing: Vec<&String> = keys
                .iter()
                .filter(|k| !self.holds.contains_key(&(lease.clone(), (*k).clone())))
                .collect();
            if !missing.is_empty() {
                report.incomplete_sets += 1;
                report.note(format!(
                    "lease set {lease} granted without a fence for {missing:?}"
                ));
            }
        }
        let mut by_key: BTreeMap<String, Vec<Hold>> = BTreeMap::new();
        for mut h in self.holds.into_values() {
            if let Some(t) = h.lost_at {
                h.end = h.end.min(t.max(h.start));
            }
            by_key.entry(h.key.clone()).or_default().push(h);
        }
        for (key, mut hs) in by_key {
            hs.sort_by_key(|h| h.start);
            double_grants(&key, &hs, faults, report);
            reused_fences(&key, &hs, faults, report);
            rw_fence_order(&key, &hs, faults, report);
        }
    }
}

/// Pairs of holders of `key` (sorted by start) whose beliefs overlapped.
fn double_grants(key: &str, hs: &[Hold], faults: &Faults, report: &mut Report) {
    for (i, a) in hs.iter().enumerate() {
        for b in &hs[i + 1..] {
            if b.start >= a.end {
                break;
            }
            // A guard that was lost when it arrived (its validity ran out
            // while the reply was delayed) was never a holder; readers share.
            if b.end <= b.start
                || a.end <= a.start
                || (a.mode, b.mode) == (Mode::Reader, Mode::Reader)
            {
                continue;
            }
            let class = faults.blame_over(b.start, a.end.min(b.end));
            report.class(&class).double_grants += 1;
            report.note(format!(
                "double grant on {key}: {} (fence {}) and {} (fence {}) overlap by {} ms [{class}]",
                a.lease,
                a.fence,
                b.lease,
                b.fence,
                (a.end.min(b.end) - b.start) / 1_000_000
            ));
        }
    }
}

/// Acquisitions of `key` (sorted by start) handed a fence an earlier one got.
fn reused_fences(key: &str, hs: &[Hold], faults: &Faults, report: &mut Report) {
    let mut seen: HashMap<u64, &Hold> = HashMap::new();
    for h in hs {
        if let Some(prev) = seen.insert(h.fence, h) {
            // A reused fence comes from a store that forgot its counter:
            // blame the data loss between the two grants, if there was one.
            let class = faults
                .data_loss_between(prev.start, h.start)
                .unwrap_or_else(|| faults.blame(h.start));
            report.class(&class).reused_fences += 1;
            report.note(format!(
                "reused fence {} of {key}: handed to {} and again to {} [{class}]",
                h.fence, prev.lease, h.lease
            ));
        }
    }
}

/// The fence order of a read-write lease's grants of `key` (sorted by
/// start): a writer's fence is above every fence granted before its acquire
/// was invoked, a reader's above every such writer's. A grant out of that
/// order counts as a fence regression.
fn rw_fence_order(key: &str, hs: &[Hold], faults: &Faults, report: &mut Report) {
    // Running maxima over the grants so far (by start): any, and writers'.
    let mut max_any: Vec<(u64, &Hold)> = Vec::new();
    let mut max_writer: Vec<(u64, Option<&Hold>)> = Vec::new();
    for h in hs {
        let any = max_any
            .last()
            .map_or(h, |&(_, m)| if h.fence > m.fence { h } else { m });
        max_any.push((h.start, any));
        let prev = max_writer.last().and_then(|&(_, w)| w);
        let writer = match (prev, h.mode) {
            (Some(w), Mode::Writer) if w.fence >= h.fence => Some(w),
            (_, Mode::Writer) => Some(h),
            (prev, _) => prev,
        };
        max_writer.push((h.start, writer));
    }
    for h in hs.iter().filter(|h| h.mode != Mode::Lease) {
        // The grants whose reply came before this acquire was invoked.
        let before = hs.partition_point(|g| g.start < h.invoked);
        let Some(i) = before.checked_sub(1) else {
            continue;
        };
        let above = match h.mode {
            Mode::Writer => Some(max_any[i].1),
            _ => max_writer[i].1,
        };
        if let Some(g) = above.filter(|g| g.fence >= h.fence) {
            // Like a reused fence: a counter the store forgot is the likely cause.
            let class = faults
                .data_loss_between(g.start, h.start)
                .unwrap_or_else(|| faults.blame(h.start));
            report.class(&class).fence_regressions += 1;
            report.note(format!(
                "fence order on {key}: {} (fence {}) granted after {} (fence {}) [{class}]",
                h.lease, h.fence, g.lease, g.fence
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const TTL: u64 = 1_000 * MS;

    fn acquired(t_ms: u64, client: &str, lease: &str, fence: u64) -> Event {
        let mut e = Event::new(client, Op::Acquire, Kind::Ok)
            .key("k0")
            .held(fence, lease);
        e.t = t_ms * MS;
        e
    }

    /// Double grants among the holders granted by `events[0]` and
    /// `events[2]`: as granted (held until start + TTL), and after
    /// `end_at_kills` read `events`.
    fn double_grants_open_and_ended(events: &[Event; 3]) -> (u64, u64) {
        let holders = || {
            let mut hs = Holders::default();
            hs.acquired(&events[0], TTL, None);
            hs.acquired(&events[2], TTL, None);
            hs
        };
        let grants = |hs: Holders| {
            let mut r = Report::default();
            hs.check(&Faults::collect(&[], TTL, &mut r), &mut r);
            r.total().double_grants
        };
        let mut ended = holders();
        ended.end_at_kills(events);
        (grants(holders()), grants(ended))
    }

    /// s1 granted at 10 ms, `end` (what ends s1's hold) at 30 ms, s0 granted
    /// at 40 ms: double grants without and with holders ended there.
    fn grants_around_an_end_at_30ms(mut end: Event) -> (u64, u64) {
        end.t = 30 * MS;
        let events = [
            acquired(10, "s1", "s1-1", 1),
            end,
            acquired(40, "s0", "s0-1", 2),
        ];
        double_grants_open_and_ended(&events)
    }

    #[test]
    fn a_killed_holder_held_until_the_kill_only() {
        let kill = Event::new("nemesis", Op::Fault, Kind::Info)
            .note("client-kill")
            .value(1);
        let (open, ended) = grants_around_an_end_at_30ms(kill);
        assert_eq!(open, 1, "without the kill they overlap");
        assert_eq!(ended, 0, "s1 held until the kill at 30 ms");
    }

    /// A `tenure run` whose command ended by a signal (exit 129: SIGHUP
    /// forwarded to it) before the writer recorded its release.
    #[test]
    fn a_holder_process_that_exited_unreleased_held_until_its_exit() {
        let exit = Event::new("s1", Op::Acquire, Kind::Info)
            .key("k0")
            .note("exit Some(129)");
        let (open, ended) = grants_around_an_end_at_30ms(exit);
        assert_eq!(open, 1, "open until start + TTL they overlap");
        assert_eq!(ended, 0, "s1 held until its exit at 30 ms");
    }

    #[test]
    fn a_reused_fence_is_blamed_on_the_data_loss_between_the_grants() {
        let mark = |t_ms: u64, op: Op| {
            let mut e = Event::new("nemesis", op, Kind::Info).note("failover");
            e.t = t_ms * MS;
            e
        };
        // Healed long (> 2 TTLs + 1 s) before b's grant: only the reuse blames it.
        let events = [
            acquired(10, "a", "a-1", 7),
            mark(20, Op::Fault),
            mark(30, Op::Heal),
            acquired(5_000, "b", "b-1", 7),
        ];
        let mut hs = Holders::default();
        hs.acquired(&events[0], TTL, None);
        hs.acquired(&events[3], TTL, None);
        assert_eq!(hs.start_of("b-1"), Some(5_000 * MS));
        let mut r = Report::default();
        let faults = Faults::collect(&events, TTL, &mut r);
        hs.check(&faults, &mut r);
        assert_eq!(r.by_class["failover"].reused_fences, 1);
        assert_eq!(r.total().double_grants, 0);
        assert_eq!(
            r.examples,
            ["reused fence 7 of k0: handed to a-1 and again to b-1 [failover]"]
        );
    }
}
