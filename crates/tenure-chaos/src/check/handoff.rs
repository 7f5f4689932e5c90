//! The hand-off after a dead waiter: once the head waiter of a key's line was
//! killed (`waiter-kill`), how long the key stayed free between the holder's
//! release and the next grant.

use crate::history::{Event, Kind, Op};

use super::Report;

/// Percentile `p` (0–100) of sorted `v`, 0 when empty.
fn percentile(v: &[u64], p: usize) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) * p).div_ceil(100).min(v.len() - 1)]
}

/// From each release of `key` at or after `from`: the time (ns) to the next
/// grant of `key`. The first one only.
fn next_handoff(events: &[Event], key: &str, from: u64) -> Option<u64> {
    let is_key = |e: &&Event| e.key.as_deref() == Some(key);
    let release = events
        .iter()
        .filter(is_key)
        .find(|e| e.t >= from && e.op == Op::Release && e.kind == Kind::Invoke)?;
    let grant = events
        .iter()
        .filter(is_key)
        .find(|e| e.t > release.t && e.op == Op::Acquire && e.kind == Kind::Ok)?;
    Some(grant.t - release.t)
}

/// Measures the stall after every `waiter-kill` of `events` into `report`.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let mut stalls: Vec<u64> = events
        .iter()
        .filter(|e| e.op == Op::Fault && e.note.as_deref() == Some("waiter-kill"))
        .filter_map(|e| next_handoff(events, e.key.as_deref()?, e.t))
        .map(|ns| ns / 1_000_000)
        .collect();
    stalls.sort_unstable();
    report.waiter_kills = stalls.len() as u64;
    report.waiter_kill_stall_p50_ms = percentile(&stalls, 50);
    report.waiter_kill_stall_p99_ms = percentile(&stalls, 99);
    report.waiter_kill_stall_max_ms = stalls.last().copied().unwrap_or(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ms: u64, op: Op, kind: Kind) -> Event {
        let mut e = Event::new("c", op, kind).key("k0");
        e.t = ms * 1_000_000;
        e
    }

    #[test]
    fn the_stall_runs_from_the_release_after_the_kill_to_the_next_grant() {
        let mut kill = ev(100, Op::Fault, Kind::Info);
        kill.note = Some("waiter-kill".into());
        let events = vec![
            ev(50, Op::Release, Kind::Invoke),
            ev(60, Op::Acquire, Kind::Ok),
            kill,
            ev(300, Op::Release, Kind::Invoke),
            ev(5300, Op::Acquire, Kind::Ok),
        ];
        let mut r = Report::default();
        check(&events, &mut r);
        assert_eq!(r.waiter_kills, 1);
        assert_eq!(r.waiter_kill_stall_max_ms, 5000);
    }
}
