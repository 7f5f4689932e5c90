//! The checker: reads a history and counts what went wrong, per fault class.
//!
//! - **Stale write accepted** (fenced resources): a write was applied although a
//!   write with a higher fence had been applied (acknowledged) before this one
//!   was sent.
//! - **Fence regression**: in a resource's order of applied writes (each write
//!   names the value it read, so the write it followed is known), a write
//!   carries a lower fence than its predecessor, or an equal fence of another
//!   lease.
//! - **Reused fence**: two acquisitions of one key that got the same fence.
//!   Like stale writes, fence regressions and reused fences fail a run under
//!   every fault (fences are floored by the store's clock).
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
//! shortly before (within two TTLs and a second); when several are, one tenure
//! does not claim to tolerate (a frozen client, a forgetful store, a jumped
//! clock, a failover) is blamed first, as the likelier cause; otherwise `none`.
//!
//! The phases, in order: the fault spans and blame (`faults`), one fold over
//! the events (`fold`: counts, latencies, and the input of the rest), the
//! holders' overlaps and reused fences (`holders`), the fenced-write analysis
//! (`writes`), the limiter admissions (`limits`); the findings go to a
//! [`Report`] (`report`).

mod faults;
mod fold;
mod handoff;
mod holders;
mod limits;
mod report;
mod writes;

pub use report::{Counts, Report};

use crate::history::{Event, Op};

/// The lease TTL (ns) named by the history's config events (1 s if none);
/// sets the report's scenario.
fn config(events: &[Event], report: &mut Report) -> u64 {
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
    ttl_ns
}

