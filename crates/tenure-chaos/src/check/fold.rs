//! The event fold: one pass over the history that counts operations, times
//! acquires and lost signals, and gathers holders, writes and limiter replies
//! for the later phases.

use std::collections::HashMap;

use super::Report;
use super::faults::Faults;
use super::holders::Holders;
use super::limits::Limits;
use super::writes::Writes;
use crate::history::{Event, Kind, Op};

/// What the fold gathered for the later phases.
pub(super) struct Folded {
    /// Every acquisition.
    pub(super) holders: Holders,
    /// Every write and final value.
    pub(super) writes: Writes,
    /// Every limiter reply.
    pub(super) limits: Limits,
}

/// The fold's state.
struct Fold<'a> {
    ttl_ns: u64,
    faults: &'a Faults,
    /// Per client: when its acquire in flight was invoked.
    pending: HashMap<String, u64>,
    acquire_lat: Vec<f64>,
    detect: Vec<f64>,
    out: Folded,
}

/// Folds `events` (sorted by time) into `report` and the returned phases' input.
pub(super) fn fold(events: &[Event], ttl_ns: u64, faults: &Faults, report: &mut Report) -> Folded {
    let mut f = Fold {
        ttl_ns,
        faults,
        pending: HashMap::new(),
        acquire_lat: Vec::new(),
        detect: Vec::new(),
        out: Folded {
            holders: Holders::default(),
            writes: Writes::default(),
            limits: Limits::default(),
        },
    };
    for e in events {
        f.event(e, report);
    }
    f.acquire_lat.sort_by(f64::total_cmp);
    report.acquire_p50_ms = percentile(&f.acquire_lat, 50.0);
    report.acquire_p99_ms = percentile(&f.acquire_lat, 99.0);
    f.detect.sort_by(f64::total_cmp);
    report.detect_p50_ms = percentile(&f.detect, 50.0);
    report.detect_p99_ms = percentile(&f.detect, 99.0);
    f.out
}

impl Fold<'_> {
    fn event(&mut self, e: &Event, report: &mut Report) {
        if e.kind == Kind::Invoke && !matches!(e.op, Op::Fault | Op::Heal | Op::Config) {
            report.ops += 1;
        }
        match (e.op, e.kind) {
            (Op::Acquire, Kind::Invoke) => {
                report.acquires += 1;
                self.pending.insert(e.client.clone(), e.t);
            }
            (Op::Acquire, k) => self.acquire_reply(e, k, report),
            (Op::Grant, Kind::Ok) => {
                let invoked = self.pending.get(&e.client).copied();
                self.out.holders.acquired(e, self.ttl_ns, invoked);
            }
            (Op::Release, Kind::Invoke) => self.out.holders.released(e),
            (Op::Lost, _) => self.lost(e, report),
            (Op::Write, _) => self.out.writes.write(e),
            (Op::Final, _) => self.out.writes.final_value(e),
            (Op::Orphan, _) => report.orphan_keys += 1,
            (Op::Limit, Kind::Invoke) => {}
            (Op::Limit, _) => self.out.limits.reply(e),
            _ => {}
        }
    }

    fn acquire_reply(&mut self, e: &Event, k: Kind, report: &mut Report) {
        let invoked = self.pending.remove(&e.client);
        if let Some(t0) = invoked {
            self.acquire_lat.push((e.t.saturating_sub(t0)) as f64 / 1e6);
        }
        match k {
            Kind::Ok if e.fence.is_none() => {
                report.acquired += 1;
                report.sets_acquired += 1;
                self.out.holders.set_acquired(e);
            }
            Kind::Ok => {
                report.acquired += 1;
                match e.note.as_deref() {
                    Some("read") => report.readers += 1,
                    Some("write") => report.writers += 1,
                    _ => {}
                }
                self.out.holders.acquired(e, self.ttl_ns, invoked);
            }
            Kind::Fail => report.refused += 1,
            _ => report.acquire_errors += 1,
        }
    }

    /// A lost signal: latency from the start of a store-side fault in force
    /// (or just healed), for holders that held the lease when it started (a
    /// guard that arrived lost after the fault is not a detection).
    fn lost(&mut self, e: &Event, report: &mut Report) {
        self.out.holders.lost(e);
        let since = e
            .lease
            .as_deref()
            .and_then(|l| self.out.holders.start_of(l))
            .unwrap_or(u64::MAX);
        if let Some(start) = self.faults.detected(e.t, since, self.ttl_ns) {
            report.lost_signals += 1;
            self.detect.push(e.t.saturating_sub(start) as f64 / 1e6);
        }
    }
}

/// The nearest-rank percentile `p` of `sorted` (0 when empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 5.0);
        assert_eq!(percentile(&v, 99.0), 10.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
