//! The curves of the report (how each cost grows with its workload): their
//! tables, their charts (docs/bench/*.svg) and the targets they are held to.

use std::fmt::Write as _;
use std::path::Path;

use crate::charts::{self, Axes, Series};
use crate::extra::Extras;
use crate::report::Target;
use crate::samples::Samples;

/// The stores of the hand-off curve, in the order shown.
pub const WAITER_STORES: [&str; 3] = ["redis", "sqlite", "etcd"];
/// Waiters on one key.
pub const WAITERS: [usize; 4] = [1, 10, 100, 1000];
/// Held leases of the `tenure list` curve.
pub const LISTED: [usize; 3] = [1_000, 10_000, 100_000];
/// Keys of the memory curve (10⁶ only with `TENURE_BENCH_BIG=1`).
pub const MEMORY_KEYS: [usize; 3] = [10_000, 100_000, 1_000_000];
const DISTINCT_PEERS: [&str; 5] = ["tenure", "raw", "same-work", "rslock", "redis-py"];

fn points(s: &Samples, xs: &[usize], name: impl Fn(usize) -> String) -> Vec<(f64, f64)> {
    xs.iter()
        .filter_map(|&x| Some((x as f64, s.median(&name(x))?)))
        .collect()
}

fn series(name: &str, points: Vec<(f64, f64)>, dashed: bool) -> Series {
    Series {
        name: name.to_string(),
        points,
        dashed,
    }
}

/// The charts written so far into one directory, with their captions.
struct Gallery<'a> {
    dir: &'a Path,
    written: Vec<(String, String)>,
}

impl Gallery<'_> {
    /// Keeps `file` under `caption` when drawing it wrote the file (a chart
    /// without points writes none).
    fn keep(&mut self, file: &str, caption: &str, drawn: charts::Result) {
        match drawn {
            Ok(()) if self.dir.join(file).exists() => {
                self.written.push((file.to_string(), caption.to_string()))
            }
            Ok(()) => {}
            Err(e) => eprintln!("chart {file}: {e}"),
        }
    }

    fn lines(&mut self, file: &str, caption: &str, axes: &Axes<'_>, series: &[Series]) {
        let drawn = charts::lines(&self.dir.join(file), axes, series);
        self.keep(file, caption, drawn);
    }

    fn bars(&mut self, file: &str, caption: &str, title: &str, unit: &str, bars: &[(String, f64)]) {
        let drawn = charts::bars(&self.dir.join(file), title, unit, bars);
        self.keep(file, caption, drawn);
    }
}

