//! Fenced-write analysis: stale writes accepted, fence regressions and lost
//! updates, per resource (the unfenced control resource counted apart).

use std::collections::{BTreeMap, HashMap};

use super::Report;
use super::faults::Faults;
use crate::history::{Event, Kind};

/// One read-modify-write's write.
#[derive(Debug, Clone)]
struct Write {
    lease: String,
    fence: u64,
    read: u64,
    value: u64,
    t_invoke: u64,
    t_done: u64,
    outcome: Kind,
}

/// Every write of a history, per resource, and each resource's final value.
#[derive(Debug, Default)]
pub(super) struct Writes {
    per: BTreeMap<String, Vec<Write>>,
    /// The index of each (resource, lease)'s write in flight.
    in_flight: HashMap<(String, String), usize>,
    finals: HashMap<String, u64>,
}

impl Writes {
    /// A write event: an invoke starts a write, a reply completes it.
    pub(super) fn write(&mut self, e: &Event) {
        let (Some(res), Some(lease)) = (&e.key, &e.lease) else {
            return;
        };
        let per = self.per.entry(res.clone()).or_default();
        if e.kind == Kind::Invoke {
            self.in_flight
                .insert((res.clone(), lease.clone()), per.len());
            per.push(Write {
                lease: lease.clone(),
                fence: e.fence.unwrap_or(0),
                read: e.read.unwrap_or(0),
                value: e.value.unwrap_or(0),
                t_invoke: e.t,
                t_done: u64::MAX,
                outcome: Kind::Info,
            });
        } else if let Some(w) = self
            .in_flight
            .remove(&(res.clone(), lease.clone()))
            .and_then(|i| per.get_mut(i))
        {
            w.t_done = e.t;
            w.outcome = e.kind;
        }
    }

    /// A resource's final value, read after the run.
    pub(super) fn final_value(&mut self, e: &Event) {
        if let (Some(res), Some(v)) = (&e.key, e.value) {
            self.finals.insert(res.clone(), v);
        }
    }

    /// Checks every resource's writes. `granted`: when each lease got its fence.
    pub(super) fn check(
        &self,
        granted: &HashMap<String, u64>,
        faults: &Faults,
        ttl_ns: u64,
        report: &mut Report,
    ) {
        for (res, per) in &self.per {
            let ledger = Ledger::new(res, per, report);
            for w in &ledger.applied {
                ledger.stale(w, faults, ttl_ns, report);
                ledger.regression(w, granted, faults, ttl_ns, report);
            }
            ledger.lost_updates(self.finals.get(res).copied(), faults, report);
        }
    }
}

/// The writes applied to one resource, in completion order, indexed.
struct Ledger<'a> {
    res: &'a str,
    /// Whether the resource checks fences (`…/control` does not).
    fenced: bool,
    applied: Vec<&'a Write>,
    /// Highest fence acknowledged up to each completion time: `(t_done, fence, lease)`.
    prefix_max: Vec<(u64, u64, &'a str)>,
    by_value: HashMap<u64, Vec<&'a Write>>,
}

impl<'a> Ledger<'a> {
    /// Indexes `per`'s applied writes; counts a fenced resource's applied and
    /// refused writes in `report`.
    fn new(res: &'a str, per: &'a [Write], report: &mut Report) -> Self {
        let fenced = !res.ends_with("/control");
        let mut applied: Vec<&Write> = per.iter().filter(|w| w.outcome == Kind::Ok).collect();
        if fenced {
            report.writes_applied += applied.len() as u64;
            report.writes_refused += per.iter().filter(|w| w.outcome == Kind::Fail).count() as u64;
        }
        applied.sort_by_key(|w| w.t_done);
        let mut prefix_max = Vec::with_capacity(applied.len());
        let mut best: (u64, &str) = (0, "");
        for w in &applied {
            if w.fence > best.0 {
                best = (w.fence, &w.lease);
            }
            prefix_max.push((w.t_done, best.0, best.1));
        }
        let mut by_value: HashMap<u64, Vec<&Write>> = HashMap::new();
        for w in &applied {
            by_value.entry(w.value).or_default().push(w);
        }
        Ledger {
            res,
            fenced,
            applied,
            prefix_max,
            by_value,
        }
    }

    /// The class of a finding about `w`: from the lease's last read before
    /// this write (the critical section) to the write.
    fn class_of(w: &Write, faults: &Faults, ttl_ns: u64) -> String {
        faults.blame_over(w.t_invoke.saturating_sub(ttl_ns), w.t_invoke)
    }

    /// Stale: a higher fence was acknowledged before `w` was sent.
    fn stale(&self, w: &Write, faults: &Faults, ttl_ns: u64, report: &mut Report) {
        let before = self.prefix_max.partition_point(|(t, _, _)| *t < w.t_invoke);
        if before == 0 {
            return;
        }
        let (_, max_fence, who) = self.prefix_max[before - 1];
        if max_fence <= w.fence {
            return;
        }
        let class = Self::class_of(w, faults, ttl_ns);
        let c = report.class(&class);
        if !self.fenced {
            c.control_stale_accepted += 1;
            return;
        }
        c.stale_accepted += 1;
        report.note(format!(
            "stale write accepted on {}: {} wrote with fence {} after {who}'s fence {max_fence} was acknowledged [{class}]",
            self.res, w.lease, w.fence
        ));
    }

    /// Regression: the write `w` followed (the one that wrote what it read)
    /// had a higher fence, or an equal one of another lease.
    fn regression(
        &self,
        w: &Write,
        granted: &HashMap<String, u64>,
        faults: &Faults,
        ttl_ns: u64,
        report: &mut Report,
    ) {
        let regressed = self
            .by_value
            .get(&w.read)
            .filter(|_| self.fenced)
            .and_then(|preds| {
                preds.iter().find(|p| {
                    p.t_invoke < w.t_invoke
                        && (p.fence > w.fence || (p.fence == w.fence && p.lease != w.lease))
                })
            });
        let Some(p) = regressed else {
            return;
        };
        // Like a reused lease fence: blame a data loss between the two.
        let from = granted.get(&p.lease).copied().unwrap_or(p.t_invoke);
        let class = faults
            .data_loss_between(from, w.t_invoke)
            .unwrap_or_else(|| Self::class_of(w, faults, ttl_ns));
        report.class(&class).fence_regressions += 1;
        report.note(format!(
            "fence regression on {}: {} (fence {}) applied after {} (fence {}) [{class}]",
            self.res, w.lease, w.fence, p.lease, p.fence
        ));
    }

    /// Lost updates: one value acknowledged to two leases, or above the final value.
    fn lost_updates(&self, final_value: Option<u64>, faults: &Faults, report: &mut Report) {
        for (value, ws) in &self.by_value {
            let mut leases: Vec<&str> = ws.iter().map(|w| w.lease.as_str()).collect();
            leases.sort_unstable();
            leases.dedup();
            let lost_dup = leases.len().saturating_sub(1) as u64;
            let lost_final = match final_value {
                Some(f) if *value > f => 1,
                _ => 0,
            };
            let lost = lost_dup.max(lost_final);
            if lost == 0 {
                continue;
            }
            let class = faults.blame_over(
                ws.iter().map(|w| w.t_invoke).min().unwrap_or(0),
                ws.iter().map(|w| w.t_invoke).max().unwrap_or(0),
            );
            let c = report.class(&class);
            if self.fenced {
                c.lost_updates += lost;
            } else {
                c.control_lost_updates += lost;
            }
        }
    }
}
