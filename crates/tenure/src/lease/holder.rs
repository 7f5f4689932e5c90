//! Holder metadata: who holds a lease (host, process, label) and since when,
//! recorded with the lease when it asks for it ([`Lease::label`](super::Lease::label),
//! [`Lease::record_holder`](super::Lease::record_holder)) and read back by
//! anyone through [`LeaseStatus::holder`](super::LeaseStatus::holder).
//!
//! The metadata is for people and tools asking "who holds it?": it is never the
//! owner token (which stays the only proof of ownership and is never shown),
//! and nothing in tenure decides anything by it.

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest label tenure accepts, in bytes.
pub const MAX_LABEL_LEN: usize = 256;

/// What a lease records about its holder when asked to: the host name, the
/// process id and an optional label. The acquisition time is added by the
/// store (see [`Holder::held_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The host name of the holding process (`"unknown"` when the OS would
    /// not tell).
    pub host: String,
    /// The process id of the holder.
    pub pid: u32,
    /// A free-form label, e.g. the request or job the lease is taken for.
    pub label: Option<String>,
}

impl HolderInfo {
    /// This process: its host name and process id, without a label.
    pub fn this_process() -> Self {
        HolderInfo {
            host: host_name(),
            pid: std::process::id(),
            label: None,
        }
    }

    /// The same holder with `label`.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Checks the label: at most [`MAX_LABEL_LEN`] bytes, no control
    /// characters (it ends up in terminals and logs).
    pub(crate) fn validate(&self) -> Result<()> {
        let Some(label) = &self.label else {
            return Ok(());
        };
        if label.len() > MAX_LABEL_LEN {
            return Err(Error::invalid(
                "label",
                format!(
                    "it is {} bytes long, the limit is {MAX_LABEL_LEN}",
                    label.len()
                ),
            ));
        }
        if label.chars().any(char::is_control) {
            return Err(Error::invalid(
                "label",
                "it must not contain control characters",
            ));
        }
        Ok(())
    }
}

/// The holder of a lease as a store reports it: what the holder recorded,
/// and how long it has held the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The host name the holder recorded.
    pub host: String,
    /// The process id the holder recorded.
    pub pid: u32,
    /// The label the holder recorded, if any.
    pub label: Option<String>,
    /// How long ago the lease was acquired, on the store's clock where it has
    /// one (Redis `TIME`, the SQLite store clock, the memory store's clock);
    /// on etcd, which has no clock to read, between the holder's wall clock at
    /// acquisition and the reader's now, so skew between the two hosts shows
    /// up in it. `None` when the recorded time is unreadable or in the future.
    pub held_for: Option<Duration>,
}

impl Holder {
    /// The holder that recorded `info`, holding for `held_for`.
    pub fn new(info: HolderInfo, held_for: Option<Duration>) -> Self {
        Holder {
            host: info.host,
            pid: info.pid,
            label: info.label,
            held_for,
        }
    }
}

/// `held_for` from two millisecond readings of one clock: `None` when the
/// acquisition is later than `now` (a clock that went back).
#[cfg_attr(
    not(any(feature = "redis", feature = "sqlite", feature = "etcd")),
    allow(dead_code)
)]
pub(crate) fn elapsed_ms(since_ms: i64, now_ms: i64) -> Option<Duration> {
    let d = now_ms.checked_sub(since_ms)?;
    u64::try_from(d).ok().map(Duration::from_millis)
}

/// The host name, or `"unknown"`.
fn host_name() -> String {
    #[cfg(unix)]
    if let Ok(name) = nix::unistd::gethostname()
        && let Ok(name) = name.into_string()
        && !name.is_empty()
    {
        return name;
    }
    "unknown".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_checked() {
        let me = HolderInfo::this_process();
        assert_eq!(me.pid, std::process::id());
        assert!(!me.host.is_empty());
        assert!(me.clone().with_label("orders:42 POST").validate().is_ok());
        let long = me.clone().with_label("x".repeat(MAX_LABEL_LEN + 1));
        assert!(long.validate().unwrap_err().to_string().contains("label"));
        let control = me.with_label("a\nb");
        assert!(
            control
                .validate()
                .unwrap_err()
                .to_string()
                .contains("control")
        );
    }

    #[test]
    fn elapsed_time_never_goes_negative() {
        assert_eq!(elapsed_ms(1_000, 1_250), Some(Duration::from_millis(250)));
        assert_eq!(elapsed_ms(1_000, 1_000), Some(Duration::ZERO));
        assert_eq!(elapsed_ms(2_000, 1_000), None);
        assert_eq!(elapsed_ms(i64::MIN, i64::MAX), None);
    }
}