/// Writes every chart into `dir`; returns `(file name, caption)` of those
/// written, in the order the page shows them.
pub fn charts(s: &Samples, extras: &Extras, dir: &Path) -> Vec<(String, String)> {
    std::fs::create_dir_all(dir).unwrap();
    let mut g = Gallery {
        dir,
        written: Vec::new(),
    };
    let tasks = crate::distinct::TASKS;
    let lines: Vec<Series> = DISTINCT_PEERS
        .iter()
        .map(|p| series(p, points(s, &tasks, |t| format!("distinct{t}.{p}")), false))
        .collect();
    g.lines(
        "throughput.svg",
        "Acquire + release cycles/s on distinct keys against concurrent tasks",
        &Axes {
            title: "Distinct keys: cycles/s vs tasks (one Redis)",
            x: "concurrent tasks",
            y: "acquire + release cycles/s",
            log_x: true,
            log_y: false,
        },
        &lines,
    );

    let mut lat = Vec::new();
    for store in WAITER_STORES {
        for (q, dashed) in [("p50", false), ("p99", true)] {
            lat.push(series(
                &format!("{store} {q}"),
                points(s, &WAITERS, |w| format!("waiters.{store}.{w}.{q}_us")),
                dashed,
            ));
        }
    }
    g.lines(
        "handoff-waiters.svg",
        "Hand-off latency (release to next holder) against waiters on one key",
        &Axes {
            title: "Hand-off latency vs waiters on one key",
            x: "waiters",
            y: "release → next holder, µs",
            log_x: true,
            log_y: true,
        },
        &lat,
    );

    let cdf: Vec<Series> = WAITER_STORES
        .iter()
        .filter_map(|store| {
            let d = s.sorted(&format!("waiters.{store}.10"))?;
            let n = d.len() as f64;
            let pts = d
                .iter()
                .enumerate()
                .step_by((d.len() / 200).max(1))
                .map(|(i, &v)| (v, (i + 1) as f64 / n * 100.0))
                .collect();
            Some(series(store, pts, false))
        })
        .collect();
    g.lines(
        "handoff-distribution.svg",
        "Distribution of hand-off latencies, 10 waiters on one key",
        &Axes {
            title: "Hand-off latency distribution, 10 waiters",
            x: "release → next holder, µs",
            y: "% of hand-offs at most",
            log_x: true,
            log_y: false,
        },
        &cdf,
    );

    let mem = [
        ("lease keys, held", "memory.lease", "held"),
        ("lease keys, after release", "memory.lease", "after"),
        ("limiter keys, held", "memory.limit", "held"),
        ("limiter keys, after expiry", "memory.limit", "after"),
    ]
    .map(|(name, what, when)| {
        series(
            name,
            points(s, &MEMORY_KEYS, |n| format!("{what}.{n}.{when}")),
            false,
        )
    });
    g.lines(
        "memory.svg",
        "Redis memory per key against keys",
        &Axes {
            title: "Redis memory per key (INFO used_memory)",
            x: "keys",
            y: "bytes per key",
            log_x: true,
            log_y: false,
        },
        &mem,
    );

    let list: Vec<Series> = ["redis", "sqlite"]
        .iter()
        .map(|st| series(st, points(s, &LISTED, |n| format!("list.{st}.{n}")), false))
        .collect();
    g.lines(
        "list.svg",
        "`tenure list` time against held leases",
        &Axes {
            title: "tenure list: time vs held leases",
            x: "held leases",
            y: "ms per tenure list",
            log_x: true,
            log_y: true,
        },
        &list,
    );

    let cold: Vec<(String, f64)> = [
        ("flock f true", "cli.flock"),
        ("minimal lease run, SQLite", "cli.floor"),
        ("tenure run -- true, SQLite", "cli.sqlite"),
        ("the same, build with SQLite alone", "cli.sqlite_only"),
        ("the same, static build", "cli.static"),
        ("tenure run -- true, Redis", "cli.redis"),
    ]
    .iter()
    .filter_map(|(l, n)| Some((l.to_string(), s.median(n)?)))
    .collect();
    g.bars(
        "cold-start.svg",
        "A one-shot `tenure run -- true` against `flock`",
        "Cold start: one process, start to exit",
        "ms",
        &cold,
    );

    let mut local: Vec<(String, f64)> = Vec::new();
    for keys in [1, 10_000] {
        for who in ["tenure", "governor"] {
            if let Some(v) = s.median(&format!("local.{who}.{keys}")) {
                local.push((format!("{who}, {keys} key(s)"), v));
            }
        }
    }
    g.bars(
        "limiter-local.svg",
        "In-process limiter against governor, ns per decision",
        "In-process limiter: ns per decision, 1 thread",
        "ns",
        &local,
    );
    for (stem, title, unit, bars) in &extras.charts {
        g.bars(&format!("{stem}.svg"), title, title, unit, bars);
    }
    g.written
}

/// The images, as markdown, for the page (`docs/bench/NAME.svg`).
pub fn charts_markdown(charts: &[(String, String)]) -> String {
    let mut out = String::new();
    for (file, caption) in charts {
        let _ = writeln!(out, "![{caption}](bench/{file})\n");
    }
    out
}

fn fmt_or_dash(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}

