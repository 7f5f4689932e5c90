//! The readers and the writer of a key's read-write lease, as `tenure status`
//! and `tenure list` show them beside the plain lease.

use std::time::Duration;

use tenure::gate::{GateHolder, GateStatus, Mode};
use tenure::{Coordinator, LeaseStatus};

use crate::{duration, status};

/// The read-write lease of `key` when someone holds it or waits for it;
/// `None` when nobody does or the store has none (a quorum).
pub async fn status_of(tenure: &Coordinator, key: &str) -> Option<GateStatus> {
    let status = tenure.rw_lease(key).ok()?.status().await.ok()?;
    (!status.holders.is_empty() || !status.waiting.is_empty()).then_some(status)
}

/// The held read-write leases under `prefix`; none where the store cannot
/// list them.
pub async fn list(tenure: &Coordinator, prefix: &str) -> Vec<(String, GateStatus)> {
    tenure.list_rw_leases(prefix).await.unwrap_or_default()
}

/// `read` or `write`.
fn mode(h: &GateHolder) -> &'static str {
    if h.mode == Mode::Write {
        "write"
    } else {
        "read"
    }
}

/// The lines `tenure status` prints for a read-write lease.
pub fn lines(s: &GateStatus) -> Vec<String> {
    let mut lines = Vec::new();
    for h in &s.holders {
        let who = h
            .holder
            .as_ref()
            .map_or_else(|| "not recorded".to_string(), status::describe);
        let label = if h.mode == Mode::Write {
            "writer "
        } else {
            "reader "
        };
        lines.push(format!(
            "{label}  {who} (fence {}, {} left)",
            h.fence,
            duration::show(h.ttl_left)
        ));
    }
    let writers = s.waiting.iter().filter(|m| **m == Mode::Write).count();
    lines.push(format!("rw wait  {} ({writers} writers)", s.waiting.len()));
    lines
}

/// A holder's JSON: `mode`, `fence`, `ttl_ms` and the recorded `host`,
/// `pid`, `label`, `held_ms` (null when not recorded).
fn holder_json(h: &GateHolder) -> serde_json::Value {
    let who = h.holder.as_ref();
    serde_json::json!({
        "mode": mode(h),
        "fence": h.fence.get(),
        "ttl_ms": ms(h.ttl_left),
        "host": who.map(|w| w.host.clone()),
        "pid": who.map(|w| w.pid),
        "label": who.and_then(|w| w.label.clone()),
        "held_ms": who.and_then(|w| w.held_for).map(ms),
    })
}

/// The JSON of a read-write lease: `readers` and `writers` (holders as
/// [`holder_json`]) and `waiting` (`read`/`write` in line order).
pub fn to_json(key: &str, s: &GateStatus) -> serde_json::Value {
    let of = |write: bool| -> Vec<serde_json::Value> {
        s.holders
            .iter()
            .filter(|h| (h.mode == Mode::Write) == write)
            .map(holder_json)
            .collect()
    };
    let waiting: Vec<&str> = s
        .waiting
        .iter()
        .map(|m| if *m == Mode::Write { "write" } else { "read" })
        .collect();
    serde_json::json!({
        "key": key,
        "readers": of(false),
        "writers": of(true),
        "waiting": waiting,
        "fence": s.fence.map(|f| f.get()),
    })
}

/// One `tenure list` row per holder: `KEY [read]` or `KEY [write]`.
pub fn rows(leases: &[(String, GateStatus)]) -> Vec<(String, LeaseStatus)> {
    let mut rows = Vec::new();
    for (key, s) in leases {
        for h in &s.holders {
            let mut row = LeaseStatus::free(s.storage_key.clone(), Some(h.fence));
            row.held = true;
            row.ttl_left = Some(h.ttl_left);
            row.holder = h.holder.clone();
            rows.push((format!("{key} [{}]", mode(h)), row));
        }
    }
    rows
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
