//! Fault spans and blame: which fault was in force when a finding took place.

use std::collections::HashMap;

use tenure_test::nemesis::FaultKind;

use super::Report;
use crate::history::{Event, Op};

/// One injected fault, from its start to its heal (or the history's end).
#[derive(Debug, Clone)]
pub(super) struct FaultSpan {
    /// The fault kind's name.
    pub(super) kind: String,
    /// When it started (ns).
    pub(super) start: u64,
    /// When it was healed (ns).
    pub(super) end: u64,
}

/// Every fault of a history, and how long after its heal a fault is still blamed.
#[derive(Debug, Clone)]
pub(super) struct Faults {
    spans: Vec<FaultSpan>,
    /// A fault healed this long before a finding is still blamed for it (ns).
    window: u64,
}

/// Kinds whose fault loses the store's data: fence counters and limiter
/// counts restart.
fn loses_data(kind: &str) -> bool {
    matches!(kind, "server-restart-volatile" | "failover")
}

impl Faults {
    /// The fault spans of `events` (sorted by time): a fault event opens one,
    /// the next heal of that client and kind closes it. Counts the faults per
    /// class in `report`. A fault is blamed up to two TTLs and a second after
    /// its heal.
    pub(super) fn collect(events: &[Event], ttl_ns: u64, report: &mut Report) -> Faults {
        let mut spans: Vec<FaultSpan> = Vec::new();
        let mut open: HashMap<(String, String), usize> = HashMap::new();
        let last_t = events.last().map_or(0, |e| e.t);
        for e in events {
            let kind = e.note.clone().unwrap_or_default();
            match e.op {
                Op::Fault => {
                    open.insert((e.client.clone(), kind.clone()), spans.len());
                    report.class(&kind).faults += 1;
                    spans.push(FaultSpan {
                        kind,
                        start: e.t,
                        end: last_t,
                    });
                }
                Op::Heal => {
                    if let Some(i) = open.remove(&(e.client.clone(), kind)) {
                        spans[i].end = e.t;
                    }
                }
                _ => {}
            }
        }
        Faults {
            spans,
            window: 2 * ttl_ns + 1_000_000_000,
        }
    }

    /// The fault to blame for a finding that took place over `[from, to]`: one
    /// in force then or healed within the window before; a fault tenure does
    /// not claim to tolerate explains a violation better than a tolerated one,
    /// so it is blamed first; then the latest start. `none` if there is none.
    pub(super) fn blame_over(&self, from: u64, to: u64) -> String {
        self.spans
            .iter()
            .filter(|s| s.start <= to && from <= s.end.saturating_add(self.window))
            .max_by_key(|s| {
                let measured = FaultKind::from_name(&s.kind).is_some_and(|k| !k.tolerated());
                (measured, s.start)
            })
            .map_or_else(|| "none".to_string(), |s| s.kind.clone())
    }

    /// The fault to blame for a finding at `t`.
    pub(super) fn blame(&self, t: u64) -> String {
        self.blame_over(t, t)
    }

    /// The latest fault that lost the store's data and started within
    /// `[from, to]`: the cause of a reused or regressed fence, if any.
    pub(super) fn data_loss_between(&self, from: u64, to: u64) -> Option<String> {
        self.spans
            .iter()
            .filter(|s| loses_data(&s.kind) && s.start >= from && s.start <= to)
            .max_by_key(|s| s.start)
            .map(|s| s.kind.clone())
    }

    /// The first fault that lost the store's data while `[first, last]` went on.
    pub(super) fn data_loss_during(&self, first: u64, last: u64) -> Option<&FaultSpan> {
        self.spans
            .iter()
            .find(|s| loses_data(&s.kind) && s.start <= last && s.end >= first)
    }

