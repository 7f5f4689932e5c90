//! `tenure-chaos`: runs fault-injection scenarios against tenure and checks
//! their histories.
//!
//! ```text
//! tenure-chaos scorecard [--minutes N] [--seed S] [--doc docs/RELIABILITY.md] [--out DIR] [--tenure-bin PATH]
//! tenure-chaos run --scenario NAME [--seconds N] [--seed S] [--out DIR] [--no-fence-check] [--postgres]
//! tenure-chaos check HISTORY
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tenure_chaos::history;
use tenure_chaos::rmw::{RmwArgs, rmw};
use tenure_chaos::run::{Scenario, Settings, redis_version, run};
use tenure_chaos::scorecard::{Row, render, splice};

fn usage() -> ExitCode {
    eprintln!(
        "usage: tenure-chaos scorecard [--minutes N] [--seed S] [--doc PATH] [--out DIR] [--tenure-bin PATH]\n       \
         tenure-chaos run --scenario NAME [--seconds N] [--seed S] [--out DIR] [--no-fence-check] [--postgres] [--tenure-bin PATH]\n       \
         tenure-chaos check HISTORY\n       \
         tenure-chaos render --seed S --minutes N [--out DIR] [--doc PATH]\n       \
         tenure-chaos list   (the scenarios, in scorecard order)\n\
         scenarios: sqlite-processes, redis-master, redis-master-replica-acks, quorum-3, quorum-5,\n           etcd-3, redis-cluster, redis-sentinel, redis-line"
    );
    ExitCode::from(64)
}

/// The options after the subcommand: `--name value` pairs and flags.
struct Opts(Vec<String>);

impl Opts {
    fn value(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .map(String::as_str)
    }
    fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }
    fn num<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, String> {
        self.value(name)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|_| format!("{name}: not a number: {v}"))
            })
            .transpose()
    }
}

fn default_seed() -> u64 {
    history::now_ns() ^ u64::from(std::process::id()).rotate_left(32)
}

/// The `tenure` binary: `--tenure-bin`, `$TENURE_BIN`, or next to this one.
fn tenure_bin(o: &Opts) -> Option<PathBuf> {
    o.value("--tenure-bin")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("TENURE_BIN").map(PathBuf::from))
        .or_else(|| {
            let me = std::env::current_exe().ok()?;
            let p = me.parent()?.join("tenure");
            p.is_file().then_some(p)
        })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first().cloned() else {
        return usage();
    };
    let o = Opts(args[1..].to_vec());
    let result = match cmd.as_str() {
        "run" => cmd_run(&o),
        "scorecard" => cmd_scorecard(&o),
        "check" => cmd_check(&o),
        "render" => cmd_render(&o),
        "rmw" => cmd_rmw(&o),
        "list" => {
            for s in Scenario::ALL {
                println!("{}", s.name());
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => return usage(),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tenure-chaos: {e}");
            ExitCode::from(70)
        }
    }
}

fn settings(
    o: &Opts,
    scenario: Scenario,
    seed: u64,
    duration: Duration,
) -> Result<Settings, String> {
    Ok(Settings {
        scenario,
        seed,
        duration,
        clients: o
            .num("--clients")?
            .unwrap_or(if scenario == Scenario::Sqlite { 3 } else { 4 }),
        // Beside them (not in the waiting line's scenario): lease sets
        // everywhere, read-write leases where the store has them.
        set_clients: o
            .num("--set-clients")?
            .unwrap_or(if scenario == Scenario::Line { 0 } else { 3 }),
        rw_clients: o.num("--rw-clients")?.unwrap_or(
            if scenario == Scenario::Line || !scenario.read_write() {
                0
            } else {
                3
            },
        ),
        keys: o
            .num("--keys")?
            .unwrap_or(if scenario == Scenario::Line { 1 } else { 2 }),
        ttl: Duration::from_millis(o.num("--ttl-ms")?.unwrap_or(if scenario == Scenario::Line {
            5000
        } else {
            1000
        })),
        fence_check: !o.flag("--no-fence-check"),
        postgres: o.flag("--postgres"),
        only: None,
        out_dir: PathBuf::from(o.value("--out").unwrap_or("target/chaos")),
        tenure_bin: tenure_bin(o),
    })
}

fn cmd_run(o: &Opts) -> Result<ExitCode, String> {
    let name = o.value("--scenario").ok_or("--scenario is required")?;
    let scenario = Scenario::from_name(name).ok_or_else(|| format!("unknown scenario {name}"))?;
    let seed = o.num("--seed")?.unwrap_or_else(default_seed);
    let secs: u64 = o.num("--seconds")?.unwrap_or(60);
    println!("tenure-chaos: scenario {name}, seed {seed}, {secs} s");
    let s = settings(o, scenario, seed, Duration::from_secs(secs))?;
    let r = run(&s)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&r.report).map_err(|e| e.to_string())?
    );
    let v = r.report.violations();
    println!("history: {}", r.history.display());
    if v.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        println!("FAILED (seed {seed}): {}", v.join("; "));
        Ok(ExitCode::from(1))
    }
}

