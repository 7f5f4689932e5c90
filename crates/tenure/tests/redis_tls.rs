//! Redis over TLS (`rediss://`) and ACL users, against real redis-server
//! processes.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenure::redis::{RedisOptions, RedisStore};
use tenure::{Coordinator, ReleaseOutcome};
use tenure_test::RedisServer;

/// Redis 7 gives a new ACL user no channel: the release script's PUBLISH is
/// refused. A release notification is best-effort, so the release itself must
/// still report `Released` and the key be gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_succeeds_for_a_user_without_channel_rights() {
    let server = RedisServer::start();
    let url = server.acl_user("app", "s3cret", "~tenure:* resetchannels +@all");
    let store = RedisStore::connect(
        &url,
        RedisOptions::default().timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let tenure = Coordinator::with_backend(store);
    let guard = tenure
        .lease("acl")
        .watchdog(false)
        .ttl(Duration::from_secs(30))
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.command("EXISTS tenure:{acl}").unwrap().trim(), ":0");
}

/// The minimal ACL rules of docs/redis.md: tenure's keys and channels, and
/// only the commands tenure sends.
const MINIMAL_ACL: &str = "resetkeys ~tenure:* resetchannels &tenure:* -@all \
    +evalsha +eval +script|load +fcall +function|load +ping +time +subscribe +unsubscribe \
    +get +set +del +incr +decr +pexpire +pexpireat +pttl +type +publish \
    +hget +hmget +hset +zadd +zcard +zcount +zrange +zrangebyscore +zrem \
    +zremrangebyrank +zremrangebyscore +zscore +lpop +lpush +rpush +lset +lpos +lrem +lrange";

/// A waiter under the minimal ACL user is woken by the release notification
/// (well before the holder's TTL), and a limiter works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_minimal_acl_user_is_enough() {
    let server = RedisServer::start();
    let url = server.acl_user("tenure", "s3cret", MINIMAL_ACL);
    let store = RedisStore::connect(
        &url,
        RedisOptions::default().timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let limits = tenure::redis::RedisLimits::from_backend(&store);
    let tenure = Coordinator::with_backend(store).with_limits(limits);
    let ttl = Duration::from_secs(60);
    let holder = tenure
        .lease("min")
        .watchdog(false)
        .ttl(ttl)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    let waiter = {
        let tenure = tenure.clone();
        tokio::spawn(async move {
            tenure
                .lease("min")
                .watchdog(false)
                .ttl(ttl)
                .attempt_within(ttl / 2)
                .await
                .unwrap()
                .into_guard()
                .is_some()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(waiter.await.unwrap(), "the waiter did not get the lease");
    let limiter = tenure.limiter(
        tenure::limit::Quota::per_minute(std::num::NonZeroU32::new(1).unwrap()),
        tenure::limit::Algorithm::Gcra,
    );
    assert!(limiter.check("c").await.unwrap().allowed);
    assert!(!limiter.check("c").await.unwrap().allowed);
    let denied = server.command("ACL LOG").unwrap();
    // The one denial allowed: `CONFIG GET maxmemory-policy` at connect (the
    // eviction check is skipped; CONFIG GET would also reveal passwords).
    assert!(
        denied.starts_with("*0") || (denied.starts_with("*1\r\n") && denied.contains("config|get")),
        "ACL denials: {denied}"
    );
}

#[cfg(feature = "tls")]
mod tls {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use tenure::limit::{Algorithm, Quota};
    use tenure::redis::{RedisLimits, RedisOptions, RedisStore};
    use tenure::{Coordinator, Error, ReleaseOutcome};
    use tenure_test::{TlsCerts, TlsRedis};

    fn options() -> RedisOptions {
        RedisOptions::default().timeout(Duration::from_secs(2))
    }

    /// A lease and a limiter over `rediss://`, trusting the test CA.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lease_and_limiter_over_tls_with_the_ca() {
        let certs = TlsCerts::generate();
        let redis = TlsRedis::start(&certs);
        let store = RedisStore::connect(&redis.url(), options().ca_file(certs.path("ca.pem")))
            .await
            .unwrap();
        let limits = RedisLimits::from_backend(&store);
        let tenure = Coordinator::with_backend(store).with_limits(limits);
        let guard = tenure
            .lease("tls")
            .watchdog(false)
            .ttl(Duration::from_secs(30))
            .attempt()
            .await
            .unwrap()
            .into_guard()
            .unwrap();
        assert_eq!(
            redis.server.command("EXISTS tenure:{tls}").unwrap().trim(),
            ":1"
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        let limiter = tenure.limiter(
            Quota::per_minute(NonZeroU32::new(2).unwrap()),
            Algorithm::Gcra,
        );
        assert!(limiter.check("c").await.unwrap().allowed);
        assert!(limiter.check("c").await.unwrap().allowed);
        assert!(!limiter.check("c").await.unwrap().allowed);
    }

    /// Release notifications reach waiters over `rediss://` with a custom CA
    /// too: the subscriber's own connection trusts the same CA (a client
    /// rebuilt from the URL alone would not, and waiters would only poll).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn releases_are_pushed_over_tls_with_a_custom_ca() {
        use tenure::lease::store::LeaseStore;
        let certs = TlsCerts::generate();
        let redis = TlsRedis::start(&certs);
        let store = RedisStore::connect(&redis.url(), options().ca_file(certs.path("ca.pem")))
            .await
            .unwrap();
        let mut watch = store.watch_releases("tls-push").await;
        assert!(watch.is_push(), "releases must be pushed, not polled");
        let tenure = Coordinator::with_backend(store);
        let guard = tenure
            .lease("tls-push")
            .watchdog(false)
            .ttl(Duration::from_secs(30))
            .attempt()
            .await
            .unwrap()
            .into_guard()
            .unwrap();
        guard.release().await.unwrap();
        assert!(
            watch.wait(Duration::from_secs(5)).await,
            "the release notification arrived over TLS"
        );
    }

    /// A server certificate from another CA is refused with an error naming
    /// the host and never the password.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_ca_is_refused_naming_the_host() {
        let certs = TlsCerts::generate();
        let redis = TlsRedis::start(&certs);
        let url = redis.url().replace("rediss://", "rediss://:s3cret@");
        let err = RedisStore::connect(&url, options().ca_file(certs.path("other-ca.pem")))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("127.0.0.1"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    }
}
