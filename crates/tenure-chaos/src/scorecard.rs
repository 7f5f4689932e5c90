//! The scorecard: Markdown tables of runs, for `docs/RELIABILITY.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::check::{Counts, Report};

/// One scenario's run, as the scorecard shows it.
#[derive(Debug, Clone)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Its seed.
    pub seed: u64,
    /// Minutes it ran.
    pub minutes: f64,
    /// What the checker found.
    pub report: Report,
}

fn pct(num: u64, den: u64) -> String {
    if den == 0 {
        "–".into()
    } else {
        format!("{:.1}%", 100.0 * num as f64 / den as f64)
    }
}

/// Renders the tables between the scorecard markers; `how` says which
/// command produced them (Markdown).
pub fn render(date: &str, redis_version: &str, how: &str, rows: &[Row]) -> String {
    let mut s = String::new();
    let total_faults: u64 = rows.iter().map(|r| r.report.total().faults).sum();
    let _ = writeln!(
        s,
        "Run of {date}: {how}, redis-server {redis_version}, {total_faults} faults injected.\n"
    );
    run_table(&mut s, rows);
    let _ = writeln!(
        s,
        "\nBy fault class (all scenarios; `none`: no fault in force or just healed):\n"
    );
    class_table(&mut s, rows);
    waiter_table(&mut s, rows);
    s
}

/// The hand-off after a head waiter was killed, per run that killed one.
fn waiter_table(s: &mut String, rows: &[Row]) {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.report.waiter_kills > 0).collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nA head waiter killed while it waits (`waiter-kill`): from the holder's release to the next grant of the key:\n"
    );
    let _ = writeln!(s, "| scenario | kills | p50 | p99 | max |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for r in rows {
        let rep = &r.report;
        let _ = writeln!(
            s,
            "| {} | {} | {} ms | {} ms | {} ms |",
            r.scenario,
            rep.waiter_kills,
            rep.waiter_kill_stall_p50_ms,
            rep.waiter_kill_stall_p99_ms,
            rep.waiter_kill_stall_max_ms
        );
    }
}

/// One line per run.
fn run_table(s: &mut String, rows: &[Row]) {
    let _ = writeln!(
        s,
        "| scenario | seed | min | faults | ops | acquire ok | granted: sets / readers / writers | acquire p50 / p99 | double grants (tolerated / other) | stale writes accepted | fence regressions | reused fences | lost updates | orphan keys | lost signal p50 / p99 (n) | limiter over-admission | control: stale applied / lost |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let rep = &r.report;
        let all = rep.total();
        let tol = rep.tolerated();
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {} | {} | {} / {} / {} | {:.0} / {:.0} ms | {} / {} | {} | {} | {} | {} | {} | {:.0} / {:.0} ms ({}) | {} | {} / {} |",
            r.scenario,
            r.seed,
            r.minutes,
            all.faults,
            rep.ops,
            pct(rep.acquired, rep.acquires),
            rep.sets_acquired,
            rep.readers,
            rep.writers,
            rep.acquire_p50_ms,
            rep.acquire_p99_ms,
            tol.double_grants,
            all.double_grants - tol.double_grants,
            all.stale_accepted,
            all.fence_regressions,
            all.reused_fences,
            all.lost_updates,
            rep.orphan_keys,
            rep.detect_p50_ms,
            rep.detect_p99_ms,
            rep.lost_signals,
            all.over_admission,
            all.control_stale_accepted,
            all.control_lost_updates,
        );
    }
}

/// One line per fault class, summed over every run.
fn class_table(s: &mut String, rows: &[Row]) {
    let mut classes: BTreeMap<String, Counts> = BTreeMap::new();
    for r in rows {
        for (k, c) in &r.report.by_class {
            classes.entry(k.clone()).or_default().add(c);
        }
    }
    let _ = writeln!(
        s,
        "| fault | tolerated? | injected | double grants | stale writes accepted | fence regressions | reused fences | lost updates | limiter over-admission / burst after loss | control: stale applied / lost |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for (k, c) in &classes {
        let tolerated = tenure_test::nemesis::FaultKind::from_name(k)
            .map_or("–", |f| if f.tolerated() { "yes" } else { "no, measured" });
        let _ = writeln!(
            s,
            "| {k} | {tolerated} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
            c.faults,
            c.double_grants,
            c.stale_accepted,
            c.fence_regressions,
            c.reused_fences,
            c.lost_updates,
            c.over_admission,
            c.burst_after_loss,
            c.control_stale_accepted,
            c.control_lost_updates,
        );
    }
}

/// Replaces the text between `<!-- scorecard:begin -->` and
/// `<!-- scorecard:end -->` in `doc` with `table` (appends the markers if absent).
pub fn splice(doc: &str, table: &str) -> String {
    const BEGIN: &str = "<!-- scorecard:begin -->";
    const END: &str = "<!-- scorecard:end -->";
    match (doc.find(BEGIN), doc.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!("{}{BEGIN}\n{table}{}", &doc[..b], &doc[e..])
        }
        _ => format!("{doc}\n{BEGIN}\n{table}{END}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_table_sums_every_run() {
        let row = |seed, faults, stale| {
            let mut report = Report::default();
            report.by_class.insert(
                "server-pause".into(),
                Counts {
                    faults,
                    stale_accepted: stale,
                    reused_fences: seed,
                    burst_after_loss: 1,
                    ..Counts::default()
                },
            );
            Row {
                scenario: "s".into(),
                seed,
                minutes: 1.0,
                report,
            }
        };
        let table = render("today", "8", "test", &[row(1, 2, 0), row(2, 3, 1)]);
        assert!(
            table.contains("| server-pause | yes | 5 | 0 | 1 | 0 | 3 | 0 | 0 / 2 | 0 / 0 |"),
            "{table}"
        );
        assert!(table.contains("5 faults injected"), "{table}");
        // Per run: reused fences beside stale writes and fence regressions.
        assert!(
            table.contains(
                "| s | 2 | 1.0 | 3 | 0 | – | 0 / 0 / 0 | 0 / 0 ms | 0 / 0 | 1 | 0 | 2 | 0 | 0 |"
            ),
            "{table}"
        );
    }
}
