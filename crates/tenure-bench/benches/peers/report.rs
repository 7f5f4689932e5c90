//! The table of the performance issue, from the medians, and its place in
//! `docs/BENCHMARKS.md` (between two markers; the rest of the file is kept).

use std::fmt::Write as _;

use tenure::limit::Algorithm;

use crate::samples::Samples;

/// What the table is headed with.
pub struct Setting {
    pub date: String,
    pub redis_version: String,
    pub cores: usize,
    pub load_before: String,
    pub load_after: String,
    pub rounds: usize,
    pub run_for_secs: f64,
    pub command: String,
}

pub const BEGIN: &str = "<!-- written by scripts/bench: begin -->";
pub const END: &str = "<!-- written by scripts/bench: end -->";

/// One row: the workload, tenure's figure, the peers' figures, the ratio.
struct Row {
    workload: String,
    tenure: String,
    peers: String,
    ratio: String,
}

/// A target of the performance work and whether the medians meet it: printed
/// by the bench, not written into the page.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub met: bool,
}

/// A rate: `59k`, `6.3k`, `142`.
fn rate(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.0}k", x / 1e3)
    } else if x >= 1_000.0 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

struct Table<'a> {
    s: &'a Samples,
    rows: Vec<Row>,
    targets: Vec<Target>,
}

