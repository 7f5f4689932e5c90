//! The local deadline is the truth, whoever checks it: a starved runtime, a
//! suspend (simulated by a clock that jumps), or a monitor task that never ran
//! must not make a guard report "held" past its deadline.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenure::clock::FakeClock;
use tenure::memory::MemoryStore;
use tenure::{Coordinator, Error, LeaseGuard};

async fn acquire(tenure: &Coordinator, ttl: Duration) -> LeaseGuard {
    tenure
        .lease("deadline")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .expect("the lease is free")
}

/// Issue 9, item 2: the holder blocks its only runtime thread past the
/// deadline, so the monitor task cannot run; the guard must still say lost.
#[test]
fn a_starved_runtime_still_sees_the_deadline() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tenure = Coordinator::memory();
        let ttl = Duration::from_millis(200);
        let guard = acquire(&tenure, ttl).await;
        let lost = guard.lost();
        assert!(!guard.is_lost());
        // Blocking code in the holder: nothing else runs on this runtime.
        std::thread::sleep(ttl);
        assert_eq!(guard.remaining(), Duration::ZERO);
        assert!(lost.is_lost(), "LostSignal::is_lost past the deadline");
        assert!(guard.is_lost(), "LeaseGuard::is_lost past the deadline");
        let ran = guard.run(async { "work done" }).await;
        assert!(matches!(ran, Err(Error::LeaseLost { .. })), "{ran:?}");
    });
}

/// Issue 9, item 2: `run` must not poll its work again once the deadline has
/// passed, even if the monitor task has not run since.
#[test]
fn run_stops_polling_work_past_the_deadline() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tenure = Coordinator::memory();
        let ttl = Duration::from_millis(200);
        let guard = acquire(&tenure, ttl).await;
        let mut polls_after_deadline = 0;
        let mut slept = false;
        let ran = guard
            .run(std::future::poll_fn(|cx| {
                if slept {
                    polls_after_deadline += 1;
                    return std::task::Poll::Ready(());
                }
                // Blocks the runtime past the deadline inside one poll, then
                // asks to be polled again at once.
                std::thread::sleep(ttl);
                slept = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }))
            .await;
        assert!(matches!(ran, Err(Error::LeaseLost { .. })), "{ran:?}");
        assert_eq!(polls_after_deadline, 0);
    });
}

fn jumping() -> (Coordinator, FakeClock) {
    let clock = FakeClock::new();
    clock.advance(Duration::from_secs(1000));
    (
        Coordinator::with_backend(MemoryStore::with_clock(clock.clone())),
        clock,
    )
}

/// Issue 9, item 3: a suspend (the deadline clock jumps, tokio's timers do
/// not) past the deadline is reported at once by every check.
#[tokio::test]
async fn a_jump_past_the_deadline_is_loss_at_once() {
    let (tenure, clock) = jumping();
    let guard = acquire(&tenure, Duration::from_secs(60)).await;
    assert!(guard.remaining() > Duration::from_secs(50));
    // Past the local deadline (60 s minus the drift margin), before the
    // store's expiry.
    clock.advance(Duration::from_millis(59_500));
    assert!(guard.is_lost());
    assert!(guard.lost().is_lost());
    assert_eq!(guard.remaining(), Duration::ZERO);
    let ran = guard.run(async { "work done" }).await;
    assert!(matches!(ran, Err(Error::LeaseLost { .. })), "{ran:?}");
}

/// Issue 9, item 3: without anyone asking, the lost signal fires after a jump
/// — although every tokio timer of the guard was set for a minute later.
#[tokio::test]
async fn the_lost_signal_fires_after_a_jump() {
    let (tenure, clock) = jumping();
    for renew in [false, true] {
        let guard = tenure
            .lease(format!("jump-{renew}"))
            .watchdog(false)
            .ttl(Duration::from_secs(60))
            .watchdog(renew)
            .attempt()
            .await
            .unwrap()
            .into_guard()
            .unwrap();
        let lost = guard.lost();
        let waiter = tokio::spawn(async move { lost.wait().await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        clock.advance(Duration::from_secs(61));
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the signal fires promptly after the jump")
            .unwrap();
        assert!(guard.is_lost());
    }
}

/// A jump that stays within the deadline changes nothing but `remaining`.
#[tokio::test]
async fn a_jump_within_the_deadline_is_not_loss() {
    let (tenure, clock) = jumping();
    let guard = acquire(&tenure, Duration::from_secs(60)).await;
    clock.advance(Duration::from_secs(30));
    assert!(!guard.is_lost());
    let left = guard.remaining();
    assert!(left > Duration::from_secs(25) && left <= Duration::from_secs(30));
    assert_eq!(guard.run(async { 7 }).await.unwrap(), 7);
}
