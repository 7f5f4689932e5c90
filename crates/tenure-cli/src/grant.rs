//! What `tenure run` holds while its command runs: one lease, or a set of
//! leases taken together (`-k A -k B`), behind the few calls the supervision
//! needs.

use std::time::Duration;

use tenure::{
    ExtendOutcome, LeaseGuard, LeaseSetGuard, LossCause, LostSignal, ReleaseOutcome, Result,
};

/// An acquired lease, or every lease of a set.
pub enum Grant {
    One(LeaseGuard),
    Set(LeaseSetGuard),
}

impl From<LeaseGuard> for Grant {
    fn from(guard: LeaseGuard) -> Self {
        Grant::One(guard)
    }
}

impl Grant {
    /// `lease "k"` or `leases "a", "b"`, for messages.
    pub fn name(&self) -> String {
        match self {
            Grant::One(g) => format!("lease {:?}", g.key()),
            Grant::Set(s) => {
                let keys: Vec<String> = s.keys().map(|k| format!("{k:?}")).collect();
                format!("leases {}", keys.join(", "))
            }
        }
    }

    /// The first key lost, or the only key.
    pub fn lost_key(&self) -> String {
        match self {
            Grant::One(g) => g.key().to_string(),
            Grant::Set(s) => s
                .guards()
                .iter()
                .find(|g| g.is_lost())
                .or_else(|| s.guards().first())
                .map_or_else(String::new, |g| g.key().to_string()),
        }
    }

    /// Each key with its fence, in canonical order.
    pub fn fences(&self) -> Vec<(String, u64)> {
        match self {
            Grant::One(g) => vec![(g.key().to_string(), g.fence().get())],
            Grant::Set(s) => s.fences().map(|(k, f)| (k.to_string(), f.get())).collect(),
        }
    }

    /// The command's environment: `TENURE_KEY` and `TENURE_FENCE` for one
    /// lease; `TENURE_KEYS` and `TENURE_FENCES` (one per line, in the same
    /// order) for a set.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let fences = self.fences();
        if let (Grant::One(_), [(key, fence)]) = (self, fences.as_slice()) {
            return vec![
                ("TENURE_KEY", key.clone()),
                ("TENURE_FENCE", fence.to_string()),
            ];
        }
        let keys: Vec<&str> = fences.iter().map(|(k, _)| k.as_str()).collect();
        let numbers: Vec<String> = fences.iter().map(|(_, f)| f.to_string()).collect();
        vec![
            ("TENURE_KEYS", keys.join("\n")),
            ("TENURE_FENCES", numbers.join("\n")),
        ]
    }

    pub fn remaining(&self) -> Duration {
        match self {
            Grant::One(g) => g.remaining(),
            Grant::Set(s) => s.remaining(),
        }
    }

    pub fn is_lost(&self) -> bool {
        match self {
            Grant::One(g) => g.is_lost(),
            Grant::Set(s) => s.is_lost(),
        }
    }

    pub fn loss_cause(&self) -> Option<LossCause> {
        match self {
            Grant::One(g) => g.loss_cause(),
            Grant::Set(s) => s.loss_cause(),
        }
    }

    pub fn lost(&self) -> LostSignal {
        match self {
            Grant::One(g) => g.lost(),
            Grant::Set(s) => s.lost(),
        }
    }

    pub async fn extend(&self) -> Result<ExtendOutcome> {
        match self {
            Grant::One(g) => g.extend().await,
            Grant::Set(s) => s.extend().await,
        }
    }

    pub async fn release(self) -> Result<ReleaseOutcome> {
        match self {
            Grant::One(g) => g.release().await,
            Grant::Set(s) => s.release().await,
        }
    }
}