/// Checks a history (events sorted by time, see [`crate::history::read`]).
pub fn check(events: &[Event], bad_lines: usize) -> Report {
    let mut report = Report {
        bad_lines: bad_lines as u64,
        ..Report::default()
    };
    let ttl_ns = config(events, &mut report);
    let faults = faults::Faults::collect(events, ttl_ns, &mut report);
    let fold::Folded {
        mut holders,
        writes,
        limits,
    } = fold::fold(events, ttl_ns, &faults, &mut report);
    holders.end_at_kills(events);
    let granted = holders.granted();
    holders.check(&faults, &mut report);
    writes.check(&granted, &faults, ttl_ns, &mut report);
    limits.check(&faults, &mut report);
    handoff::check(events, &mut report);
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Kind;

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
        assert_eq!(r.total().reused_fences, 1);
        assert_eq!(r.total().fence_regressions, 1);
    }

    /// A volatile restart of a store without the clock floor: the fences of
    /// the grants after it start over, and the run fails on them.
    #[test]
    fn fences_that_start_over_after_a_volatile_restart_fail_the_run() {
        let restart =
            |t: u64, op: Op| ev(t, "nemesis", op, Kind::Info).note("server-restart-volatile");
        let grant = |t: u64, lease: &str, fence: u64| {
            [
                ev(t, lease, Op::Acquire, Kind::Ok)
                    .key("k0")
                    .held(fence, lease),
                ev(t + 1, lease, Op::Release, Kind::Invoke)
                    .key("k0")
                    .held(fence, lease),
            ]
        };
        let floored = |fences: [u64; 5]| {
            let mut h = Vec::new();
            h.extend(grant(10, "a", fences[0]));
            h.extend(grant(20, "b", fences[1]));
            h.extend(grant(30, "c", fences[2]));
            h.push(restart(40, Op::Fault));
            h.push(restart(45, Op::Heal));
            h.extend(grant(50, "d", fences[3]));
            h.extend(grant(60, "e", fences[4]));
            check(&h, 0)
        };
        // Without the floor: the counter starts over at 1.
        let r = floored([1, 2, 3, 1, 2]);
        assert_eq!(r.by_class["server-restart-volatile"].reused_fences, 2);
        assert_eq!(r.violations(), ["2 reused fences"]);
        // With it: the next fences are above the clock of the restart.
        let r = floored([
            1_764_673_200_000_000,
            1_764_673_200_000_001,
            1_764_673_200_000_002,
            1_764_673_200_045_000,
            1_764_673_200_045_001,
        ]);
        assert_eq!(r.total().reused_fences, 0);
        assert!(r.violations().is_empty(), "{:?}", r.violations());
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

    /// One grant of `key` to `lease` from `from` to `to` (ms), in `mode`
    /// (`None`: a lease; `read` / `write`).
    fn hold(
        lease: &str,
        key: &str,
        fence: u64,
        from: u64,
        to: u64,
        mode: Option<&str>,
    ) -> Vec<Event> {
        let mut ok = ev(from, lease, Op::Acquire, Kind::Ok)
            .key(key)
            .held(fence, lease);
        ok.note = mode.map(str::to_string);
        vec![
            ev(from - 1, lease, Op::Acquire, Kind::Invoke).key(key),
            ok,
            ev(to, lease, Op::Release, Kind::Invoke)
                .key(key)
                .held(fence, lease),
        ]
    }

    /// A lease set of `keys` (with their fences; `None`: granted without
    /// one) held by `lease` from `from` to `to` (ms).
    fn set(lease: &str, keys: &[(&str, Option<u64>)], from: u64, to: u64) -> Vec<Event> {
        let names: Vec<String> = keys.iter().map(|(k, _)| (*k).to_string()).collect();
        let joined = crate::held::joined(&names);
        let mut h = vec![ev(from - 1, lease, Op::Acquire, Kind::Invoke).key(&joined)];
        for (k, fence) in keys {
            let g = ev(from, lease, Op::Grant, Kind::Ok).key(k);
            h.push(match fence {
                Some(f) => g.held(*f, lease),
                None => ev(from, lease, Op::Grant, Kind::Fail).key(k),
            });
        }
        let mut ok = ev(from, lease, Op::Acquire, Kind::Ok).key(&joined);
        ok.lease = Some(lease.to_string());
        h.push(ok);
        for (k, fence) in keys.iter().filter_map(|(k, f)| Some((k, (*f)?))) {
            h.push(
                ev(to, lease, Op::Release, Kind::Invoke)
                    .key(k)
                    .held(fence, lease),
            );
        }
        h
    }

    fn checked(mut h: Vec<Event>) -> Report {
        h.sort_by_key(|e| e.t);
        check(&h, 0)
    }

    #[test]
    fn lease_sets_overlapping_on_one_key_are_a_double_grant() {
        // Disjoint in time on the shared key m1: fine.
        let mut h = set("a", &[("m0", Some(1)), ("m1", Some(1))], 10, 20);
        h.extend(set("b", &[("m2", Some(1)), ("m1", Some(2))], 30, 40));
        let r = checked(h.clone());
        assert!(r.violations().is_empty(), "{:?}", r.violations());
        assert_eq!((r.acquired, r.sets_acquired), (2, 2));
        // A third set holding m1 while b does: one double grant, on m1 only.
        h.extend(set("c", &[("m1", Some(3)), ("m3", Some(1))], 35, 50));
        let r = checked(h);
        assert_eq!(r.total().double_grants, 1);
        assert!(
            r.examples[0].starts_with("double grant on m1: b (fence 2) and c (fence 3)"),
            "{:?}",
            r.examples
        );
        assert_eq!(r.violations(), ["1 double grants under tolerated faults"]);
    }

    #[test]
    fn a_lease_set_granted_without_a_fence_for_a_key_fails_the_run() {
        let r = checked(set("a", &[("m0", Some(1)), ("m1", None)], 10, 20));
        assert_eq!(r.incomplete_sets, 1);
        assert_eq!(
            r.violations(),
            ["1 lease sets without a fence for every key"]
        );
    }

    #[test]
    fn a_set_lost_before_the_next_grant_held_until_its_lost_signal() {
        let mut h = set("a", &[("m0", Some(1)), ("m1", Some(1))], 10, 60);
        h.extend(set("b", &[("m1", Some(2))], 40, 70));
        assert_eq!(checked(h.clone()).total().double_grants, 1);
        // a's lost signal fired at 30 ms, before b's grant: a knew.
        let mut lost = ev(30, "a", Op::Lost, Kind::Ok).key("m0+m1");
        lost.lease = Some("a".into());
        h.push(lost);
        assert_eq!(checked(h).total().double_grants, 0);
    }

    #[test]
    fn readers_share_a_key_but_a_writer_shares_it_with_nobody() {
        let mut h = hold("r1", "rw0", 1, 10, 50, Some("read"));
        h.extend(hold("r2", "rw0", 2, 20, 60, Some("read")));
        let r = checked(h.clone());
        assert_eq!(r.total().double_grants, 0);
        assert_eq!((r.readers, r.writers), (2, 0));
        // A writer granted while r2 reads.
        h.extend(hold("w1", "rw0", 3, 55, 70, Some("write")));
        let r = checked(h);
        assert_eq!(r.total().double_grants, 1);
        assert!(
            r.examples[0].contains("r2 (fence 2) and w1 (fence 3)"),
            "{:?}",
            r.examples
        );
    }

    #[test]
    fn read_write_fences_out_of_order_are_fence_regressions() {
        // In order: reader 10, writer 20 (above every earlier fence), reader
        // 30 (above the writer's).
        let mut h = hold("r1", "rw0", 10, 10, 20, Some("read"));
        h.extend(hold("w1", "rw0", 20, 30, 40, Some("write")));
        h.extend(hold("r2", "rw0", 30, 50, 60, Some("read")));
        assert_eq!(checked(h.clone()).total().fence_regressions, 0);
        // A writer whose fence is not above an earlier reader's.
        let mut bad = h.clone();
        bad.extend(hold("w2", "rw0", 25, 70, 80, Some("write")));
        let r = checked(bad);
        assert_eq!(r.total().fence_regressions, 1);
        assert_eq!(
            r.examples,
            ["fence order on rw0: w2 (fence 25) granted after r2 (fence 30) [none]"]
        );
        // A reader below the latest writer's fence (but above other readers).
        h.extend(hold("w2", "rw0", 90, 70, 80, Some("write")));
        h.extend(hold("r3", "rw0", 80, 90, 95, Some("read")));
        let r = checked(h);
        assert_eq!(r.total().fence_regressions, 1);
        assert_eq!(r.violations(), ["1 fence regressions"]);
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
    fn an_update_above_the_final_value_is_lost_and_the_control_resource_counts_apart() {
        let mut h = Vec::new();
        h.extend(write(10, "a", 1, 0, Kind::Ok));
        h.extend(write(20, "b", 2, 1, Kind::Ok));
        // The same chain, stale and with one value twice, on the control resource.
        for (t, lease, fence, read) in [(30, "a", 1, 0), (40, "b", 2, 1), (50, "c", 1, 1)] {
            for mut e in write(t, lease, fence, read, Kind::Ok) {
                e.key = Some("k0/control".into());
                h.push(e);
            }
        }
        // b's write of 2 is not in the final value.
        h.push(
            ev(60, "checker", Op::Final, Kind::Ok)
                .key("k0/redis")
                .value(1),
        );
        let t = check(&h, 0).total();
        assert_eq!((t.lost_updates, t.stale_accepted), (1, 0));
        assert_eq!((t.control_lost_updates, t.control_stale_accepted), (1, 1));
    }
}
