//! The history: one JSON object per line, one line per event, appended by every
//! client (tasks and processes) to one file.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// Nanoseconds on `CLOCK_BOOTTIME`: monotonic, shared by every process of the
/// host (so events of separate processes can be ordered), and counting
/// suspended time like tenure's own lease deadlines.
pub fn now_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .ok()
        .and_then(|t| {
            let s = u64::try_from(t.tv_sec()).ok()?;
            let n = u64::try_from(t.tv_nsec()).ok()?;
            Some(s * 1_000_000_000 + n)
        })
        .unwrap_or(0)
}

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// The run's settings (`value`: TTL in ms; `note`: scenario).
    Config,
    /// A lease acquire (`key`; on ok: `fence`, `lease`; `note`: `read` or
    /// `write` for a read-write lease). For a lease set, `key` is its keys
    /// joined by `+`, and its ok reply has no fence: each key's is a `grant`.
    Acquire,
    /// One key of a lease set granted (before the set's ok reply): `key`,
    /// `fence`, `lease` (the set's).
    Grant,
    /// A read of a resource (`key`: resource; `value`).
    Read,
    /// A read-modify-write's write (`key`: resource; `read`, `value`, `fence`, `lease`).
    Write,
    /// A release (`until`: end of the holder's belief that it held the lease).
    Release,
    /// The holder's lost signal fired (`note`: the cause).
    Lost,
    /// A fault starts (`note`: kind; `value`: target).
    Fault,
    /// A fault is healed (`note`: kind).
    Heal,
    /// A rate-limit check (`key`: limiter key; ok: admitted; fail: refused; `value`: limit).
    Limit,
    /// A lease key still held after every client stopped and TTL + ε passed.
    Orphan,
    /// The final read of a resource after the run (`value`, `fence`).
    Final,
}

/// Invoke, then one of ok / fail / info (unknown outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The operation starts.
    Invoke,
    /// It happened (acquired, written, released).
    Ok,
    /// It certainly did not happen (held by another, rejected as stale).
    Fail,
    /// Unknown: an error or a timeout; it may or may not have happened.
    Info,
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Nanoseconds on the boot-time clock ([`now_ns`]).
    pub t: u64,
    /// Which client (task `t3`, process `p12345`) or `nemesis` / `checker`.
    pub client: String,
    /// What.
    pub op: Op,
    /// Invoke / ok / fail / info.
    pub kind: Kind,
    /// The lease key, resource or limiter key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The fencing token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// Which acquisition (unique per acquire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// A value read or written, a target, a TTL (see [`Op`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// For a write: the value its read-modify-write read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<u64>,
    /// For a release: until when the holder believed it held the lease (ns);
    /// for a grant: its local deadline then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// Free text: an error, a fault kind, a scenario name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Event {
    /// An event now, with the other fields empty.
    pub fn new(client: &str, op: Op, kind: Kind) -> Self {
        Event {
            t: now_ns(),
            client: client.to_string(),
            op,
            kind,
            key: None,
            fence: None,
            lease: None,
            value: None,
            read: None,
            until: None,
            note: None,
        }
    }

    /// With `key`.
    #[must_use]
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_string());
        self
    }

    /// With `fence` and `lease`.
    #[must_use]
    pub fn held(mut self, fence: u64, lease: &str) -> Self {
        self.fence = Some(fence);
        self.lease = Some(lease.to_string());
        self
    }

    /// With `value`.
    #[must_use]
    pub fn value(mut self, value: u64) -> Self {
        self.value = Some(value);
        self
    }

    /// With `note`.
    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// An append-only history file, shared by the threads of this process and
/// by other processes appending to the same path (each line is one `write`
/// to a file opened with `O_APPEND`, so lines do not interleave).
#[derive(Debug, Clone)]
pub struct History {
    file: Arc<Mutex<File>>,
}

impl History {
    /// Opens `path` for appending, creating it.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn append(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(History {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Appends one event. A failed write is reported on stderr, not fatal: a
    /// history with a gap still shows what it recorded.
    pub fn record(&self, event: &Event) {
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(&line) {
            eprintln!("tenure-chaos: history write failed: {e}");
        }
    }
}

/// Reads a history file; lines that do not parse are counted, not fatal.
///
/// # Errors
/// When the file cannot be read.
pub fn read(path: &Path) -> std::io::Result<(Vec<Event>, usize)> {
    let mut events = Vec::new();
    let mut bad = 0;
    for line in BufReader::new(File::open(path)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(&line) {
            Ok(e) => events.push(e),
            Err(_) => bad += 1,
        }
    }
    events.sort_by_key(|e| e.t);
    Ok((events, bad))
}
