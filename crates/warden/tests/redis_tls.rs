//! Redis over TLS (`rediss://`) and ACL users, against real redis-server
//! processes.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use warden::redis::{RedisOptions, RedisStore};
use warden::{ReleaseOutcome, Warden};
use warden_test::RedisServer;

/// Redis 7 gives a new ACL user no channel: the release script's PUBLISH is
/// refused. A release notification is best-effort, so the release itself must
/// still report `Released` and the key be gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_succeeds_for_a_user_without_channel_rights() {
    let server = RedisServer::start();
    let url = server.acl_user("app", "s3cret", "~warden:* resetchannels +@all");
    let store = RedisStore::connect(
        &url,
        RedisOptions::default().timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let warden = Warden::with_backend(store);
    let guard = warden
        .lease("acl")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.command("EXISTS warden:{acl}").unwrap().trim(), ":0");
}

#[cfg(feature = "tls")]
mod tls {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use warden::limit::{Algorithm, Quota};
    use warden::redis::{RedisLimits, RedisOptions, RedisStore};
    use warden::{Error, ReleaseOutcome, Warden};
    use warden_test::{TlsCerts, TlsRedis};

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
        let warden = Warden::with_backend(store).with_limits(limits);
        let guard = warden
            .lease("tls")
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .unwrap()
            .into_guard()
            .unwrap();
        assert_eq!(
            redis.server.command("EXISTS warden:{tls}").unwrap().trim(),
            ":1"
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        let limiter = warden.limiter(
            Quota::per_minute(NonZeroU32::new(2).unwrap()),
            Algorithm::Gcra,
        );
        assert!(limiter.check("c").await.unwrap().allowed);
        assert!(limiter.check("c").await.unwrap().allowed);
        assert!(!limiter.check("c").await.unwrap().allowed);
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
