//! Short seeded runs of the replicated stores' scenarios — an etcd cluster of
//! three, a Redis Cluster, a Sentinel group — and of the waiting line, each
//! with every fault of its plan (see `scripts/chaos` for the long runs). A run
//! fails on any stale write accepted, fence regression, reused fence or
//! orphan key, and on a double grant under a fault marked tolerated. The seed
//! is printed (`TENURE_CHAOS_SEED=S` replays it); a failing run keeps its
//! history under `target/tmp/chaos/`.

use std::path::PathBuf;
use std::time::Duration;

mod common;

use common::{keep_if, out_dir, seed};
use tenure_chaos::run::{RunResult, Scenario, Settings, run};

const DEFAULT_SEED: u64 = 20_261_202;

fn settings(scenario: Scenario, seed: u64, secs: u64) -> Settings {
    let line = scenario == Scenario::Line;
    Settings {
        scenario,
        seed,
        duration: Duration::from_secs(secs),
        clients: 4,
        // Lease sets and read-write leases beside the leases (not in the line).
        set_clients: if line { 0 } else { 2 },
        rw_clients: if line { 0 } else { 2 },
        keys: if line { 1 } else { 2 },
        ttl: Duration::from_secs(if line { 5 } else { 1 }),
        fence_check: true,
        postgres: false,
        only: None,
        out_dir: out_dir(scenario.name()),
        tenure_bin: tenure_bin(),
    }
}

/// The `tenure` binary for the scenarios of `tenure run` processes:
/// `TENURE_TEST_BIN`, or the one built next to this test's directory.
fn tenure_bin() -> Option<PathBuf> {
    std::env::var_os("TENURE_TEST_BIN")
        .map(PathBuf::from)
        .or_else(|| {
            let me = std::env::current_exe().ok()?;
            let bin = me.parent()?.parent()?.join("tenure");
            bin.is_file().then_some(bin)
        })
}

/// Runs `scenario` for `secs` and fails on any violation, or when fewer than
/// `faults` faults were injected or fewer than `grants` leases granted.
fn check_run(scenario: Scenario, secs: u64, faults: u64, grants: u64) -> RunResult {
    let seed = seed(DEFAULT_SEED);
    println!("{}: seed {seed}", scenario.name());
    let r = run(&settings(scenario, seed, secs)).expect("the scenario sets up");
    let v = r.report.violations();
    let rep = &r.report;
    // Lease sets and read-write leases beside the leases (not in the line).
    let few_gates =
        scenario != Scenario::Line && (rep.sets_acquired < 5 || rep.readers < 5 || rep.writers < 2);
    let failed = !v.is_empty() || rep.total().faults < faults || rep.acquired < grants || few_gates;
    keep_if(failed, &r, seed);
    assert!(v.is_empty(), "seed {seed}: {v:?}\n{:#?}", r.report.examples);
    assert!(!failed, "seed {seed}: too little happened: {:#?}", r.report);
    r
}

#[test]
fn etcd_partitions_leader_kills_pauses_and_disk_stalls() {
    check_run(Scenario::Etcd3, 30, 8, 20);
}

#[test]
fn redis_cluster_master_kills_partitions_and_slot_migrations() {
    check_run(Scenario::Cluster, 30, 8, 20);
}

#[test]
fn redis_sentinel_failovers_while_leases_are_held() {
    check_run(Scenario::Sentinel, 30, 5, 20);
}

#[test]
fn a_killed_head_waiter_is_measured() {
    if tenure_bin().is_none() {
        println!("skipped: no tenure binary (build tenure-cli, or set TENURE_TEST_BIN)");
        return;
    }
    let r = check_run(Scenario::Line, 30, 3, 3);
    println!(
        "{} head waiters killed: hand-off p50 {} ms, max {} ms",
        r.report.waiter_kills, r.report.waiter_kill_stall_p50_ms, r.report.waiter_kill_stall_max_ms
    );
    assert!(r.report.waiter_kills > 0, "no head waiter was killed");
}