    /// The start of the latest store-side fault in force at `t` (or healed
    /// within `grace` before) that started after `since`: what a lost signal
    /// at `t` detected.
    pub(super) fn detected(&self, t: u64, since: u64, grace: u64) -> Option<u64> {
        self.spans
            .iter()
            .filter(|s| s.start <= t && t <= s.end.saturating_add(grace))
            .filter(|s| !s.kind.starts_with("client-") && since < s.start)
            .max_by_key(|s| s.start)
            .map(|s| s.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Kind;

    fn at(t_ms: u64, client: &str, op: Op, kind: &str) -> Event {
        let mut e = Event::new(client, op, Kind::Info).note(kind);
        e.t = t_ms * 1_000_000;
        e
    }

    const MS: u64 = 1_000_000;
    const TTL: u64 = 1_000 * MS;

    #[test]
    fn a_heal_closes_the_span_of_its_client_and_kind_and_blame_lasts_a_window() {
        let events = [
            at(10, "nemesis", Op::Fault, "latency"),
            at(20, "a", Op::Heal, "latency"), // another client's: no effect
            at(40, "nemesis", Op::Heal, "latency"),
            at(50_000, "nemesis", Op::Config, "end"),
        ];
        let mut r = Report::default();
        let f = Faults::collect(&events, TTL, &mut r);
        assert_eq!(r.by_class["latency"].faults, 1);
        assert_eq!(f.blame(5 * MS), "none", "before the fault started");
        // Healed at 40 ms; blamed up to 2 TTLs + 1 s after that.
        assert_eq!(f.blame((40 + 3_000) * MS), "latency");
        assert_eq!(f.blame((40 + 3_001) * MS), "none");
        // A fault never healed lasts to the history's end.
        let open = [
            at(20, "a", Op::Fault, "client-pause"),
            at(50_000, "nemesis", Op::Config, "end"),
        ];
        let f = Faults::collect(&open, TTL, &mut Report::default());
        assert_eq!(f.blame(49_000 * MS), "client-pause");
    }

    #[test]
    fn blame_prefers_a_measured_fault_then_the_latest_start() {
        let events = [
            at(10, "nemesis", Op::Fault, "server-clock-jump"),
            at(20, "nemesis", Op::Fault, "latency"),
            at(30, "nemesis", Op::Fault, "server-pause"),
            at(100, "nemesis", Op::Heal, "latency"),
        ];
        let f = Faults::collect(&events, TTL, &mut Report::default());
        assert_eq!(f.blame(50 * MS), "server-clock-jump");
        let tolerated = Faults::collect(&events[1..], TTL, &mut Report::default());
        assert_eq!(tolerated.blame(50 * MS), "server-pause");
        assert_eq!(tolerated.blame_over(0, 25 * MS), "latency");
    }

    #[test]
    fn data_loss_and_detection_look_at_the_right_spans() {
        let events = [
            at(10, "nemesis", Op::Fault, "server-restart-volatile"),
            at(20, "nemesis", Op::Heal, "server-restart-volatile"),
            at(30, "a", Op::Fault, "client-pause"),
            at(40, "nemesis", Op::Fault, "failover"),
            at(60, "nemesis", Op::Heal, "failover"),
            at(70, "a", Op::Heal, "client-pause"),
        ];
        let f = Faults::collect(&events, TTL, &mut Report::default());
        let between = |a: u64, b: u64| f.data_loss_between(a * MS, b * MS);
        assert_eq!(between(0, 50).as_deref(), Some("failover"));
        assert_eq!(between(0, 30).as_deref(), Some("server-restart-volatile"));
        assert_eq!(between(11, 30), None);
        assert_eq!(
            f.data_loss_during(15 * MS, 50 * MS).map(|s| s.start),
            Some(10 * MS)
        );
        assert_eq!(f.data_loss_during(21 * MS, 39 * MS).map(|s| s.start), None);
        // A lost signal at 65 ms: the failover (healed at 60) is what it
        // detected; the client pause is not store-side; 0 grace: too late.
        assert_eq!(f.detected(65 * MS, 0, TTL), Some(40 * MS));
        assert_eq!(f.detected(65 * MS, 0, 0), None);
        assert_eq!(
            f.detected(65 * MS, 45 * MS, TTL),
            None,
            "held only after it began"
        );
    }
}