impl Table<'_> {
    /// The median of `name`, NaN when it was not measured.
    fn m(&self, name: &str) -> f64 {
        self.s.median(name).unwrap_or(f64::NAN)
    }

    /// The CPU µs per cycle of `peer`'s client and of the server in `row`.
    fn cpu(&self, row: &str, peer: &str) -> (f64, f64) {
        (
            self.m(&format!("{row}.{peer}.client_us")),
            self.m(&format!("{row}.{peer}.server_us")),
        )
    }

    /// `peer X` for each peer measured under `prefix.<peer><suffix>`.
    fn peers(&self, prefix: &str, suffix: &str, peers: &[&str], show: fn(f64) -> String) -> String {
        peers
            .iter()
            .filter_map(|p| {
                let v = self.s.median(&format!("{prefix}.{p}{suffix}"))?;
                Some(format!("{p} {}", show(v)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A row; with `target`, `(target text, met)` is kept for the bench's
    /// printed list of targets.
    fn row(
        &mut self,
        workload: impl Into<String>,
        tenure: String,
        peers: String,
        ratio: String,
        target: &'static str,
        met: Option<bool>,
    ) {
        let workload = workload.into();
        if let Some(met) = met {
            let measured = if ratio.is_empty() { &tenure } else { &ratio };
            self.targets.push(Target {
                what: format!("{workload}: {target}"),
                measured: measured.clone(),
                met,
            });
        }
        self.rows.push(Row {
            workload,
            tenure,
            peers,
            ratio,
        });
    }
}

/// The peers of the distinct-keys rows: *same work* is the hand-written
/// client sending tenure's server commands (`raw.rs`).
const DISTINCT_PEERS: [&str; 4] = ["raw", "same-work", "rslock", "redis-py"];

/// The markdown section (setting, charts, tables, how each figure was
/// measured) and the targets with what was measured against each.
pub fn render(
    s: &Samples,
    setting: &Setting,
    extras: &crate::extra::Extras,
    charts: &[(String, String)],
) -> (String, Vec<Target>) {
    let mut t = Table {
        s,
        rows: Vec::new(),
        targets: Vec::new(),
    };

    for tasks in [16, 64] {
        let w = t.m(&format!("distinct{tasks}.tenure"));
        let raw = t.m(&format!("distinct{tasks}.raw"));
        let same = t.m(&format!("distinct{tasks}.same-work"));
        let mut peers = t.peers(&format!("distinct{tasks}"), "", &DISTINCT_PEERS, rate);
        let mut ratio = format!("{:.2}× raw, {:.2}× same work", w / raw, w / same);
        if tasks == 64 {
            let ceiling = t.m("ceiling.evalsha");
            peers.push_str(&format!(
                ", `redis-benchmark -P16` EVALSHA {}",
                rate(ceiling)
            ));
            ratio.push_str(&format!(", {:.2}× ceiling", w / ceiling));
        }
        t.row(
            format!("distinct keys, {tasks} tasks, cycles/s"),
            rate(w),
            peers,
            ratio,
            "≥ 0.9× raw",
            Some(w >= 0.9 * raw),
        );
    }

    let ((wc, ws), (rc, rs), (sc, ss)) = (
        t.cpu("distinct64", "tenure"),
        t.cpu("distinct64", "raw"),
        t.cpu("distinct64", "same-work"),
    );
    t.row(
        "distinct keys, 64 tasks: CPU µs per cycle, client + server",
        format!("{wc:.1} + {ws:.1} µs"),
        format!("raw {rc:.1} + {rs:.1} µs, same work {sc:.1} + {ss:.1} µs"),
        format!("client {:.2}×, server {:.2}× same work", wc / sc, ws / ss),
        "",
        None,
    );

    let cost = t.m("cost.tenure");
    let peers = t.peers("cost", "", &DISTINCT_PEERS, num);
    t.row(
        "Redis commands per acquire + release",
        num(cost),
        peers,
        String::new(),
        "",
        None,
    );
    let usec = t.m("cost.tenure.usec");
    let (raw, same) = (t.m("cost.raw.usec"), t.m("cost.same-work.usec"));
    t.row(
        "server µs in scripts per acquire + release",
        format!("{usec:.1} µs"),
        format!("raw {raw:.1} µs, same work {same:.1} µs"),
        format!("{:.2}× raw, {:.2}× same work", usec / raw, usec / same),
        "",
        None,
    );

    let contended = ["rslock", "raw", "redis-py"];
    let h = t.m("contended.tenure.handoffs");
    let (hr, hraw, hline, hsame, ceiling) = (
        t.m("contended.rslock.handoffs"),
        t.m("contended.raw.handoffs"),
        t.m("contended.raw-line.handoffs"),
        t.m("contended.same-work-line.handoffs"),
        t.m("contended.in-process.handoffs"),
    );
    let peers = t.peers(
        "contended",
        ".handoffs",
        &[
            "in-process",
            "raw-line",
            "same-work-line",
            "rslock",
            "raw",
            "redis-py",
        ],
        rate,
    );
    t.row(
        "contended, 16 tasks on one key: hand-offs to a different task /s",
        rate(h),
        peers,
        format!(
            "{:.1}× rslock, {:.2}× raw, {:.2}× raw line ({:.1}× rslock), \
             {:.2}× same-work line ({:.1}× rslock), {:.2}× in-process",
            h / hr,
            h / hraw,
            h / hline,
            hline / hr,
            h / hsame,
            hsame / hr,
            h / ceiling
        ),
        "≥ 20× rslock",
        Some(h >= 20.0 * hr),
    );
    let c = t.m("contended.tenure.commands");
    let peers = t.peers(
        "contended",
        ".commands",
        &["raw-line", "same-work-line", "rslock", "raw", "redis-py"],
        num,
    );
    t.row(
        "contended: Redis commands per cycle",
        num(c),
        peers,
        String::new(),
        "≤ 9 commands per hand-off",
        Some(c <= 9.0),
    );
    let us = t.m("contended.tenure.script_us");
    let line_us = t.m("contended.raw-line.script_us");
    let same_us = t.m("contended.same-work-line.script_us");
    t.row(
        "contended: server µs in scripts per cycle",
        format!("{us:.1} µs"),
        format!("raw line {line_us:.1} µs, same-work line {same_us:.1} µs"),
        format!(
            "{:.2}× raw line, {:.2}× same-work line",
            us / line_us,
            us / same_us
        ),
        "",
        None,
    );
    let ((wc, ws), (sc, ss)) = (
        t.cpu("contended", "tenure"),
        t.cpu("contended", "same-work-line"),
    );
    t.row(
        "contended: CPU µs per cycle, client + server",
        format!("{wc:.1} + {ws:.1} µs"),
        format!("same-work line {sc:.1} + {ss:.1} µs"),
        format!(
            "client {:.2}×, server {:.2}× same-work line",
            wc / sc,
            ws / ss
        ),
        "",
        None,
    );
    let worst = t.m("contended.tenure.worst_ms");
    let (lo, hi) = s
        .range("contended.tenure.worst_ms")
        .unwrap_or((f64::NAN, f64::NAN));
    let peers = t.peers("contended", ".worst_ms", &contended, |v| {
        format!("{v:.0} ms")
    });
    t.row(
        "contended: longest wait of any task, after its first turn",
        format!("{worst:.0} ms ({lo:.0}–{hi:.0})"),
        peers,
        String::new(),
        "≤ 10 ms",
        Some(worst <= 10.0),
    );
    let first = t.m("contended.tenure.first_ms");
    let peers = t.peers("contended", ".first_ms", &contended, |v| {
        format!("{v:.0} ms")
    });
    t.row(
        "contended: longest first turn of any task",
        format!("{first:.0} ms"),
        peers,
        String::new(),
        "",
        None,
    );

    for alg in Algorithm::ALL {
        let (w, min) = (
            t.m(&format!("limit.{alg}.tenure")),
            t.m(&format!("limit.{alg}.minimal")),
        );
        t.row(
            format!("limiter check, 64 tasks, {alg}, checks/s"),
            rate(w),
            format!("minimal script (`redis-benchmark -c64 -P1`) {}", rate(min)),
            format!("{:.2}×", w / min),
            "",
            None,
        );
    }
    for alg in Algorithm::ALL {
        let w = t.m(&format!("limit.{alg}.tenure_us"));
        let min = t.m(&format!("limit.{alg}.minimal_us"));
        t.row(
            format!("server µs per limiter call, {alg}"),
            format!("{w:.2} µs"),
            format!("minimal script {min:.2} µs"),
            format!("{:.2}×", w / min),
            "",
            None,
        );
    }

    let (plain, cached) = (
        t.m("blocked.plain.calls_per_refusal"),
        t.m("blocked.cached.calls_per_refusal"),
    );
    t.row(
        "flood of refused checks, store calls per refused request, cache_blocked".to_string(),
        format!("{cached:.4}"),
        format!("without the cache {plain:.2}"),
        format!("{:.4}×", cached / plain),
        "",
        None,
    );
    let (plain, cached) = (t.m("blocked.plain.rate"), t.m("blocked.cached.rate"));
    t.row(
        "flood of refused checks, 64 tasks, checks/s, cache_blocked".to_string(),
        rate(cached),
        format!("without the cache {}", rate(plain)),
        format!("{:.1}×", cached / plain),
        "",
        None,
    );

    for keys in [1, 10_000] {
        let (w, g) = (
            t.m(&format!("local.tenure.{keys}")),
            t.m(&format!("local.governor.{keys}")),
        );
        t.row(
            format!("in-process limiter, ns per decision, 1 thread, {keys} key(s)"),
            format!("{w:.0} ns"),
            format!("governor keyed {g:.0} ns"),
            format!("{:.1}×", w / g),
            "≤ 2× governor",
            Some(w <= 2.0 * g),
        );
    }

    let one = t.m("quorum.1");
    for n in [3, 5] {
        let q = t.m(&format!("quorum.{n}"));
        let left = t.m(&format!("quorum.{n}.left"));
        let errors = t.m(&format!("quorum.{n}.errors"));
        let per_rtt = q / one * n as f64;
        t.row(
            format!("quorum of {n} (one host), 16 tasks, cycles/s"),
            rate(q),
            format!(
                "one node {}; lease keys left after the run: {left:.0}; \
                 `QuorumUnavailable` errors: {errors:.0}",
                rate(one)
            ),
            format!(
                "{:.2}× one node, {per_rtt:.2}× per node round trip",
                q / one
            ),
            "",
            None,
        );
    }

    let flock = t.m("cli.flock");
    for (store, name, limit, target) in [
        ("SQLite (the default)", "cli.sqlite", 1.5, "≤ 1.5× flock"),
        (
            "SQLite, the build with SQLite alone",
            "cli.sqlite_only",
            1.5,
            "≤ 1.5× flock",
        ),
        (
            "SQLite, the static build",
            "cli.static",
            1.5,
            "≤ 1.5× flock",
        ),
        ("one local Redis", "cli.redis", 2.0, "≤ 2× flock"),
    ] {
        let ms = t.m(name);
        if !ms.is_finite() {
            continue;
        }
        t.row(
            format!("`tenure run -- true`, {store}"),
            format!("{ms:.1} ms"),
            format!("`flock f true` {flock:.1} ms"),
            format!("{:.2}× flock", ms / flock),
            target,
            Some(ms <= limit * flock),
        );
    }
    let (sqlite, floor) = (t.m("cli.sqlite"), t.m("cli.floor"));
    if floor.is_finite() {
        t.row(
            "`tenure run -- true`, SQLite, against the least a lease run does",
            format!("{sqlite:.1} ms"),
            format!(
                "minimal lease run {floor:.1} ms ({:.2}× flock)",
                floor / flock
            ),
            format!("{:.2}× the minimal run", sqlite / floor),
            "",
            None,
        );
    }

    let mut out = String::new();
    let st = setting;
    let _ = writeln!(out, "{BEGIN}");
    let _ = writeln!(
        out,
        "Measured on {}, Redis {}, {} cores (shared with other work; load average \
         {} before, {} after), loopback; medians of {} interleaved rounds of {} s \
         per workload; the curves once each. Written by\n\n    {}\n",
        st.date,
        st.redis_version,
        st.cores,
        st.load_before,
        st.load_after,
        st.rounds,
        st.run_for_secs,
        st.command
    );
    out.push_str(&crate::report_curves::charts_markdown(charts));
    let _ = writeln!(out, "## Against peers, in one run\n");
    let _ = writeln!(out, "| workload | tenure | peers | ratio |");
    let _ = writeln!(out, "|---|---:|---|---:|");
    for r in &t.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            r.workload, r.tenure, r.peers, r.ratio
        );
    }
    out.push_str(HOW);
    out.push_str(&crate::report_curves::render(s));
    for (title, rows) in &extras.tables {
        let _ = writeln!(out, "\n## {title}\n");
        let _ = writeln!(out, "| workload | tenure | peers | ratio |");
        let _ = writeln!(out, "|---|---:|---|---:|");
        for [w, te, p, r] in rows {
            let _ = writeln!(out, "| {w} | {te} | {p} | {r} |");
        }
    }
    out.push_str(&crate::local_rows::render(s));
    let _ = writeln!(out, "{END}");
    t.targets.extend(crate::report_curves::targets(s));
    t.targets.extend(crate::http::targets(s));
    t.targets.extend(crate::local_rows::targets(s));
    (out, t.targets)
}

/// How each row was measured (part of the written section).
const HOW: &str = "
How each row is measured (`crates/tenure-bench/benches/peers/`):

- *raw* is a hand-written redis-rs client: acquire is one `EVALSHA` of
  `SET NX PX` + `INCR` of a fence counter, release one of compare-and-delete.
  *rslock* is the rslock crate on one node, *redis-py* redis-py's asyncio
  `Lock` in one Python process (installed into a venv by `scripts/bench`).
  Every Rust peer uses one multiplexed connection; *raw* and *same work*
  set `TCP_NODELAY` on it, as tenure does (redis-rs leaves Nagle's
  algorithm on; rslock keeps redis-rs's default). *same work* is the same
  hand-written client sending the commands tenure's scripts send on the
  uncontended path: the fence counter written with the server's clock in µs
  by `TIME` + `SET PX GET` instead of `INCR` (fences that survive a lost
  counter, see docs/leases.md), and an `LPOP` of the key's waiting line
  before the delete (the FIFO hand-off). tenure's ratio to it is what the
  client costs; its ratio to *raw* what those guarantees cost the server.
- *distinct keys*: every task cycles acquire + release on a key of its own.
  The ceiling is `redis-benchmark -c64 -P16` of the raw acquire script
  (`EVALSHA` per second; a cycle is two of them, so 0.5× means a cycle costs
  what a pipelined `EVALSHA` pair costs the server). *CPU per cycle*: the
  CPU time of the benchmark's process (every thread's, from
  `/proc/self/task/*/schedstat`) and of the server (`used_cpu_user` +
  `used_cpu_sys` of `INFO cpu`) over a workload, divided by its cycles; the
  client and the server share the two cores.
- *commands*: 1000 sequential cycles on distinct keys, counted by the server
  (`INFO commandstats` after `CONFIG RESETSTAT`; the `EVALSHA` and every
  command inside it count). *server µs* is the time the server spent in the
  scripts (`usec_per_call` × calls of `EVALSHA`, the commands inside
  included) of those cycles, per cycle.
- *contended*: 16 tasks on one key; each task sleeps 1 ms between turns
  (tokio's `sleep`, which counts whole milliseconds of its timer: about 2 ms
  in all). *in-process* is a FIFO `tokio::sync::Mutex` and no store, with
  the same pause: the most hand-offs the pause lets 16 tasks make.
  *raw line* (`raw_line.rs`) is the least client of tenure's FIFO hand-off:
  a waiter that finds the key held stands at the end of a list, a release
  hands the key to the first in line and publishes its token, and waiters
  hear it on a RESP3 connection of their own (no fences, places or claims):
  the most hand-offs this protocol makes through this server on this
  machine. *same-work line* is the same client sending the ten commands of
  tenure's contended cycle (the release's `GET`, `LPOP`, `TIME`, `SET … GET`
  of the fence counter, `SET`, `PUBLISH`; the stand's `TIME`, `RPUSH` of a
  place with an expiry; each side one `EVALSHA`): the most hand-offs
  tenure's protocol allows a client here. tenure waits with
  `attempt_within`; rslock with its `acquire` (retries after random
  0–200 ms delays); raw polls every 1 ms; redis-py
  blocks with its default 0.1 s polling sleep. *server µs* is the time the
  server spent in the scripts, per cycle; *CPU per cycle* as for *distinct
  keys*. A cycle is one grant; a wait is
  from asking to holding (median over rounds, and the rounds' range for
  tenure). A task's
  first turn is shown apart: the 16 tasks ask at once, and each first ask
  also sets up what later ones reuse (tenure: the subscription to the key's
  release channel; rslock and redis-py: their scripts).
- *limiter*: 64 tasks check random keys of 10 000 at 100/s per key (all
  allowed), through tenure's `Limiter` on Redis; the minimal script of each
  algorithm (`minimal_scripts.rs`: the state layout, no type checks, one
  policy, cost 1) is driven by `redis-benchmark -c64 -P1` on the same server
  and keys; server µs is `usec_per_call` in `INFO commandstats` of tenure's
  `FCALL` (a Redis 7 function) and of the minimal script's `EVALSHA`.
- *blocked*: 64 tasks check random keys of 100 at 10 per minute (GCRA), so
  nearly every check is refused, through a `Limiter` on Redis without and
  with `cache_blocked`; store calls are the server's `FCALL` count (`INFO
  commandstats`) less the admitted checks, per refused check.
- *in-process*: 1 000 000 GCRA decisions on one thread through
  `Limiter::local` (1 000 000/s, so both allowed and refused decisions occur)
  against governor's keyed limiter with the same quota.
- *quorum*: 16 tasks on keys of their own, on one node alone and on quorums
  of 3 and 5 redis-servers on this host. A quorum sends every operation to
  every node, so on one host it does N times the server work: *per node round
  trip* is the ratio times N. Then every node is scanned for lease keys.
- *`tenure run`*: 40 runs of each command per round, rounded up to a
  multiple of the commands (42 for six), interleaved in an order that
  rotates by one at each turn (each command follows each other one as
  often), the release build of `tenure`, `HOME` in a fresh directory
  (the SQLite default file). Each binary is first dropped from the page
  cache and run once untimed, so that every build is read back from disk as
  after a reboot rather than measured in the pages its copying left.
  The *minimal lease run* is `examples/cold_floor.rs`, built the same way:
  what a lease run on SQLite cannot do without (section *Cold start* below).
";

/// Replaces the written section of the file at `path` with `section`, or
/// inserts it before the first `## ` heading when the file has none yet.
pub fn write_into(path: &str, section: &str) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let updated = match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if b < e => {
            let after = &text[e + END.len()..];
            format!(
                "{}{section}{}",
                &text[..b],
                after.strip_prefix('\n').unwrap_or(after)
            )
        }
        _ => match text.find("\n## ") {
            Some(at) => format!("{}\n{section}{}", &text[..=at], &text[at..]),
            None => format!("{text}\n{section}"),
        },
    };
    std::fs::write(path, updated)
}
