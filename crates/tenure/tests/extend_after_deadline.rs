//! `extend()` once the guard's local deadline has passed — while the store,
//! whose TTL ends a drift margin later, still holds the key — is refused:
//! the guard stays lost, the answer is `NotHeld`, and the key is released
//! rather than renewed for a holder that may not use it.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenure::clock::FakeClock;
use tenure::memory::MemoryStore;
use tenure::{Coordinator, Error, ExtendOutcome};

#[tokio::test]
async fn an_extend_after_the_local_deadline_is_refused_and_releases() {
    let clock = FakeClock::new();
    let tenure = Coordinator::with_backend(MemoryStore::with_clock(clock.clone()));
    let ttl = Duration::from_secs(10);
    let guard = tenure
        .lease("late")
        .ttl(ttl)
        .watchdog(false) // this test is about a guard nobody renewed
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    // Past the local deadline (TTL minus 102 ms), before the store's expiry.
    clock.advance(ttl - Duration::from_millis(50));
    assert!(guard.is_lost());
    assert!(
        tenure.status("late").await.unwrap().held,
        "the store still holds it"
    );
    let extended = guard.extend().await.unwrap();
    assert_eq!(extended, ExtendOutcome::NotHeld);
    assert!(guard.is_lost(), "the guard stays lost");
    let ran = guard.run(async {}).await;
    assert!(matches!(ran, Err(Error::LeaseLost { .. })), "{ran:?}");
    // Released: another holder may take it at once.
    let next = tenure.lease("late").ttl(ttl).try_acquire().await.unwrap();
    assert!(next.is_some(), "the key was kept for a lost guard");
}
