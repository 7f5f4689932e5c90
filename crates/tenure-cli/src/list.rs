//! `tenure list`: the held leases under a key prefix — a table, JSON lines,
//! or (`--watch`, on a terminal) a table with live TTL bars redrawn every
//! second until Ctrl-C.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use tenure::{Coordinator, LeaseStatus};

use crate::cli::{Global, ListArgs};
use crate::exit::Failure;
use crate::gates::{self, Gate};
use crate::{duration, output, status, store};

/// How often `--watch` redraws.
const REFRESH: Duration = Duration::from_secs(1);

/// Width of a TTL bar, in characters.
const BAR_WIDTH: usize = 20;

pub async fn list(global: &Global, args: &ListArgs) -> Result<u8, Failure> {
    if args.watch && !std::io::stdout().is_terminal() {
        return Err(Failure::usage(
            "--watch redraws a terminal and stdout is not one; run without --watch to print once",
        ));
    }
    let tenure = store::connect(global).await?;
    if args.watch {
        return watch(&tenure, &args.prefix).await;
    }
    let mut leases = tenure.list(&args.prefix).await?;
    let mut held_gates = Vec::new();
    for gate in Gate::ALL {
        held_gates.push((gate, gates::list(&tenure, &args.prefix, gate).await?));
    }
    if args.json {
        for (key, s) in &leases {
            output::json(&status::to_json(key, s));
        }
        for (gate, listed) in &held_gates {
            for (key, s) in listed {
                output::json(&gates::to_json(key, *gate, s));
            }
        }
    } else if !global.quiet {
        for (_, listed) in &held_gates {
            leases.extend(gates::rows(listed));
        }
        for line in table(&leases, None) {
            output::line(&line);
        }
    }
    Ok(0)
}

/// Redraws the table every [`REFRESH`] until Ctrl-C.
async fn watch(tenure: &Coordinator, prefix: &str) -> Result<u8, Failure> {
    // The longest TTL left seen per (key, fence): the full width of its bar.
    let mut longest: HashMap<(String, Option<u64>), Duration> = HashMap::new();
    let mut tick = tokio::time::interval(REFRESH);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(0),
            _ = tick.tick() => {}
        }
        let mut leases = tenure.list(prefix).await?;
        for gate in Gate::ALL {
            leases.extend(gates::rows(&gates::list(tenure, prefix, gate).await?));
        }
        longest.retain(|(key, fence), _| {
            leases
                .iter()
                .any(|(k, s)| k == key && s.fence.map(|f| f.get()) == *fence)
        });
        for (key, s) in &leases {
            let seen = longest
                .entry((key.clone(), s.fence.map(|f| f.get())))
                .or_default();
            *seen = (*seen).max(s.ttl_left.unwrap_or_default());
        }
        let mut screen = String::from("\x1b[H\x1b[2J");
        screen.push_str(&format!(
            "tenure list {prefix:?}: {} held, every {}; Ctrl-C ends\n\n",
            leases.len(),
            duration::show(REFRESH)
        ));
        for line in table(&leases, Some(&longest)) {
            screen.push_str(&line);
            screen.push('\n');
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(crate::secrets::scrub(&screen).as_bytes());
        let _ = out.flush();
    }
}

/// The table of `leases`: a header and one line each; with `bars`, a TTL bar
/// scaled to the longest TTL left seen for that holder.
fn table(
    leases: &[(String, LeaseStatus)],
    bars: Option<&HashMap<(String, Option<u64>), Duration>>,
) -> Vec<String> {
    let width = leases
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0)
        .max(3);
    let mut lines = vec![format!(
        "{:width$}  {:>9}  {:>6}  {:>9}  {}HOLDER",
        "KEY",
        "TTL LEFT",
        "FENCE",
        "HELD FOR",
        if bars.is_some() {
            format!("{:BAR_WIDTH$}  ", "TTL")
        } else {
            String::new()
        },
    )];
    for (key, s) in leases {
        let ttl = s
            .ttl_left
            .map_or_else(|| "no expiry".to_string(), duration::show);
        let fence = s.fence.map_or_else(|| "-".to_string(), |f| f.to_string());
        let held_for = s
            .holder
            .as_ref()
            .and_then(|h| h.held_for)
            .map_or_else(|| "-".to_string(), duration::show);
        let holder = s
            .holder
            .as_ref()
            .map_or_else(|| "not recorded".to_string(), status::describe);
        let bar = bars.map_or_else(String::new, |bars| {
            let full = bars
                .get(&(key.clone(), s.fence.map(|f| f.get())))
                .copied()
                .unwrap_or_default();
            format!("{}  ", bar(s.ttl_left, full))
        });
        lines.push(format!(
            "{key:width$}  {ttl:>9}  {fence:>6}  {held_for:>9}  {bar}{holder}"
        ));
    }
    lines
}

/// `left` of `full` as a bar of [`BAR_WIDTH`] characters.
fn bar(left: Option<Duration>, full: Duration) -> String {
    let filled = match left {
        None => BAR_WIDTH,
        Some(_) if full.is_zero() => 0,
        Some(left) => {
            let share = left.as_secs_f64() / full.as_secs_f64();
            ((share * BAR_WIDTH as f64).round() as usize).min(BAR_WIDTH)
        }
    };
    format!("{}{}", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_longest_ttl_seen() {
        let full = Duration::from_secs(10);
        assert_eq!(bar(Some(full), full), "#".repeat(BAR_WIDTH));
        assert_eq!(
            bar(Some(Duration::from_secs(5)), full),
            format!("{}{}", "#".repeat(10), "-".repeat(10))
        );
        assert_eq!(bar(Some(Duration::ZERO), full), "-".repeat(BAR_WIDTH));
        assert_eq!(
            bar(Some(Duration::from_secs(1)), Duration::ZERO),
            "-".repeat(BAR_WIDTH)
        );
        assert_eq!(bar(None, Duration::ZERO), "#".repeat(BAR_WIDTH));
    }
}