/// The tables of the curves.
pub fn render(s: &Samples) -> String {
    let mut out = String::new();
    let m = |n: &str| s.median(n);

    let _ = writeln!(out, "\n## Throughput against tasks\n");
    let _ = writeln!(
        out,
        "| tasks | tenure | raw | same work | rslock | redis-py | tenure / raw | tenure / same work |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    for t in crate::distinct::TASKS {
        let v = |p: &str| m(&format!("distinct{t}.{p}"));
        let cell = |p: &str| fmt_or_dash(v(p), charts::short);
        let ratio = |base: &str| match (v("tenure"), v(base)) {
            (Some(w), Some(r)) => format!("{:.2}×", w / r),
            _ => "–".into(),
        };
        let _ = writeln!(
            out,
            "| {t} | {} | {} | {} | {} | {} | {} | {} |",
            cell("tenure"),
            cell("raw"),
            cell("same-work"),
            cell("rslock"),
            cell("redis-py"),
            ratio("raw"),
            ratio("same-work")
        );
    }

    let _ = writeln!(out, "\n## Hand-off latency against waiters\n");
    let _ = writeln!(
        out,
        "| store | waiters | release → next holder, p50 | p99 | hand-offs/s |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    for store in WAITER_STORES {
        for w in WAITERS {
            let n = format!("waiters.{store}.{w}");
            let Some(p50) = m(&format!("{n}.p50_us")) else {
                continue;
            };
            let p99 = m(&format!("{n}.p99_us")).unwrap_or(f64::NAN);
            let r = m(&format!("{n}.rate")).unwrap_or(f64::NAN);
            let _ = writeln!(
                out,
                "| {store} | {w} | {p50:.0} µs | {p99:.0} µs | {} |",
                charts::short(r)
            );
        }
    }

    let _ = writeln!(out, "\n## Redis memory per key\n");
    let _ = writeln!(
        out,
        "| keys | lease, held | lease, after release | keys left per lease | fence retention | limiter, held | limiter, after expiry | keys left per limiter key |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    let retention = fmt_or_dash(m("memory.fence_retention_s"), |v| {
        format!("{:.0} h", v / 3600.0)
    });
    for n in MEMORY_KEYS {
        let v = |what: &str| m(&format!("memory.{what}"));
        let Some(held) = v(&format!("lease.{n}.held")) else {
            continue;
        };
        // Freed memory can leave `used_memory` a few bytes under its start.
        let b = |x: Option<f64>| fmt_or_dash(x, |v| format!("{:.0} B", v.max(0.0)));
        let k = |x: Option<f64>| fmt_or_dash(x, |v| format!("{v:.2}"));
        let _ = writeln!(
            out,
            "| {} | {held:.0} B | {} | {} | {retention} | {} | {} | {} |",
            charts::short(n as f64),
            b(v(&format!("lease.{n}.after"))),
            k(v(&format!("lease.{n}.left"))),
            b(v(&format!("limit.{n}.held"))),
            b(v(&format!("limit.{n}.after"))),
            k(v(&format!("limit.{n}.left"))),
        );
    }

    let _ = writeln!(out, "\n## `tenure list` against held leases\n");
    let _ = writeln!(out, "| held leases | Redis | SQLite |");
    let _ = writeln!(out, "|---:|---:|---:|");
    for n in LISTED {
        let c = |st: &str| fmt_or_dash(m(&format!("list.{st}.{n}")), |v| format!("{v:.0} ms"));
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            charts::short(n as f64),
            c("redis"),
            c("sqlite")
        );
    }

    let _ = writeln!(out, "\n## Cold start: what one `tenure run -- true` does\n");
    let mut by_name: Vec<String> = Vec::new();
    for (name, calls) in s.prefixed("cli.redis.command.") {
        by_name.push(format!(
            "`{}` {calls:.0}",
            name.to_uppercase().replace('|', " ")
        ));
    }
    let _ = writeln!(
        out,
        "| | flock | minimal lease run, SQLite | tenure, SQLite | tenure built with SQLite alone | tenure, static build, SQLite | tenure, Redis |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    let runs = [
        "cli.flock",
        "cli.floor",
        "cli.sqlite",
        "cli.sqlite_only",
        "cli.static",
        "cli.redis",
    ];
    let row = |what: &str, cell: &dyn Fn(&str) -> String, suffix: &str| {
        let cells: Vec<String> = runs.iter().map(|n| cell(&format!("{n}{suffix}"))).collect();
        format!("| {what} | {} |", cells.join(" | "))
    };
    let ms = |n: &str| fmt_or_dash(m(n), |v| format!("{v:.1} ms"));
    let ratio = |n: &str| match (m(n), m("cli.flock")) {
        (Some(v), Some(flock)) if flock > 0.0 => format!("{:.2}×", v / flock),
        _ => "–".to_string(),
    };
    let sc = |n: &str| fmt_or_dash(m(n), |v| format!("{v:.0}"));
    let _ = writeln!(out, "{}", row("start to exit, median", &ms, ""));
    let _ = writeln!(out, "{}", row("ratio to `flock`", &ratio, ""));
    let _ = writeln!(
        out,
        "{}",
        row("system calls (`strace -c -f`)", &sc, ".syscalls")
    );
    let _ = writeln!(
        out,
        "| Redis commands (`INFO commandstats`) | | | | | | {} |",
        sc("cli.redis.commands")
    );
    if !by_name.is_empty() {
        let _ = writeln!(
            out,
            "\nThe Redis commands of one run: {}.",
            by_name.join(", ")
        );
    }
    out.push_str(HOW);
    out
}

