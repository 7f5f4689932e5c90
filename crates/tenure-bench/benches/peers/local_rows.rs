//! The tables of the in-process limiter (4 threads, the curve over live keys,
//! the hash candidates) and of the HTTP middleware against tower_governor;
//! the 4-thread row's target is printed by the bench, not written.

use std::fmt::Write as _;

use crate::samples::Samples;

/// The markdown of every row measured by `local_threads`, `local_curve`,
/// `local_hash` and `http`; empty parts for what was not measured.
pub fn render(s: &Samples) -> String {
    let mut out = String::new();
    threads(s, &mut out);
    curve(s, &mut out);
    hashes(s, &mut out);
    crate::http::render(s, &mut out);
    out
}

/// tenure's time per decision over governor's on `THREADS` threads, if
/// measured.
fn threads_ratio(s: &Samples) -> Option<(f64, f64, f64)> {
    let w = s.median("local.threads.tenure")?;
    let g = s.median("local.threads.governor")?;
    Some((w, g, g / w))
}

fn threads(s: &Samples, out: &mut String) {
    let Some((w, g, ratio)) = threads_ratio(s) else {
        return;
    };
    let n = crate::local_threads::THREADS;
    let _ = writeln!(
        out,
        "\n| in-process limiter, {n} threads, 10 000 keys | tenure | governor keyed | ratio (time) |\n\
         |---|---:|---:|---:|\n\
         | decisions/s | {:.2}M | {:.2}M | {ratio:.2}× |",
        w / 1e6,
        g / 1e6,
    );
}

/// The target of the multi-thread row, when it was measured.
pub fn targets(s: &Samples) -> Vec<crate::report::Target> {
    threads_ratio(s)
        .map(|(_, _, ratio)| crate::report::Target {
            what: format!(
                "in-process limiter, {} threads, 10 000 keys: ≤ 2× governor",
                crate::local_threads::THREADS
            ),
            measured: format!("{ratio:.2}×"),
            met: ratio <= 2.0,
        })
        .into_iter()
        .collect()
}

fn curve(s: &Samples, out: &mut String) {
    let m = |n: usize, what: &str| s.median(&format!("local.curve.{n}.{what}"));
    if m(crate::local_curve::KEYS[0], "tenure.ns").is_none() {
        return;
    }
    let _ = writeln!(
        out,
        "\n| live keys | tenure bytes/key | governor bytes/key | tenure ns/decision | governor ns/decision | ratio (ns) |\n\
         |---:|---:|---:|---:|---:|---:|"
    );
    for n in crate::local_curve::KEYS {
        let v = |what| m(n, what).unwrap_or(f64::NAN);
        let _ = writeln!(
            out,
            "| {n} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}× |",
            v("tenure.bytes"),
            v("governor.bytes"),
            v("tenure.ns"),
            v("governor.ns"),
            v("tenure.ns") / v("governor.ns"),
        );
    }
}

fn hashes(s: &Samples, out: &mut String) {
    use crate::local_hash::{HASHERS, KEYS};
    if s.median("local.hash.siphash13.ipv4").is_none() {
        return;
    }
    let names: Vec<&str> = KEYS.iter().map(|(name, _)| *name).collect();
    let _ = writeln!(
        out,
        "\n| hasher (random state), ns per key | {} |\n|---|{}",
        names.join(" | "),
        "---:|".repeat(names.len())
    );
    for hasher in HASHERS {
        let cells: Vec<String> = names
            .iter()
            .map(|k| {
                let v = s.median(&format!("local.hash.{hasher}.{k}"));
                format!("{:.1}", v.unwrap_or(f64::NAN))
            })
            .collect();
        let _ = writeln!(out, "| {hasher} | {} |", cells.join(" | "));
    }
}
