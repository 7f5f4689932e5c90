//! Waiting for a lease to be released, or handed over.

use std::time::Duration;

use tokio::sync::watch;

use super::store::QueuePlace;
use super::turn_signal::{Closed, TurnReceiver};
use crate::fence::Fence;

/// What a hand-off notification said: the lease was handed to the waiter
/// with `fence`, taking it out of line from `place` (the place the waiter's
/// look wrote). A waiter whose last look returned exactly that place knows
/// the hand-off ran after that look was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// The fence the lease was handed over with.
    pub fence: Fence,
    /// The place in line the hand-off took the waiter from.
    pub place: QueuePlace,
}

/// What feeds a [`ReleaseWatch`].
#[derive(Debug)]
enum Feed {
    /// Every release changes the value.
    Releases(watch::Receiver<u64>),
    /// Every wake-up of one waiter changes the value; a hand-off that says
    /// what was handed over sets it to `Some`.
    Turns {
        receiver: watch::Receiver<Option<Handoff>>,
        /// Whether a hand-off may be taken from the notification alone (a
        /// store that must confirm a grant, e.g. with replica
        /// acknowledgements, says no).
        trusted: bool,
    },
    /// As `Turns`, fed by a store's [`TurnReceiver`].
    Signal {
        receiver: TurnReceiver,
        trusted: bool,
    },
}

impl Feed {
    /// Waits for the next change; returns the hand-off it announced, if
    /// it may be taken from the announcement.
    async fn changed(&mut self) -> Result<Option<Handoff>, Closed> {
        match self {
            Feed::Releases(rx) => rx.changed().await.map(|()| None).map_err(|_| Closed),
            Feed::Turns { receiver, trusted } => {
                receiver.changed().await.map_err(|_| Closed)?;
                Ok(receiver.borrow().clone().filter(|_| *trusted))
            }
            Feed::Signal { receiver, trusted } => {
                Ok(receiver.changed().await?.filter(|_| *trusted))
            }
        }
    }
}

/// A subscription to release events of one key, made before an acquire attempt.
///
/// Backends that can push notifications (Redis pub/sub, the memory backend) hand
/// out a watch that wakes as soon as the holder releases; otherwise the watch just
/// sleeps for the time it is given, and waiting degrades to polling.
#[derive(Debug)]
pub struct ReleaseWatch {
    feed: Option<Feed>,
    /// The hand-off the last wake-up announced, until taken.
    handed: Option<Handoff>,
    // Dropped with the watch: lets the backend unsubscribe when nobody waits.
    _subscription: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl ReleaseWatch {
    /// A watch that never fires early: [`wait`](Self::wait) sleeps the full time.
    pub fn polling() -> Self {
        ReleaseWatch {
            feed: None,
            handed: None,
            _subscription: None,
        }
    }

    /// A watch fed by a `watch` channel whose value changes on every release.
    /// `subscription` is kept alive as long as the watch.
    pub fn from_channel(
        receiver: watch::Receiver<u64>,
        subscription: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        ReleaseWatch {
            feed: Some(Feed::Releases(receiver)),
            handed: None,
            _subscription: subscription,
        }
    }

    /// A waiter's watch, fed by a `watch` channel that changes whenever the
    /// waiter should look again, and holds a [`Handoff`] when the lease was
    /// handed to it. With `trusted`, [`take_handoff`](Self::take_handoff)
    /// returns such hand-offs; without, they only wake the waiter.
    pub fn for_turn(receiver: watch::Receiver<Option<Handoff>>, trusted: bool) -> Self {
        ReleaseWatch {
            feed: Some(Feed::Turns { receiver, trusted }),
            handed: None,
            _subscription: None,
        }
    }

    /// A waiter's watch fed by `receiver`, as [`for_turn`](Self::for_turn)
    /// makes one from a `watch` channel.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn for_signal(receiver: TurnReceiver, trusted: bool) -> Self {
        ReleaseWatch {
            feed: Some(Feed::Signal { receiver, trusted }),
            handed: None,
            _subscription: None,
        }
    }

    /// The watch, keeping `subscription` alive as long as it lives (and
    /// dropping it after the watch's feed): lets the store take the
    /// watcher away when nobody waits any more.
    pub fn keeping(mut self, subscription: Box<dyn std::any::Any + Send + Sync>) -> Self {
        self._subscription = Some(subscription);
        self
    }

    /// Whether releases are pushed (as opposed to polled).
    pub fn is_push(&self) -> bool {
        self.feed.is_some()
    }

    /// Waits until a release was seen since the last call (or since the watch was
    /// made), or until `max` passes. Returns `true` when woken by a release.
    pub async fn wait(&mut self, max: Duration) -> bool {
        let Some(feed) = self.feed.as_mut() else {
            tokio::time::sleep(max).await;
            return false;
        };
        match tokio::time::timeout(max, feed.changed()).await {
            Ok(Ok(handoff)) => {
                self.handed = handoff;
                true
            }
            Ok(Err(Closed)) => {
                // The sender is gone (backend dropped or reconnecting): poll.
                self.feed = None;
                tokio::time::sleep(max).await;
                false
            }
            Err(_elapsed) => false,
        }
    }

    /// The hand-off announced by the last wake-up of [`wait`](Self::wait),
    /// once; `None` when it announced none (a plain release, a reconnection)
    /// or the watch does not trust announcements.
    pub fn take_handoff(&mut self) -> Option<Handoff> {
        self.handed.take()
    }
}