/// The targets the curves are held to.
pub fn targets(s: &Samples) -> Vec<Target> {
    let mut out = Vec::new();
    for store in WAITER_STORES {
        let p50 = |w: usize| s.median(&format!("waiters.{store}.{w}.p50_us"));
        let Some(low) = p50(10) else { continue };
        let most = WAITERS.iter().rev().find_map(|&w| Some((w, p50(w)?)));
        if let Some((w, high)) = most.filter(|(w, _)| *w > 10) {
            out.push(Target {
                what: format!(
                    "{store}: hand-off p50 flat in waiters (O(1)): {w} waiters ≤ 2× 10 waiters"
                ),
                measured: format!("{:.2}×", high / low),
                met: high <= 2.0 * low,
            });
        }
    }
    out
}

const HOW: &str = "
How the curves are measured (`crates/tenure-bench/benches/peers/`):

- *throughput*: as *distinct keys* above, at each number of tasks; redis-py
  (a process of its own) at 16 and 64 only.
- *hand-off latency*: 1 + W tasks take turns on one key through
  `attempt_within`, each back in line right after its release, so W wait at
  every hand-off; the latency is from the start of the holder's release to the
  next holder having the lease (at least 300 hand-offs, and two turns of the
  line). Redis, SQLite (a file in a temporary directory) and a one-member etcd,
  all on this host. The distribution chart is that of 10 waiters.
- *memory*: a redis-server of its own; `used_memory` of `INFO memory` before,
  while holding N leases (lease key and fence counter), and after releasing
  them (the fence counters stay, with their retention; an expired lease leaves
  the same); N limiter keys (GCRA, 10 per hour) while their state lives and
  after it expired (the test harness shortens every TTL by two hours, which
  deletes the keys whose TTL ends, as a clock jump would). Bytes per key are
  the difference divided by N.
- *`tenure list`*: this process holds N leases; the release `tenure` binary
  lists them (`--json`, to a pipe), the median of 3 runs.
- *cold start*: the Redis commands of a second `tenure run -- true` against a
  server (the first loaded the scripts), counted by the server; system calls
  of each command and its children by `strace -c -f`, on its second run (the
  first creates the SQLite files). The *minimal lease run*
  (`crates/tenure-bench/examples/cold_floor.rs`, built with the same release
  profile) is the least a lease run on SQLite does: it opens the file as
  tenure does, takes the lease with a fence in one write transaction, runs
  the command and deletes the lease in a second; no argument parser, async
  runtime, signal forwarding or waiting line.
";
