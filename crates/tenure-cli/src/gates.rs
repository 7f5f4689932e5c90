//! The holders of a key's gates — the readers and the writer of its
//! read-write lease, the permits of its semaphore — as `tenure status` and
//! `tenure list` show them beside the plain lease.

use std::num::NonZeroU32;

use tenure::gate::{GateHolder, GateStatus, Mode};
use tenure::{Coordinator, LeaseStatus};

use crate::exit::Failure;
use crate::{duration, status};

/// One of the gates a key can have apart from its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The read-write lease (`run --shared`, `--exclusive`).
    ReadWrite,
    /// The semaphore (`run --permits N`).
    Semaphore,
}

impl Gate {
    /// Both, in the order `status` prints them.
    pub const ALL: [Gate; 2] = [Gate::ReadWrite, Gate::Semaphore];

    /// The field of `status --json` that holds this gate.
    pub fn field(self) -> &'static str {
        match self {
            Gate::ReadWrite => "rw",
            Gate::Semaphore => "semaphore",
        }
    }
}

/// The gate of `key` when someone holds it or waits for it; `None` when
/// nobody does or the store has none (a quorum). Any other error is the
/// command's: a gate that cannot be read is not a free one.
pub async fn status_of(
    tenure: &Coordinator,
    key: &str,
    gate: Gate,
) -> Result<Option<GateStatus>, Failure> {
    let status = match gate {
        Gate::ReadWrite => async { tenure.rw_lease(key)?.status().await }.await,
        // Reading needs no permit count: any will do.
        Gate::Semaphore => async { tenure.semaphore(key, NonZeroU32::MIN)?.status().await }.await,
    };
    Ok(none_if_unsupported(status)?.filter(|s| !s.holders.is_empty() || !s.waiting.is_empty()))
}

/// The held gates of the kind `gate` under `prefix`; none where the store
/// has no gates (a quorum).
pub async fn list(
    tenure: &Coordinator,
    prefix: &str,
    gate: Gate,
) -> Result<Vec<(String, GateStatus)>, Failure> {
    let listed = match gate {
        Gate::ReadWrite => tenure.list_rw_leases(prefix).await,
        Gate::Semaphore => tenure.list_semaphores(prefix).await,
    };
    Ok(none_if_unsupported(listed)?.unwrap_or_default())
}

/// `None` for a store without gates, the value or the error otherwise.
fn none_if_unsupported<T>(result: tenure::Result<T>) -> Result<Option<T>, Failure> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(tenure::Error::Unsupported { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `read`, `write` or `permit`.
fn mode(mode: Mode) -> &'static str {
    match mode {
        Mode::Read => "read",
        Mode::Write => "write",
        // A permit (`Mode` is non-exhaustive).
        _ => "permit",
    }
}

/// The lines `tenure status` prints for a gate.
pub fn lines(gate: Gate, s: &GateStatus) -> Vec<String> {
    let mut lines = Vec::new();
    for h in &s.holders {
        let who = h
            .holder
            .as_ref()
            .map_or_else(|| "not recorded".to_string(), status::describe);
        let label = match h.mode {
            Mode::Write => "writer ",
            Mode::Read => "reader ",
            // A permit (`Mode` is non-exhaustive).
            _ => "permit ",
        };
        lines.push(format!(
            "{label}  {who} (fence {}, {} left)",
            h.fence,
            duration::show(h.ttl_left)
        ));
    }
    lines.push(match gate {
        Gate::ReadWrite => {
            let writers = s.waiting.iter().filter(|m| **m == Mode::Write).count();
            format!("rw wait  {} ({writers} writers)", s.waiting.len())
        }
        Gate::Semaphore => format!("permit wait {}", s.waiting.len()),
    });
    lines
}

/// A holder's JSON: `mode`, `fence`, `ttl_ms` and the recorded `host`,
/// `pid`, `label`, `held_ms` (null when not recorded).
fn holder_json(h: &GateHolder) -> serde_json::Value {
    let who = h.holder.as_ref();
    serde_json::json!({
        "mode": mode(h.mode),
        "fence": h.fence.get(),
        "ttl_ms": duration::millis(h.ttl_left),
        "host": who.map(|w| w.host.clone()),
        "pid": who.map(|w| w.pid),
        "label": who.and_then(|w| w.label.clone()),
        "held_ms": who.and_then(|w| w.held_for).map(duration::millis),
    })
}

/// The JSON of a gate. A read-write lease: `readers` and `writers` (holders
/// as [`holder_json`]) and `waiting` (`read`/`write` in line order); a
/// semaphore: `permits` (its holders) and `waiting` (how many). Both with
/// `key` and the last `fence`.
pub fn to_json(key: &str, gate: Gate, s: &GateStatus) -> serde_json::Value {
    let fence = s.fence.map(|f| f.get());
    match gate {
        Gate::ReadWrite => {
            let of = |write: bool| -> Vec<serde_json::Value> {
                s.holders
                    .iter()
                    .filter(|h| (h.mode == Mode::Write) == write)
                    .map(holder_json)
                    .collect()
            };
            let waiting: Vec<&str> = s.waiting.iter().map(|m| mode(*m)).collect();
            serde_json::json!({
                "key": key,
                "readers": of(false),
                "writers": of(true),
                "waiting": waiting,
                "fence": fence,
            })
        }
        Gate::Semaphore => serde_json::json!({
            "key": key,
            "permits": s.holders.iter().map(holder_json).collect::<Vec<_>>(),
            "waiting": s.waiting.len(),
            "fence": fence,
        }),
    }
}

/// One `tenure list` row per holder: `KEY [read]`, `KEY [write]` or
/// `KEY [permit]`.
pub fn rows(gates: &[(String, GateStatus)]) -> Vec<(String, LeaseStatus)> {
    let mut rows = Vec::new();
    for (key, s) in gates {
        for h in &s.holders {
            let mut row = LeaseStatus::free(s.storage_key.clone(), Some(h.fence));
            row.held = true;
            row.ttl_left = Some(h.ttl_left);
            row.holder = h.holder.clone();
            rows.push((format!("{key} [{}]", mode(h.mode)), row));
        }
    }
    rows
}
