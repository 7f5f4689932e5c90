//! A one-shot signal that costs a flag until someone waits for it.
//!
//! Every guard carries two (lost, stopped), and most guards are released
//! before anyone waits on either: a [`CancellationToken`] each would be two
//! allocations and their teardown per acquire. The token is made on the first
//! wait or hand-out, and fired then if the flag already is.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// Fired once, never unfired; waited for through a token made on demand.
#[derive(Debug, Default)]
pub(super) struct Signal {
    fired: AtomicBool,
    token: OnceLock<CancellationToken>,
}

impl Signal {
    /// Fires the signal: wakes whoever waits, now and later.
    pub(super) fn fire(&self) {
        // The flag before the token, and `token` below the other way round:
        // whichever of the two runs second sees what the first did.
        self.fired.store(true, Ordering::SeqCst);
        if let Some(token) = self.token.get() {
            token.cancel();
        }
    }

    /// Whether the signal has fired.
    pub(super) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// A token that is cancelled once the signal fires (already, if it has).
    pub(super) fn token(&self) -> CancellationToken {
        let token = self.token.get_or_init(CancellationToken::new).clone();
        if self.is_fired() {
            token.cancel();
        }
        token
    }

    /// Completes once the signal has fired.
    pub(super) async fn fired(&self) {
        if self.is_fired() {
            return;
        }
        self.token().cancelled_owned().await;
    }
}

#[cfg(test)]
mod tests {
    use super::Signal;

    #[tokio::test]
    async fn a_token_taken_before_or_after_firing_is_cancelled() {
        let early = Signal::default();
        let token = early.token();
        assert!(!token.is_cancelled() && !early.is_fired());
        early.fire();
        assert!(token.is_cancelled() && early.is_fired());
        early.fired().await;

        let late = Signal::default();
        late.fire();
        assert!(late.token().is_cancelled());
        late.fired().await;
    }

    #[tokio::test]
    async fn a_waiter_is_woken_by_a_later_fire() {
        let signal = std::sync::Arc::new(Signal::default());
        let waiter = tokio::spawn({
            let signal = std::sync::Arc::clone(&signal);
            async move { signal.fired().await }
        });
        tokio::task::yield_now().await;
        signal.fire();
        waiter.await.expect("woken");
    }
}
