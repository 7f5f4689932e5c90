//! The checker: reads a history and counts what went wrong, per fault class.
//!
//! - **Stale write accepted** (fenced resources): a write was applied although a
//!   write with a higher fence had been applied (acknowledged) before this one
//!   was sent.
//! - **Fence regression**: in a resource's order of applied writes (each write
//!   names the value it read, so the write it followed is known), a write
//!   carries a lower fence than its predecessor, or an equal fence of another
//!   lease; and two acquisitions of one key that got the same fence.
//! - **Lost update**: an acknowledged write overwritten without being read (two
//!   acknowledged writes of one value), or missing from the final value.
//! - **Double grant**: two holders of one key whose belief intervals overlap:
//!   from the acquire's reply to the release, or to when the holder learned
//!   the loss (lost signal), or to its last local deadline if it was frozen.
//! - **Orphan key**: a lease key still held TTL + ε after every client stopped.
//! - **Over-admission**: a limiter admitted more than its limit while its state
//!   was not lost.
//!
//! Each finding is blamed on a fault in force while it happened, or healed
//! shortly before (within two TTLs and a second); when several are, one warden
//! does not claim to tolerate (a frozen client, a forgetful store, a jumped
//! clock, a failover) is blamed first, as the likelier cause; otherwise `none`.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::history::{Event, Kind, Op};