fn cmd_check(o: &Opts) -> Result<ExitCode, String> {
    let path = o.0.first().ok_or("a history file is required")?;
    let (events, bad) = history::read(std::path::Path::new(path)).map_err(|e| e.to_string())?;
    let r = tenure_chaos::check::check(&events, bad);
    println!(
        "{}",
        serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
    );
    Ok(if r.violations().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn cmd_rmw(o: &Opts) -> Result<ExitCode, String> {
    let a = RmwArgs {
        history: PathBuf::from(o.value("--history").ok_or("--history")?),
        resource: o.value("--resource").ok_or("--resource")?.to_string(),
        pg: o.value("--pg").map(str::to_string),
        client: o.value("--client").unwrap_or("p").to_string(),
        lease: o
            .value("--lease")
            .map_or_else(|| format!("p{}", std::process::id()), str::to_string),
        hold: Duration::from_millis(o.num("--hold-ms")?.unwrap_or(0)),
        fence_check: !o.flag("--no-fence-check"),
    };
    rmw(&a)?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_scorecard(o: &Opts) -> Result<ExitCode, String> {
    let minutes: f64 = o.num("--minutes")?.unwrap_or(1.0);
    let seed: u64 = o.num("--seed")?.unwrap_or_else(default_seed);
    let doc = PathBuf::from(o.value("--doc").unwrap_or("docs/RELIABILITY.md"));
    let only: Option<Vec<Scenario>> = o
        .value("--scenarios")
        .map(|list| list.split(',').filter_map(Scenario::from_name).collect());
    let per = Duration::from_secs_f64((minutes * 60.0 / Scenario::ALL.len() as f64).max(5.0));
    println!(
        "tenure-chaos scorecard: seed {seed}, {minutes} min ({} s per scenario)",
        per.as_secs()
    );
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (i, scenario) in Scenario::ALL.into_iter().enumerate() {
        if only.as_ref().is_some_and(|l| !l.contains(&scenario)) {
            continue;
        }
        let row = scorecard_run(o, scenario, seed.wrapping_add(i as u64), per)?;
        if !row.report.violations().is_empty() {
            failed.push(scenario.name());
        }
        rows.push(row);
    }
    let date = date_utc();
    let how = format!("`scripts/chaos --minutes {minutes} --seed {seed}`");
    write_table(&doc, &render(&date, &redis_version(), &how, &rows))?;
    println!("written to {}", doc.display());
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("violations in: {}", failed.join(", "));
        ExitCode::from(1)
    })
}

/// Runs one scenario of the scorecard for `per`; prints what it found.
fn scorecard_run(o: &Opts, scenario: Scenario, seed: u64, per: Duration) -> Result<Row, String> {
    let mut s = settings(o, scenario, seed, per)?;
    s.postgres = scenario == Scenario::Redis;
    let t = Instant::now();
    println!("== {} (seed {seed})", scenario.name());
    let r = run(&s)?;
    let v = r.report.violations();
    println!(
        "   {} faults, {} ops, history {}{}",
        r.report.total().faults,
        r.report.ops,
        r.history.display(),
        if v.is_empty() {
            String::new()
        } else {
            format!(" — VIOLATIONS: {}", v.join("; "))
        }
    );
    print_examples(&r.report);
    Ok(Row {
        scenario: scenario.name().to_string(),
        seed,
        minutes: t.elapsed().as_secs_f64() / 60.0,
        report: r.report,
    })
}

/// Prints a report's examples, indented.
fn print_examples(report: &tenure_chaos::check::Report) {
    for ex in &report.examples {
        println!("   {ex}");
    }
}

/// Prints `table` and writes it between the scorecard markers of `doc`.
fn write_table(doc: &std::path::Path, table: &str) -> Result<(), String> {
    println!("{table}");
    let old = std::fs::read_to_string(doc).unwrap_or_default();
    std::fs::write(doc, splice(&old, table)).map_err(|e| format!("write {}: {e}", doc.display()))
}

/// Re-checks the histories a `scorecard` run kept (same seed) and writes the
/// table again: the checker's verdicts can be refined without re-running.
fn cmd_render(o: &Opts) -> Result<ExitCode, String> {
    let seed: u64 = o.num("--seed")?.ok_or("--seed is required")?;
    let minutes: f64 = o.num("--minutes")?.ok_or("--minutes is required")?;
    let out = PathBuf::from(o.value("--out").unwrap_or("target/chaos"));
    let doc = PathBuf::from(o.value("--doc").unwrap_or("docs/RELIABILITY.md"));
    let mut rows = Vec::new();
    for (i, scenario) in Scenario::ALL.into_iter().enumerate() {
        let s_seed = seed.wrapping_add(i as u64);
        let path = out.join(format!("history-{}-{s_seed}.jsonl", scenario.name()));
        let Ok((events, bad)) = history::read(&path) else {
            println!("{}: no history at {}", scenario.name(), path.display());
            continue;
        };
        let span = match (events.first(), events.last()) {
            (Some(a), Some(b)) => (b.t - a.t) as f64 / 60e9,
            _ => 0.0,
        };
        let report = tenure_chaos::check::check(&events, bad);
        println!(
            "{}: {} faults, violations: {:?}",
            scenario.name(),
            report.total().faults,
            report.violations()
        );
        print_examples(&report);
        rows.push(Row {
            scenario: scenario.name().to_string(),
            seed: s_seed,
            minutes: span,
            report,
        });
    }
    let how = format!(
        "`scripts/chaos --minutes {minutes} --seed {seed}`, its histories checked again by \
         `tenure-chaos render --seed {seed} --minutes {minutes}`"
    );
    write_table(&doc, &render(&date_utc(), &redis_version(), &how, &rows))?;
    Ok(ExitCode::SUCCESS)
}

/// Today's date, `YYYY-MM-DD` (UTC), from the system clock.
fn date_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = i64::try_from(secs / 86_400).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
