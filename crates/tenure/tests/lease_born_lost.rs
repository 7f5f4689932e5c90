//! No guard is born lost: an acquire whose reply arrives after the attempt's
//! validity is over either confirms the grant (an extend with the same token,
//! counted from its own send) or treats the attempt as failed and undoes it.
//! `try_acquire` then returns a transient error; a wait retries within its
//! budget.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use async_trait::async_trait;
use tenure::lease::store::{AcquireReply, ExtendReply, LeaseStore, OwnerToken, ReleaseWatch};
use tenure::memory::MemoryStore;
use tenure::{Coordinator, HolderInfo, LeaseGuard, LeaseStatus, ReleaseOutcome};
use tenure_test::{Direction, Partition, Proxy, RedisServer};

/// Short, so that a held reply outlives it.
const TTL: Duration = Duration::from_millis(300);

/// A guard handed back by an acquire must have validity left.
fn assert_alive(guard: &LeaseGuard) {
    assert!(
        !guard.is_lost() && guard.remaining() > Duration::ZERO,
        "acquire returned a guard that is already lost (remaining {:?})",
        guard.remaining()
    );
}

/// A holder behind a proxy and a direct handle to look.
async fn behind_proxy() -> (RedisServer, Proxy, Coordinator, Coordinator) {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr());
    let client = Coordinator::connect(&proxy.url()).await.unwrap();
    let direct = Coordinator::connect(&server.url()).await.unwrap();
    // Load the scripts, so the next acquire is one round trip.
    let warm = client.lease("warm").ttl(TTL).try_acquire().await.unwrap();
    warm.unwrap().release().await.unwrap();
    (server, proxy, client, direct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_try_acquire_with_its_reply_held_past_the_ttl_returns_no_lost_guard() {
    let (_server, proxy, client, direct) = behind_proxy().await;
    let lease = client.lease("born").ttl(TTL).watchdog(false);
    // The request goes through and runs; its reply is held past the TTL.
    proxy.partition(Direction::ToClient, Partition::Stall);
    let acquiring = tokio::spawn(async move { lease.try_acquire().await });
    tokio::time::sleep(TTL * 2).await;
    proxy.heal();
    match acquiring.await.unwrap() {
        Ok(Some(guard)) => assert_alive(&guard),
        Ok(None) => panic!("nobody else holds the key"),
        Err(e) => assert!(e.is_transient(), "{e}"),
    }
    // Nothing is left held: the key is free for someone else at once.
    let other = direct.lease("born").ttl(TTL).try_acquire().await.unwrap();
    assert!(other.is_some(), "a born-lost grant was left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_acquire_timeout_retries_a_grant_that_arrived_too_late() {
    let (_server, proxy, client, _direct) = behind_proxy().await;
    let lease = client.lease("born-wait").ttl(TTL).watchdog(false);
    proxy.partition(Direction::ToClient, Partition::Stall);
    let acquiring =
        tokio::spawn(async move { lease.acquire_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(TTL * 2).await;
    proxy.heal();
    let guard = acquiring
        .await
        .unwrap()
        .expect("acquired within the budget");
    assert_alive(&guard);
}

/// Seed 20261201's `server-pause`: the server runs the acquire script, then
/// freezes before the reply leaves; on resume it answers at once, and the
/// key has expired meanwhile (its TTL is 1 s). Reproduced here with the
/// reply held by the proxy while the server is stopped (1.5 s: within the
/// client's 2 s response timeout, so the late reply is read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_server_paused_after_running_the_acquire_gives_no_lost_guard() {
    let (server, proxy, client, direct) = behind_proxy().await;
    let ttl = Duration::from_secs(1);
    let lease = client.lease("k0").ttl(ttl);
    proxy.partition(Direction::ToClient, Partition::Stall);
    let acquiring =
        tokio::spawn(async move { lease.acquire_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.pause();
    tokio::time::sleep(Duration::from_millis(1400)).await;
    server.resume();
    proxy.heal();
    let guard = acquiring
        .await
        .unwrap()
        .expect("acquired within the budget");
    assert_alive(&guard);
    // The guard is the only holder: nobody else gets the key while it holds.
    let other = direct.lease("k0").ttl(ttl).try_acquire().await.unwrap();
    assert!(other.is_none(), "the key is not held by the returned guard");
    guard.release().await.unwrap();
}

/// A store whose acquire replies arrive as if they took the whole validity
/// (a stalled link): the grant still holds on the store, so an extend with
/// the same token confirms it.
#[derive(Debug)]
struct LateReplies(MemoryStore);

#[async_trait]
impl LeaseStore for LateReplies {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> tenure::Result<AcquireReply> {
        Ok(match self.0.try_acquire(key, token, ttl, holder).await? {
            AcquireReply::Acquired { fence, .. } => AcquireReply::Acquired {
                fence,
                valid_until: self.0.clock().now(),
            },
            held => held,
        })
    }
    async fn extend(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> tenure::Result<ExtendReply> {
        self.0.extend(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &OwnerToken) -> tenure::Result<ReleaseOutcome> {
        self.0.release(key, token).await
    }
    async fn status(&self, key: &str) -> tenure::Result<LeaseStatus> {
        self.0.status(key).await
    }
    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        self.0.watch_releases(key).await
    }
    fn describe(&self) -> String {
        "late-replies".into()
    }
    fn clock(&self) -> &dyn tenure::clock::Clock {
        self.0.clock()
    }
}

#[tokio::test]
async fn a_late_grant_still_held_is_confirmed_with_its_fence() {
    let tenure = Coordinator::with_backend(LateReplies(MemoryStore::new()));
    let lease = tenure
        .lease("late")
        .ttl(Duration::from_secs(5))
        .watchdog(false);
    let guard = lease.try_acquire().await.unwrap().expect("confirmed");
    assert_alive(&guard);
    let status = tenure.status("late").await.unwrap();
    assert!(status.held);
    assert_eq!(status.fence, Some(guard.fence()));
    guard.release().await.unwrap();
    assert!(!tenure.status("late").await.unwrap().held);
}
