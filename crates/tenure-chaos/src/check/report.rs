//! What the checker reports: findings per fault class, and the verdict.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Findings of one fault class.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Faults of this kind injected.
    pub faults: u64,
    /// Pairs of holders of one key whose intervals overlapped.
    pub double_grants: u64,
    /// Fenced writes applied after a higher fence had been acknowledged.
    pub stale_accepted: u64,
    /// Fence regressions at fenced resources: an applied write that followed
    /// one with a higher fence, or an equal fence of another lease.
    pub fence_regressions: u64,
    /// Reused fences: acquisitions of one key granted a fence an earlier
    /// acquisition of that key got.
    #[serde(default)]
    pub reused_fences: u64,
    /// Acknowledged updates of fenced resources that were lost.
    pub lost_updates: u64,
    /// The same checks on the unfenced control resource: stale writes applied.
    pub control_stale_accepted: u64,
    /// Lost updates on the unfenced control resource.
    pub control_lost_updates: u64,
    /// Limiter admissions beyond the limit while its state was kept.
    pub over_admission: u64,
    /// Limiter admissions beyond the limit after its state was lost (measured).
    pub burst_after_loss: u64,
}

impl Counts {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Counts) {
        self.faults += o.faults;
        self.double_grants += o.double_grants;
        self.stale_accepted += o.stale_accepted;
        self.fence_regressions += o.fence_regressions;
        self.reused_fences += o.reused_fences;
        self.lost_updates += o.lost_updates;
        self.control_stale_accepted += o.control_stale_accepted;
        self.control_lost_updates += o.control_lost_updates;
        self.over_admission += o.over_admission;
        self.burst_after_loss += o.burst_after_loss;
    }
}

/// What the checker found in one history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The scenario named by the history's config event.
    pub scenario: String,
    /// Operations invoked (acquire, read, write, release, limit).
    pub ops: u64,
    /// Acquires invoked.
    pub acquires: u64,
    /// Acquires that got the lease.
    pub acquired: u64,
    /// Lease sets granted (every key of the set).
    #[serde(default)]
    pub sets_acquired: u64,
    /// Read-write lease grants to readers.
    #[serde(default)]
    pub readers: u64,
    /// Read-write lease grants to writers.
    #[serde(default)]
    pub writers: u64,
    /// Acquires refused because another holder had the lease.
    pub refused: u64,
    /// Acquires with an unknown outcome (error, timeout).
    pub acquire_errors: u64,
    /// Acquire latency (invoke to reply) p50, ms.
    pub acquire_p50_ms: f64,
    /// Acquire latency p99, ms.
    pub acquire_p99_ms: f64,
    /// Fenced writes applied.
    pub writes_applied: u64,
    /// Fenced writes refused as stale.
    pub writes_refused: u64,
    /// Lost signals of holders that held the lease when a store-side fault began.
    pub lost_signals: u64,
    /// Lost-signal latency from the fault's start, p50, ms.
    pub detect_p50_ms: f64,
    /// Lost-signal latency p99, ms.
    pub detect_p99_ms: f64,
    /// Lease keys still held TTL + ε after the run.
    pub orphan_keys: u64,
    /// Lease sets granted without a fence for every one of their keys.
    #[serde(default)]
    pub incomplete_sets: u64,
    /// Head waiters killed while they waited (`waiter-kill`) whose key was
    /// handed on afterwards.
    #[serde(default)]
    pub waiter_kills: u64,
    /// After such a kill: from the holder's release to the next grant, p50, ms.
    #[serde(default)]
    pub waiter_kill_stall_p50_ms: u64,
    /// The same, p99, ms.
    #[serde(default)]
    pub waiter_kill_stall_p99_ms: u64,
    /// The same, longest, ms.
    #[serde(default)]
    pub waiter_kill_stall_max_ms: u64,
    /// History lines that did not parse.
    pub bad_lines: u64,
    /// Findings per fault class (`none` for no fault nearby).
    pub by_class: BTreeMap<String, Counts>,
    /// The first violations, described, for the report.
    pub examples: Vec<String>,
}

impl Report {
    /// The sum over every class.
    pub fn total(&self) -> Counts {
        let mut t = Counts::default();
        for c in self.by_class.values() {
            t.add(c);
        }
        t
    }

    /// The sum over the classes whose faults tenure is meant to tolerate (and
    /// `none`): double grants and over-admission there are defects.
    pub fn tolerated(&self) -> Counts {
        let mut t = Counts::default();
        for (class, c) in &self.by_class {
            let tolerated = tenure_test::nemesis::FaultKind::from_name(class)
                .is_none_or(tenure_test::nemesis::FaultKind::tolerated);
            if tolerated {
                t.add(c);
            }
        }
        t
    }

    /// The safety violations that fail a run, one line each: any stale write
    /// accepted (under any fault: the fenced resource must refuse the stale
    /// writer whatever happened to the lease), any fence regression or reused
    /// fence (under any fault too: fences are floored by the store's clock, so
    /// not even a store that forgot its data repeats one), any orphan key;
    /// double grants and limiter over-admission under tolerated faults.
    /// (Under the others — a store that forgot its data, a jumped clock —
    /// those are measured, not failures.)
    pub fn violations(&self) -> Vec<String> {
        let all = self.total();
        let tol = self.tolerated();
        [
            (
                all.stale_accepted,
                "stale writes accepted by a fenced resource",
            ),
            (all.fence_regressions, "fence regressions"),
            (all.reused_fences, "reused fences"),
            (self.orphan_keys, "orphan lease keys after TTL + ε"),
            (
                self.incomplete_sets,
                "lease sets without a fence for every key",
            ),
            (tol.double_grants, "double grants under tolerated faults"),
            (
                tol.over_admission,
                "limiter over-admissions while the store was up",
            ),
        ]
        .into_iter()
        .filter(|&(n, _)| n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect()
    }
}
/// How many violations [`Report::examples`] keeps.
const EXAMPLES: usize = 20;

impl Report {
    /// The counts of fault class `class`, created empty if it has none yet.
    pub(super) fn class(&mut self, class: &str) -> &mut Counts {
        self.by_class.entry(class.to_string()).or_default()
    }

    /// Keeps `example` if fewer than [`EXAMPLES`] are kept.
    pub(super) fn note(&mut self, example: String) {
        if self.examples.len() < EXAMPLES {
            self.examples.push(example);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_count_stale_writes_always_and_grants_only_under_tolerated_faults() {
        let bad = Counts {
            faults: 1,
            double_grants: 2,
            stale_accepted: 3,
            fence_regressions: 4,
            reused_fences: 9,
            lost_updates: 5,
            over_admission: 6,
            burst_after_loss: 7,
            ..Counts::default()
        };
        let mut r = Report {
            orphan_keys: 8,
            ..Report::default()
        };
        r.by_class.insert("client-pause".into(), bad.clone());
        assert_eq!(
            r.violations(),
            [
                "3 stale writes accepted by a fenced resource",
                "4 fence regressions",
                "9 reused fences",
                "8 orphan lease keys after TTL + ε",
            ]
        );
        r.by_class.insert("latency".into(), bad);
        assert_eq!(
            r.violations(),
            [
                "6 stale writes accepted by a fenced resource",
                "8 fence regressions",
                "18 reused fences",
                "8 orphan lease keys after TTL + ε",
                "2 double grants under tolerated faults",
                "6 limiter over-admissions while the store was up",
            ]
        );
        r.orphan_keys = 0;
        r.by_class.clear();
        assert!(r.violations().is_empty());
    }
}
