//! What an in-process client holds — a lease, a read-write grant or a lease
//! set — behind one shape, so that one critical section (record the grant,
//! read, pause, write, release) serves the three workloads.

use std::time::Duration;

use tenure::{LeaseGuard, LeaseSetGuard, LostSignal, ReleaseOutcome};

/// The keys of a lease set as the history names them: joined by `+`.
pub fn joined(keys: &[String]) -> String {
    keys.join("+")
}

/// A grant a client holds.
#[derive(Debug)]
pub enum Held {
    /// A lease on one key, or a read-write lease's grant (`mode`: `read` or
    /// `write`; `None` for a lease).
    One {
        /// The guard.
        guard: LeaseGuard,
        /// Its key.
        key: String,
        /// `read`, `write`, or `None` for a lease.
        mode: Option<&'static str>,
    },
    /// Several keys at once, all or none.
    Set {
        /// The guard of the set.
        guard: LeaseSetGuard,
        /// The keys asked for, in the order asked.
        keys: Vec<String>,
    },
}

impl Held {
    /// Whether any key is known or presumed lost.
    pub fn is_lost(&self) -> bool {
        match self {
            Held::One { guard, .. } => guard.is_lost(),
            Held::Set { guard, .. } => guard.is_lost(),
        }
    }

    /// How long the holder may still assume it holds every key.
    pub fn remaining(&self) -> Duration {
        match self {
            Held::One { guard, .. } => guard.remaining(),
            Held::Set { guard, .. } => guard.remaining(),
        }
    }

    /// Fires when any key is lost.
    pub fn lost(&self) -> LostSignal {
        match self {
            Held::One { guard, .. } => guard.lost(),
            Held::Set { guard, .. } => guard.lost(),
        }
    }

    /// Each key asked for, with its fence (`None`: the guard has none for it).
    pub fn fences(&self) -> Vec<(String, Option<u64>)> {
        match self {
            Held::One { guard, key, .. } => vec![(key.clone(), Some(guard.fence().get()))],
            Held::Set { guard, keys } => keys
                .iter()
                .map(|k| (k.clone(), guard.fence(k).map(|f| f.get())))
                .collect(),
        }
    }

    /// The key (a set's keys joined) the history names the grant by.
    pub fn label(&self) -> String {
        match self {
            Held::One { key, .. } => key.clone(),
            Held::Set { keys, .. } => joined(keys),
        }
    }

    /// `read`, `write`, or `None` (a lease or a set).
    pub fn mode(&self) -> Option<&'static str> {
        match self {
            Held::One { mode, .. } => *mode,
            Held::Set { .. } => None,
        }
    }

    /// Whether the holder writes the resources (a reader only reads them).
    pub fn writes(&self) -> bool {
        self.mode() != Some("read")
    }

    /// Releases every key.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn release(self) -> tenure::Result<ReleaseOutcome> {
        match self {
            Held::One { guard, .. } => guard.release().await,
            Held::Set { guard, .. } => guard.release().await,
        }
    }
}