/// Findings of one fault class.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Faults of this kind injected.
    pub faults: u64,
    /// Pairs of holders of one key whose intervals overlapped.
    pub double_grants: u64,
    /// Fenced writes applied after a higher fence had been acknowledged.
    pub stale_accepted: u64,
    /// Fence regressions (fenced resources and lease fences).
    pub fence_regressions: u64,
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

    /// The sum over the classes whose faults warden is meant to tolerate (and
    /// `none`): double grants and over-admission there are defects.
    pub fn tolerated(&self) -> Counts {
        let mut t = Counts::default();
        for (class, c) in &self.by_class {
            let tolerated = warden_test::nemesis::FaultKind::from_name(class)
                .is_none_or(warden_test::nemesis::FaultKind::tolerated);
            if tolerated {
                t.add(c);
            }
        }
        t
    }

    /// The safety violations that fail a run, one line each: any stale write
    /// accepted (under any fault: the fenced resource must refuse the stale
    /// writer whatever happened to the lease), any orphan key; fence
    /// regressions, double grants and limiter over-admission under tolerated
    /// faults. (Under the others — a store that forgot its data, a jumped
    /// clock — they are measured, not failures.)
    pub fn violations(&self) -> Vec<String> {
        let all = self.total();
        let tol = self.tolerated();
        [
            (
                all.stale_accepted,
                "stale writes accepted by a fenced resource",
            ),
            (
                tol.fence_regressions,
                "fence regressions under tolerated faults",
            ),
            (self.orphan_keys, "orphan lease keys after TTL + ε"),
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

#[derive(Debug, Clone)]
struct FaultSpan {
    kind: String,
    start: u64,
    end: u64,
}

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

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Kinds whose fault loses the store's data: fence counters and limiter
/// counts restart.
fn loses_data(kind: &str) -> bool {
    matches!(kind, "server-restart-volatile" | "failover")
}

/// Checks a history (events sorted by time, see [`crate::history::read`]).
pub fn check(events: &[Event], bad_lines: usize) -> Report {
    let mut report = Report {
        bad_lines: bad_lines as u64,
        ..Report::default()
    };
    let mut ttl_ns: u64 = 1_000_000_000;
    for e in events
        .iter()
        .filter(|e| e.op == Op::Config && e.client == "checker")
    {
        if let Some(ms) = e.value {
            ttl_ns = ms * 1_000_000;
        }
        if let Some(n) = &e.note {
            report.scenario.clone_from(n);
        }
    }
    let blame_window = 2 * ttl_ns + 1_000_000_000;

    // Fault spans: a fault event opens one, the next heal of that client and kind closes it.
    let mut spans: Vec<FaultSpan> = Vec::new();
    let mut open: HashMap<(String, String), usize> = HashMap::new();
    let last_t = events.last().map_or(0, |e| e.t);
    for e in events {
        let kind = e.note.clone().unwrap_or_default();
        match e.op {
            Op::Fault => {
                open.insert((e.client.clone(), kind.clone()), spans.len());
                spans.push(FaultSpan {
                    kind: kind.clone(),
                    start: e.t,
                    end: last_t,
                });
                report.by_class.entry(kind).or_default().faults += 1;
            }
            Op::Heal => {
                if let Some(i) = open.remove(&(e.client.clone(), kind)) {
                    spans[i].end = e.t;
                }
            }
            _ => {}
        }
    }
    // The fault to blame for a finding that took place over [from, to]: one in
    // force then or healed within the window before; a fault warden does not
    // claim to tolerate explains a violation better than a tolerated one, so
    // it is blamed first; then the latest start.
    let blame_over = |from: u64, to: u64| -> String {
        spans
            .iter()
            .filter(|s| s.start <= to && from <= s.end.saturating_add(blame_window))
            .max_by_key(|s| {
                let measured = warden_test::nemesis::FaultKind::from_name(&s.kind)
                    .is_some_and(|k| !k.tolerated());
                (measured, s.start)
            })
            .map_or_else(|| "none".to_string(), |s| s.kind.clone())
    };
    let blame = |t: u64| blame_over(t, t);

    let mut acquire_lat: Vec<f64> = Vec::new();
    let mut pending: HashMap<String, u64> = HashMap::new();
    let mut holds: HashMap<String, Hold> = HashMap::new();
    // Per resource: every write, and the index of each lease's write in flight.
    let mut writes: BTreeMap<String, Vec<Write>> = BTreeMap::new();
    let mut in_flight: HashMap<(String, String), usize> = HashMap::new();
    let mut finals: HashMap<String, u64> = HashMap::new();
    let mut detect: Vec<f64> = Vec::new();
    let mut limits: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new(); // admitted, limit, first, last

    for e in events {
        if e.kind == Kind::Invoke && !matches!(e.op, Op::Fault | Op::Heal | Op::Config) {
            report.ops += 1;
        }
        match (e.op, e.kind) {
            (Op::Acquire, Kind::Invoke) => {
                report.acquires += 1;
                pending.insert(e.client.clone(), e.t);
            }
            (Op::Acquire, k) => {
                if let Some(t0) = pending.remove(&e.client) {
                    acquire_lat.push((e.t.saturating_sub(t0)) as f64 / 1e6);
                }
                match k {
                    Kind::Ok => {
                        report.acquired += 1;
                        if let (Some(lease), Some(fence), Some(key)) = (&e.lease, e.fence, &e.key) {
                            holds.insert(
                                lease.clone(),
                                Hold {
                                    client: e.client.clone(),
                                    released: false,
                                    lease: lease.clone(),
                                    key: key.clone(),
                                    fence,
                                    start: e.t,
                                    end: e.t + ttl_ns,
                                },
                            );
                        }
                    }
                    Kind::Fail => report.refused += 1,
                    _ => report.acquire_errors += 1,
                }
            }
            (Op::Release, Kind::Invoke) => {
                if let Some(h) = e.lease.as_ref().and_then(|l| holds.get_mut(l)) {
                    h.end = e.until.unwrap_or(e.t).min(e.t).max(h.start);
                    h.released = true;
                }
            }
            (Op::Lost, _) => {
                // Latency from the start of a store-side fault in force (or just
                // healed), for holders that held the lease when it started (a
                // guard that arrived lost after the fault is not a detection).
                let since = e
                    .lease
                    .as_ref()
                    .and_then(|l| holds.get(l))
                    .map_or(u64::MAX, |h| h.start);
                if let Some(s) = spans
                    .iter()
                    .filter(|s| s.start <= e.t && e.t <= s.end.saturating_add(ttl_ns))
                    .filter(|s| !s.kind.starts_with("client-") && since < s.start)
                    .max_by_key(|s| s.start)
                {
                    report.lost_signals += 1;
                    detect.push(e.t.saturating_sub(s.start) as f64 / 1e6);
                }
            }
            (Op::Write, _) => {
                let (Some(res), Some(lease)) = (&e.key, &e.lease) else {
                    continue;
                };
                let per = writes.entry(res.clone()).or_default();
                if e.kind == Kind::Invoke {
                    in_flight.insert((res.clone(), lease.clone()), per.len());
                    per.push(Write {
                        lease: lease.clone(),
                        fence: e.fence.unwrap_or(0),
                        read: e.read.unwrap_or(0),
                        value: e.value.unwrap_or(0),
                        t_invoke: e.t,
                        t_done: u64::MAX,
                        outcome: Kind::Info,
                    });
                } else if let Some(w) = in_flight
                    .remove(&(res.clone(), lease.clone()))
                    .and_then(|i| per.get_mut(i))
                {
                    w.t_done = e.t;
                    w.outcome = e.kind;
                }
            }
            (Op::Final, _) => {
                if let (Some(res), Some(v)) = (&e.key, e.value) {
                    finals.insert(res.clone(), v);
                }
            }
            (Op::Orphan, _) => report.orphan_keys += 1,
            (Op::Limit, Kind::Invoke) => {}
            (Op::Limit, k) => {
                if let Some(key) = &e.key {
                    let entry = limits.entry(key.clone()).or_insert((0, 0, e.t, e.t));
                    if k == Kind::Ok {
                        entry.0 += 1;
                    }
                    entry.1 = e.value.unwrap_or(entry.1);
                    entry.3 = e.t;
                }
            }
            _ => {}
        }
    }
    acquire_lat.sort_by(f64::total_cmp);
    report.acquire_p50_ms = percentile(&acquire_lat, 50.0);
    report.acquire_p99_ms = percentile(&acquire_lat, 99.0);
    detect.sort_by(f64::total_cmp);
    report.detect_p50_ms = percentile(&detect, 50.0);
    report.detect_p99_ms = percentile(&detect, 99.0);

    let note = |report: &mut Report, s: String| {
        if report.examples.len() < 20 {
            report.examples.push(s);
        }
    };

    // A holder process killed before its release held until the kill (its
    // acquire was recorded when the command started, after the grant, so
    // start + TTL would overstate its validity).
    for h in holds.values_mut().filter(|h| !h.released) {
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

    // When each lease got its fence (for blaming a fence's reuse).
    let granted: HashMap<String, u64> =
        holds.values().map(|h| (h.lease.clone(), h.start)).collect();

    // Double grants and lease fence reuse, per key.
    let mut by_key: BTreeMap<String, Vec<Hold>> = BTreeMap::new();
    for h in holds.into_values() {
        by_key.entry(h.key.clone()).or_default().push(h);
    }
    for (key, mut hs) in by_key {
        hs.sort_by_key(|h| h.start);
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
                let class = blame_over(b.start, a.end.min(b.end));
                report
                    .by_class
                    .entry(class.clone())
                    .or_default()
                    .double_grants += 1;
                note(
                    &mut report,
                    format!(
                        "double grant on {key}: {} (fence {}) and {} (fence {}) overlap by {} ms [{class}]",
                        a.lease,
                        a.fence,
                        b.lease,
                        b.fence,
                        (a.end.min(b.end) - b.start) / 1_000_000
                    ),
                );
            }
        }
        let mut seen: HashMap<u64, &Hold> = HashMap::new();
        for h in &hs {
            if let Some(prev) = seen.insert(h.fence, h) {
                // A reused fence comes from a store that forgot its counter:
                // blame the data loss between the two grants, if there was one.
                let class = spans
                    .iter()
                    .filter(|s| loses_data(&s.kind) && s.start >= prev.start && s.start <= h.start)
                    .max_by_key(|s| s.start)
                    .map_or_else(|| blame(h.start), |s| s.kind.clone());
                report
                    .by_class
                    .entry(class.clone())
                    .or_default()
                    .fence_regressions += 1;
                note(
                    &mut report,
                    format!(
                        "fence {} of {key} handed to {} and again to {} [{class}]",
                        h.fence, prev.lease, h.lease
                    ),
                );
            }
        }
    }

    // Writes, per resource.
    for (res, per) in &writes {
        let fenced = !res.ends_with("/control");
        let mut applied: Vec<&Write> = per.iter().filter(|w| w.outcome == Kind::Ok).collect();
        if fenced {
            report.writes_applied += applied.len() as u64;
            report.writes_refused += per.iter().filter(|w| w.outcome == Kind::Fail).count() as u64;
        }
        applied.sort_by_key(|w| w.t_done);
        // Highest fence acknowledged up to each completion time.
        let mut prefix_max: Vec<(u64, u64, &str)> = Vec::with_capacity(applied.len());
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
        for w in &applied {
            // From the lease's last read before this write (the critical
            // section) to the write.
            let class = blame_over(w.t_invoke.saturating_sub(ttl_ns), w.t_invoke);
            // Stale: a higher fence was acknowledged before this write was sent.
            let before = prefix_max.partition_point(|(t, _, _)| *t < w.t_invoke);
            if before > 0 {
                let (_, max_fence, who) = prefix_max[before - 1];
                if max_fence > w.fence {
                    let c = report.by_class.entry(class.clone()).or_default();
                    if fenced {
                        c.stale_accepted += 1;
                        note(
                            &mut report,
                            format!(
                                "stale write accepted on {res}: {} wrote with fence {} after {who}'s fence {max_fence} was acknowledged [{class}]",
                                w.lease, w.fence
                            ),
                        );
                    } else {
                        c.control_stale_accepted += 1;
                    }
                }
            }
            // Regression: the write it followed (the one that wrote what it read).
            let regressed = by_value.get(&w.read).filter(|_| fenced).and_then(|preds| {
                preds.iter().find(|p| {
                    p.t_invoke < w.t_invoke
                        && (p.fence > w.fence || (p.fence == w.fence && p.lease != w.lease))
                })
            });
            if let Some(p) = regressed {
                // Like a reused lease fence: blame a data loss between the two.
                let class = spans
                    .iter()
                    .filter(|s| {
                        let from = granted.get(&p.lease).copied().unwrap_or(p.t_invoke);
                        loses_data(&s.kind) && s.start >= from && s.start <= w.t_invoke
                    })
                    .max_by_key(|s| s.start)
                    .map_or_else(|| class.clone(), |s| s.kind.clone());
                report
                    .by_class
                    .entry(class.clone())
                    .or_default()
                    .fence_regressions += 1;
                note(
                    &mut report,
                    format!(
                        "fence regression on {res}: {} (fence {}) applied after {} (fence {}) [{class}]",
                        w.lease, w.fence, p.lease, p.fence
                    ),
                );
            }
        }
        // Lost updates: one value acknowledged to two leases, or above the final value.
        let final_value = finals.get(res).copied();
        for (value, ws) in &by_value {
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
            let class = blame_over(
                ws.iter().map(|w| w.t_invoke).min().unwrap_or(0),
                ws.iter().map(|w| w.t_invoke).max().unwrap_or(0),
            );
            let c = report.by_class.entry(class).or_default();
            if fenced {
                c.lost_updates += lost;
            } else {
                c.control_lost_updates += lost;
            }
        }
    }

    // Limiters: admitted beyond the limit, blamed on data loss when a fault that
    // loses the store's state touched the key's lifetime.
    for (key, (admitted, limit, first, last)) in limits {
        if admitted <= limit {
            continue;
        }
        let extra = admitted - limit;
        let lossy = spans
            .iter()
            .find(|s| loses_data(&s.kind) && s.start <= last && s.end >= first);
        match lossy {
            Some(s) => {
                report
                    .by_class
                    .entry(s.kind.clone())
                    .or_default()
                    .burst_after_loss += extra;
            }
            None => {
                let class = blame(last);
                report
                    .by_class
                    .entry(class.clone())
                    .or_default()
                    .over_admission += extra;
                note(
                    &mut report,
                    format!("limiter {key} admitted {admitted} > limit {limit} [{class}]"),
                );
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: u64, client: &str, op: Op, kind: Kind) -> Event {
        let mut e = Event::new(client, op, kind);
        e.t = t * 1_000_000; // ms
        e
    }

    fn write(t: u64, lease: &str, fence: u64, read: u64, kind: Kind) -> Vec<Event> {
        let mut inv = ev(t, lease, Op::Write, Kind::Invoke)
            .key("k0/redis")
            .held(fence, lease)
            .value(read + 1);
        inv.read = Some(read);
        let done = ev(t + 1, lease, Op::Write, kind)
            .key("k0/redis")
            .held(fence, lease);
        vec![inv, done]
    }

    #[test]
    fn a_write_with_an_older_fence_after_a_newer_one_is_stale() {
        let mut h = Vec::new();
        h.extend(write(10, "a", 1, 0, Kind::Ok));
        h.extend(write(20, "b", 2, 1, Kind::Ok));
        h.extend(write(30, "a", 1, 0, Kind::Ok)); // applied although fence 2 was acknowledged
        h.sort_by_key(|e| e.t);
        let r = check(&h, 0);
        assert_eq!(r.total().stale_accepted, 1);
        assert_eq!(r.violations().len(), 1);
    }

    #[test]
    fn a_refused_stale_write_and_an_in_order_chain_are_fine() {
        let mut h = Vec::new();
        h.extend(write(10, "a", 1, 0, Kind::Ok));
        h.extend(write(20, "b", 2, 1, Kind::Ok));
        h.extend(write(30, "a", 1, 0, Kind::Fail));
        h.sort_by_key(|e| e.t);
        let r = check(&h, 0);
        assert_eq!(r.total(), Counts::default());
        assert!(r.violations().is_empty());
        assert_eq!((r.writes_applied, r.writes_refused), (2, 1));
    }

    #[test]
    fn an_equal_fence_of_another_lease_is_a_regression_and_reuse_is_counted() {
        let mut h = vec![
            ev(1, "a", Op::Acquire, Kind::Ok).key("k0").held(5, "a"),
            ev(2, "a", Op::Release, Kind::Invoke).key("k0").held(5, "a"),
            ev(3, "b", Op::Acquire, Kind::Ok).key("k0").held(5, "b"),
            ev(4, "b", Op::Release, Kind::Invoke).key("k0").held(5, "b"),
        ];
        h.extend(write(10, "a", 5, 0, Kind::Ok));
        h.extend(write(20, "b", 5, 1, Kind::Ok));
        h.sort_by_key(|e| e.t);
        let r = check(&h, 0);
        // One reuse of the lease fence, one write following another lease's equal fence.
        assert_eq!(r.total().fence_regressions, 2);
    }

    #[test]
    fn overlapping_holders_are_a_double_grant_blamed_on_the_fault_in_force() {
        let mut cfg = ev(0, "checker", Op::Config, Kind::Info);
        cfg.value = Some(1000);
        let mut rel_a = ev(50, "a", Op::Release, Kind::Invoke)
            .key("k0")
            .held(1, "a");
        rel_a.until = Some(40_000_000);
        let h = vec![
            cfg,
            ev(5, "nemesis", Op::Fault, Kind::Info).note("server-clock-jump"),
            ev(6, "nemesis", Op::Heal, Kind::Info).note("server-clock-jump"),
            ev(10, "a", Op::Acquire, Kind::Ok).key("k0").held(1, "a"),
            ev(30, "b", Op::Acquire, Kind::Ok).key("k0").held(2, "b"),
            rel_a,
            ev(60, "b", Op::Release, Kind::Invoke)
                .key("k0")
                .held(2, "b"),
        ];
        let r = check(&h, 0);
        assert_eq!(r.by_class["server-clock-jump"].double_grants, 1);
        assert_eq!(r.tolerated().double_grants, 0);
        assert!(r.violations().is_empty(), "measured, not a failure");
    }

    #[test]
    fn a_measured_fault_is_blamed_before_a_tolerated_one_in_force() {
        let mut rel_a = ev(50, "a", Op::Release, Kind::Invoke)
            .key("k0")
            .held(1, "a");
        rel_a.until = Some(50_000_000);
        let h = vec![
            ev(1, "a", Op::Fault, Kind::Info).note("client-pause"),
            ev(5, "nemesis", Op::Fault, Kind::Info).note("latency"),
            ev(10, "a", Op::Acquire, Kind::Ok).key("k0").held(1, "a"),
            ev(20, "a", Op::Heal, Kind::Info).note("client-pause"),
            ev(30, "b", Op::Acquire, Kind::Ok).key("k0").held(2, "b"),
            rel_a,
            ev(60, "b", Op::Release, Kind::Invoke)
                .key("k0")
                .held(2, "b"),
            ev(70, "nemesis", Op::Heal, Kind::Info).note("latency"),
        ];
        let r = check(&h, 0);
        assert_eq!(r.by_class["client-pause"].double_grants, 1);
        assert_eq!(r.tolerated().double_grants, 0);
    }

    #[test]
    fn a_guard_lost_on_arrival_is_no_holder() {
        let mut rel_b = ev(60, "b", Op::Release, Kind::Invoke)
            .key("k0")
            .held(2, "b");
        rel_b.until = Some(30_000_000); // its validity was over when the reply came
        let h = vec![
            ev(10, "a", Op::Acquire, Kind::Ok).key("k0").held(1, "a"),
            ev(30, "b", Op::Acquire, Kind::Ok).key("k0").held(2, "b"),
            ev(50, "a", Op::Release, Kind::Invoke)
                .key("k0")
                .held(1, "a"),
            rel_b,
        ];
        assert_eq!(check(&h, 0).total().double_grants, 0);
    }

    #[test]
    fn a_lost_update_is_two_acknowledged_writes_of_one_value() {
        let mut h = Vec::new();
        h.extend(write(10, "a", 1, 0, Kind::Ok));
        h.extend(write(20, "b", 2, 0, Kind::Ok)); // read 0 too: a's update is lost
        h.sort_by_key(|e| e.t);
        assert_eq!(check(&h, 0).total().lost_updates, 1);
    }

    #[test]
    fn violations_count_stale_writes_always_and_grants_only_under_tolerated_faults() {
        let bad = Counts {
            faults: 1,
            double_grants: 2,
            stale_accepted: 3,
            fence_regressions: 4,
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
                "8 orphan lease keys after TTL + ε",
            ]
        );
        r.by_class.insert("latency".into(), bad);
        assert_eq!(
            r.violations(),
            [
                "6 stale writes accepted by a fenced resource",
                "4 fence regressions under tolerated faults",
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
