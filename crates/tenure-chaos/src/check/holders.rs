//! Holders: who believed it held which key when, their overlaps (double
//! grants), and fences handed out twice.

use std::collections::{BTreeMap, HashMap};

use super::Report;
use super::faults::Faults;
use crate::history::{Event, Op};

/// One acquisition, from the acquire's reply to the end of its holder's belief.
#[derive(Debug, Clone)]
struct Hold {
    client: String,
    released: bool,
    lease: String,
    key: String,
    fence: u64,
    start: u64,
    end: u64,
}

/// Every acquisition of a history, by lease.
#[derive(Debug, Default)]
pub(super) struct Holders {
    holds: HashMap<String, Hold>,
}

impl Holders {
    /// An acquire's ok reply: a holder until its release, or for one TTL.
    pub(super) fn acquired(&mut self, e: &Event, ttl_ns: u64) {
        if let (Some(lease), Some(fence), Some(key)) = (&e.lease, e.fence, &e.key) {
            let hold = Hold {
                client: e.client.clone(),
                released: false,
                lease: lease.clone(),
                key: key.clone(),
                fence,
                start: e.t,
                end: e.t + ttl_ns,
            };
            self.holds.insert(lease.clone(), hold);
        }
    }

    /// A release's invoke: the holder's belief ended at its `until`.
    pub(super) fn released(&mut self, e: &Event) {
        if let Some(h) = e.lease.as_ref().and_then(|l| self.holds.get_mut(l)) {
            h.end = e.until.unwrap_or(e.t).min(e.t).max(h.start);
            h.released = true;
        }
    }

    /// When `lease` was granted, if it was.
    pub(super) fn start_of(&self, lease: &str) -> Option<u64> {
        self.holds.get(lease).map(|h| h.start)
    }

    /// A holder process killed before its release held until the kill (its
    /// acquire was recorded when the command started, after the grant, so
    /// start + TTL would overstate its validity).
    pub(super) fn end_at_kills(&mut self, events: &[Event]) {
        for h in self.holds.values_mut().filter(|h| !h.released) {
            let killed = events.iter().find(|e| {
                e.op == Op::Fault
                    && e.note.as_deref() == Some("client-kill")
                    && e.value.is_some_and(|slot| format!("s{slot}") == h.client)
                    && e.t >= h.start
            });
            if let Some(k) = killed {
                h.end = h.end.min(k.t);
            }
        }
    }

    /// When each lease got its fence (for blaming a fence's reuse).
    pub(super) fn granted(&self) -> HashMap<String, u64> {
        self.holds
            .values()
            .map(|h| (h.lease.clone(), h.start))
            .collect()
    }

    /// Counts double grants and lease fence reuse, per key.
    pub(super) fn check(self, faults: &Faults, report: &mut Report) {
        let mut by_key: BTreeMap<String, Vec<Hold>> = BTreeMap::new();
        for h in self.holds.into_values() {
            by_key.entry(h.key.clone()).or_default().push(h);
        }
        for (key, mut hs) in by_key {
            hs.sort_by_key(|h| h.start);
            double_grants(&key, &hs, faults, report);
            reused_fences(&key, &hs, faults, report);
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
            // while the reply was delayed) was never a holder.
            if b.end <= b.start || a.end <= a.start {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Kind;

    const MS: u64 = 1_000_000;
    const TTL: u64 = 1_000 * MS;

    fn acquired(t_ms: u64, client: &str, lease: &str, fence: u64) -> Event {
        let mut e = Event::new(client, Op::Acquire, Kind::Ok)
            .key("k0")
            .held(fence, lease);
        e.t = t_ms * MS;
        e
    }

    #[test]
    fn a_killed_holder_held_until_the_kill_only() {
        let mut kill = Event::new("nemesis", Op::Fault, Kind::Info)
            .note("client-kill")
            .value(1);
        kill.t = 30 * MS;
        let events = [
            acquired(10, "s1", "s1-1", 1),
            kill,
            acquired(40, "s0", "s0-1", 2),
        ];
        let holders = || {
            let mut hs = Holders::default();
            hs.acquired(&events[0], TTL);
            hs.acquired(&events[2], TTL);
            hs
        };
        let grants = |hs: Holders| {
            let mut r = Report::default();
            hs.check(&Faults::collect(&[], TTL, &mut r), &mut r);
            r.total().double_grants
        };
        assert_eq!(grants(holders()), 1, "without the kill they overlap");
        let mut ended = holders();
        ended.end_at_kills(&events);
        assert_eq!(grants(ended), 0, "s1 held until the kill at 30 ms");
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
        hs.acquired(&events[0], TTL);
        hs.acquired(&events[3], TTL);
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
