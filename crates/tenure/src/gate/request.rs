//! What every gate store derives from a call before running it: the gate's
//! kind, the TTL in whole milliseconds, and when the request left (a grant's
//! validity counts from then); for the stores that run the pure steps, the
//! step's arguments in an owned form.

use std::time::Duration;

use super::step::{Answer, Ask, Kind};
use super::store::HolderRecord;
use super::{GateAsk, GateKind, Mode};
use crate::clock::Moment;
use crate::lease::{AcquireReply, ExtendReply, QueuePlace, valid_until};

/// A look or extend about to be sent to a store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    /// The family of the gate asked.
    pub(crate) kind: GateKind,
    /// The TTL asked for.
    pub(crate) ttl: Duration,
    /// The TTL in whole milliseconds, at least 1.
    pub(crate) ttl_ms: i64,
    /// When the request left, on the deadline clock.
    pub(crate) sent: Moment,
}

impl Request {
    /// A request for `mode` with `ttl`, leaving now.
    pub(crate) fn new(mode: Mode, ttl: Duration) -> Self {
        Request {
            kind: mode.kind(),
            ttl,
            ttl_ms: ttl_ms(ttl),
            sent: crate::clock::now(),
        }
    }

    /// The request of a look.
    pub(crate) fn look(ask: &GateAsk<'_>) -> Self {
        Self::new(ask.mode, ask.ttl)
    }

    /// A step's answer as the store's reply.
    pub(crate) fn reply(&self, answer: &Answer) -> (AcquireReply, Option<QueuePlace>) {
        match *answer {
            Answer::Granted(fence) => (self.granted(fence), None),
            Answer::Refused { place, ttl_left_ms } => (
                AcquireReply::Held {
                    ttl_left: ttl_left_ms.map(|ms| Duration::from_millis(ms.unsigned_abs())),
                },
                place.map(|p| QueuePlace::new(p.to_string())),
            ),
        }
    }

    /// A grant with `fence`, valid for the TTL from when the request left.
    pub(crate) fn granted(&self, fence: u64) -> AcquireReply {
        AcquireReply::Acquired {
            fence: crate::fence::Fence::new(fence),
            valid_until: valid_until(self.sent, self.ttl),
        }
    }

    /// A store's answer to an extend: `renewed` when the grant was still held.
    pub(crate) fn extended(&self, renewed: bool) -> ExtendReply {
        if renewed {
            ExtendReply::Extended {
                valid_until: valid_until(self.sent, self.ttl),
            }
        } else {
            ExtendReply::NotHeld
        }
    }
}

/// The arguments of a look's step, owned (for a store that runs the step on
/// another thread).
#[derive(Debug, Clone)]
pub(crate) struct Look {
    token: String,
    kind: Kind,
    ttl_ms: i64,
    stand: bool,
    holder: Option<HolderRecord>,
}

impl Look {
    pub(crate) fn of(ask: &GateAsk<'_>) -> Self {
        Look {
            token: ask.token.as_str().to_string(),
            kind: ask.mode.into(),
            ttl_ms: ttl_ms(ask.ttl),
            stand: ask.stand,
            holder: ask.holder.map(HolderRecord::from),
        }
    }

    /// The step's arguments.
    pub(crate) fn step(&self) -> Ask<'_> {
        Ask {
            token: &self.token,
            kind: self.kind,
            ttl_ms: self.ttl_ms,
            stand: self.stand,
            holder: self.holder.as_ref(),
        }
    }
}

/// A TTL in whole milliseconds, at least 1.
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}
