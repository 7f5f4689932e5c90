//! Short seeded fault-injection runs against real redis-server and PostgreSQL
//! processes. Every random choice follows from the printed seed (set
//! `TENURE_CHAOS_SEED` to replay one); a failing run keeps its history.

use std::time::Duration;

mod common;

use common::{keep_if, out_dir, seed};
use tenure_chaos::run::{Scenario, Settings, run};
use tenure_test::nemesis::FaultKind;

const DEFAULT_SEED: u64 = 20_261_201;
/// Lease-set and read-write clients beside the lease clients.
const SET_CLIENTS: usize = 2;
const RW_CLIENTS: usize = 2;

fn settings(test: &str, seed: u64, secs: u64, only: Vec<FaultKind>) -> Settings {
    Settings {
        scenario: Scenario::Redis,
        seed,
        duration: Duration::from_secs(secs),
        clients: 4,
        set_clients: SET_CLIENTS,
        rw_clients: RW_CLIENTS,
        keys: 2,
        ttl: Duration::from_secs(1),
        fence_check: true,
        postgres: false,
        only: Some(only),
        out_dir: out_dir(test),
        tenure_bin: None,
    }
}

#[test]
fn a_short_seeded_run_accepts_no_stale_write_and_leaves_no_orphan() {
    let seed = seed(DEFAULT_SEED);
    println!("seed {seed}");
    // Every fault tenure tolerates, plus clients frozen past their TTL (the
    // fenced resources must refuse them); the scenario keeps those it can
    // inject on one Redis master and PostgreSQL.
    let kinds = FaultKind::ALL
        .into_iter()
        .filter(|k| k.tolerated() || *k == FaultKind::ClientPause)
        .collect();
    let mut s = settings("short", seed, 60, kinds);
    s.postgres = true;
    let r = run(&s).expect("the scenario sets up");
    let all = r.report.total();
    // violations() covers stale writes and orphans under any fault; fence
    // regressions are failures here under client pauses too.
    // The lease-set and read-write clients were granted (their checks ran).
    let rep = &r.report;
    let few_gates = rep.sets_acquired < 20 || rep.readers < 20 || rep.writers < 5;
    let failed = !r.report.violations().is_empty() || all.fence_regressions > 0 || few_gates;
    keep_if(failed, &r, seed);
    assert!(
        !failed,
        "seed {seed}: {:?}\n{:#?}",
        r.report.violations(),
        r.report.examples
    );
    // The run did something: faults, grants, applied and refused fenced writes.
    assert!(all.faults >= 15, "seed {seed}: only {} faults", all.faults);
    assert!(r.report.acquired >= 50, "seed {seed}: {:#?}", r.report);
    assert!(
        r.report.writes_applied >= 50,
        "seed {seed}: {:#?}",
        r.report
    );
    assert!(
        !few_gates,
        "seed {seed}: too few lease sets or read-write grants"
    );
}

#[test]
fn the_checker_reports_stale_writes_when_the_fence_is_not_checked() {
    let seed = seed(DEFAULT_SEED);
    println!("seed {seed}");
    // One key, frequent freezes past the TTL: stale writers are certain.
    let mut s = settings("unfenced", seed, 20, vec![FaultKind::ClientPause]);
    s.keys = 1;
    (s.set_clients, s.rw_clients) = (0, 0);
    s.fence_check = false;
    let unfenced = run(&s).expect("the scenario sets up");
    let stale = unfenced.report.total().stale_accepted;
    keep_if(stale == 0, &unfenced, seed);
    assert!(
        stale > 0,
        "seed {seed}: with the fence check off the checker must see stale writes: {:#?}",
        unfenced.report
    );
    assert!(!unfenced.report.violations().is_empty());

    // The same schedule with the check on: the resource refuses them.
    s.fence_check = true;
    let fenced = run(&s).expect("the scenario sets up");
    let t = fenced.report.total();
    let failed = t.stale_accepted > 0 || fenced.report.writes_refused == 0;
    keep_if(failed, &fenced, seed);
    assert_eq!(
        t.stale_accepted, 0,
        "seed {seed}: {:#?}",
        fenced.report.examples
    );
    assert!(
        fenced.report.writes_refused > 0,
        "seed {seed}: no stale writer was refused"
    );
}
