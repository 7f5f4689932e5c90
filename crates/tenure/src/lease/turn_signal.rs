//! The signal a store's subscriber wakes one waiter with: a counter of
//! wake-ups and the hand-off the last one announced.
//!
//! It does what a `tokio::sync::watch` channel of `Option<Handoff>` would for
//! the one waiter of an owner token, with a single [`Notify`] where a watch
//! channel keeps eight, so that waking the waiter, and making and dropping
//! its signal, costs the hand-off's path less.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::release_watch::Handoff;

#[derive(Debug, Default)]
struct State {
    /// Wake-ups sent so far.
    sent: u64,
    /// What the last wake-up announced.
    handoff: Option<Handoff>,
    /// The sender is gone: no wake-up comes any more.
    closed: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    woken: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending side, kept by the store while the waiter watches.
#[derive(Debug, Default)]
pub(crate) struct TurnSender {
    shared: Arc<Shared>,
}

impl TurnSender {
    /// Wakes the receivers, announcing `handoff` (`None`: look again).
    pub(crate) fn send(&self, handoff: Option<Handoff>) {
        {
            let mut state = self.shared.lock();
            state.sent = state.sent.wrapping_add(1);
            state.handoff = handoff;
        }
        self.shared.woken.notify_waiters();
    }

    /// Whether a receiver still watches.
    pub(crate) fn is_live(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }

    /// A receiver that is woken by the sends from now on.
    pub(crate) fn subscribe(&self) -> TurnReceiver {
        let seen = self.shared.lock().sent;
        TurnReceiver {
            shared: Arc::clone(&self.shared),
            seen,
        }
    }
}

impl Drop for TurnSender {
    fn drop(&mut self) {
        // A sender dropped after its receivers (a wait that ended) has
        // nobody to tell.
        if !self.is_live() {
            return;
        }
        self.shared.lock().closed = true;
        self.shared.woken.notify_waiters();
    }
}

/// The sender is gone.
#[derive(Debug)]
pub(crate) struct Closed;

/// The waiting side, in the waiter's [`ReleaseWatch`](super::ReleaseWatch).
#[derive(Debug)]
pub(crate) struct TurnReceiver {
    shared: Arc<Shared>,
    /// The sends seen so far.
    seen: u64,
}

impl TurnReceiver {
    /// Waits for a send not seen yet and returns what it announced (the
    /// latest, if several came); [`Closed`] once the sender is gone and
    /// every send was seen.
    pub(crate) async fn changed(&mut self) -> Result<Option<Handoff>, Closed> {
        loop {
            // Made before the state is read: a `notify_waiters` after the
            // read wakes it, polled or not (tokio's guarantee).
            let woken = self.shared.woken.notified();
            {
                let state = self.shared.lock();
                if state.sent != self.seen {
                    self.seen = state.sent;
                    return Ok(state.handoff.clone());
                }
                if state.closed {
                    return Err(Closed);
                }
            }
            woken.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{TurnReceiver, TurnSender};
    use crate::fence::Fence;
    use crate::lease::{Handoff, QueuePlace};

    fn handoff(fence: u64) -> Handoff {
        Handoff {
            fence: Fence::new(fence),
            place: QueuePlace::new("1 2 t"),
        }
    }

    async fn next(rx: &mut TurnReceiver) -> Option<Result<Option<Handoff>, super::Closed>> {
        tokio::time::timeout(Duration::from_millis(50), rx.changed())
            .await
            .ok()
    }

    /// Runs `wait` in a task, does `act` once the task waits, and returns
    /// what the task returned.
    async fn woken_by<T: Send + 'static>(
        wait: impl Future<Output = T> + Send + 'static,
        act: impl FnOnce(),
    ) -> T {
        let waiting = tokio::spawn(wait);
        tokio::time::sleep(Duration::from_millis(20)).await;
        act();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .expect("task")
    }

    #[tokio::test]
    async fn a_receiver_sees_the_sends_after_it_subscribed_once_each() {
        let tx = TurnSender::default();
        tx.send(Some(handoff(1)));
        let mut rx = tx.subscribe();
        assert!(next(&mut rx).await.is_none(), "an earlier send woke it");
        tx.send(None);
        tx.send(Some(handoff(7)));
        let seen = next(&mut rx).await.expect("woken").expect("open");
        assert_eq!(seen, Some(handoff(7)), "the latest announcement");
        assert!(next(&mut rx).await.is_none(), "woken twice for one look");
    }

    #[tokio::test]
    async fn a_send_while_waiting_wakes_the_receiver() {
        let tx = TurnSender::default();
        let mut rx = tx.subscribe();
        let seen = woken_by(async move { rx.changed().await.ok() }, || {
            tx.send(Some(handoff(3)));
        })
        .await;
        assert_eq!(seen, Some(Some(handoff(3))));
    }

    #[tokio::test]
    async fn a_dropped_sender_closes_after_its_last_send_is_seen() {
        let tx = TurnSender::default();
        let mut rx = tx.subscribe();
        assert!(tx.is_live());
        tx.send(Some(handoff(2)));
        drop(tx);
        let last = next(&mut rx).await.expect("woken").expect("seen first");
        assert_eq!(last, Some(handoff(2)));
        assert!(matches!(next(&mut rx).await, Some(Err(_))), "not closed");
    }

    #[tokio::test]
    async fn dropping_the_sender_wakes_a_waiting_receiver() {
        let tx = TurnSender::default();
        let mut rx = tx.subscribe();
        let closed = woken_by(async move { rx.changed().await.is_err() }, || drop(tx)).await;
        assert!(closed);
    }

    #[test]
    fn a_sender_is_live_while_a_receiver_is() {
        let tx = TurnSender::default();
        let rx = tx.subscribe();
        assert!(tx.is_live());
        drop(rx);
        assert!(!tx.is_live());
    }
}
