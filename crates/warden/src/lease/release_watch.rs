//! Waiting for a lease to be released.

use std::time::Duration;

use tokio::sync::watch;

/// A subscription to release events of one key, made before an acquire attempt.
///
/// Backends that can push notifications (Redis pub/sub, the memory backend) hand
/// out a watch that wakes as soon as the holder releases; otherwise the watch just
/// sleeps for the time it is given, and waiting degrades to polling.
#[derive(Debug)]
pub struct ReleaseWatch {
    receiver: Option<watch::Receiver<u64>>,
    // Dropped with the watch: lets the backend unsubscribe when nobody waits.
    _subscription: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl ReleaseWatch {
    /// A watch that never fires early: [`wait`](Self::wait) sleeps the full time.
    pub fn polling() -> Self {
        ReleaseWatch {
            receiver: None,
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
            receiver: Some(receiver),
            _subscription: subscription,
        }
    }

    /// Whether releases are pushed (as opposed to polled).
    pub fn is_push(&self) -> bool {
        self.receiver.is_some()
    }

    /// Waits until a release was seen since the last call (or since the watch was
    /// made), or until `max` passes. Returns `true` when woken by a release.
    pub async fn wait(&mut self, max: Duration) -> bool {
        match self.receiver.as_mut() {
            Some(rx) => match tokio::time::timeout(max, rx.changed()).await {
                Ok(Ok(())) => true,
                Ok(Err(_closed)) => {
                    // The sender is gone (backend dropped or reconnecting): poll.
                    self.receiver = None;
                    tokio::time::sleep(max).await;
                    false
                }
                Err(_elapsed) => false,
            },
            None => {
                tokio::time::sleep(max).await;
                false
            }
        }
    }
}
