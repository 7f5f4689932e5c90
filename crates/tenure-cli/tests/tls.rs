//! Redis TLS (`rediss://`) and ACL users from the CLI: the real binary against
//! real redis-server processes.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, output, stderr};
use tenure_test::{RedisServer, TlsCerts, TlsRedis};

/// Redis 7 denies every channel to a new ACL user, so the release script's
/// PUBLISH is refused. The notification is best-effort: the release must still
/// succeed and the key be gone right after `tenure run` exits.
#[test]
fn run_under_an_acl_user_without_channel_rights_releases() {
    let sandbox = Sandbox::new();
    let redis = RedisServer::start();
    let url = redis.acl_user("app", "s3cret", "~tenure:* resetchannels +@all");
    let out =
        output(
            sandbox
                .tenure()
                .args(["--backend", &url, "run", "--key", "job", "--", "true"]),
        );
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(!stderr(&out).contains("s3cret"), "{}", stderr(&out));
    let exists = redis.command("EXISTS tenure:{job}").unwrap();
    assert_eq!(exists.trim(), ":0", "lease key still held after run");
}

/// `tenure run` over `rediss://` with `--cacert`; the lease key is gone after.
#[test]
fn run_over_tls_with_cacert() {
    let sandbox = Sandbox::new();
    let certs = TlsCerts::generate();
    let redis = TlsRedis::start(&certs);
    let out = output(sandbox.tenure().args([
        "--backend",
        &redis.url(),
        "--cacert",
        certs.path("ca.pem").to_str().unwrap(),
        "run",
        "--key",
        "tls",
        "--",
        "true",
    ]));
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let exists = redis.server.command("EXISTS tenure:{tls}").unwrap();
    assert_eq!(exists.trim(), ":0");
}

/// A server certificate from another CA: exit 69, a message naming the host
/// and the reason, never the password.
#[test]
fn a_wrong_ca_exits_69_naming_the_host() {
    let sandbox = Sandbox::new();
    let certs = TlsCerts::generate();
    let redis = TlsRedis::start(&certs);
    let url = redis.url().replace("rediss://", "rediss://:s3cret@");
    let out = output(sandbox.tenure().args([
        "--backend",
        &url,
        "--cacert",
        certs.path("other-ca.pem").to_str().unwrap(),
        "run",
        "--key",
        "tls",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("127.0.0.1"), "{err}");
    assert!(err.contains("certificate"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// A server certificate that expired (signed by the right CA): exit 69, a
/// message naming the host and the expiry, never the password.
#[test]
fn an_expired_server_certificate_exits_69_naming_the_host() {
    let sandbox = Sandbox::new();
    let certs = TlsCerts::generate();
    certs.generate_expired();
    let redis = TlsRedis::serving(&certs, "expired");
    let url = redis.url().replace("rediss://", "rediss://:s3cret@");
    let out = output(sandbox.tenure().args([
        "--backend",
        &url,
        "--cacert",
        certs.path("ca.pem").to_str().unwrap(),
        "run",
        "--key",
        "tls",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("127.0.0.1"), "{err}");
    assert!(err.to_lowercase().contains("expired"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// `--permits` over `rediss://` with `--cacert`: the TLS store offers
/// semaphores as the plain `redis://` one does; the permit is gone after.
#[test]
fn run_with_permits_over_tls() {
    let sandbox = Sandbox::new();
    let certs = TlsCerts::generate();
    let redis = TlsRedis::start(&certs);
    let out = output(sandbox.tenure().args([
        "--backend",
        &redis.url(),
        "--cacert",
        certs.path("ca.pem").to_str().unwrap(),
        "run",
        "--key",
        "tls",
        "--permits",
        "2",
        "--",
        "true",
    ]));
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
}

/// `--cacert` (or `TENURE_CACERT` set for the whole environment) only applies
/// to a `rediss://` store: with a plain `redis://` or SQLite store it is
/// ignored, even when the file does not exist.
#[test]
fn cacert_is_ignored_for_other_stores() {
    let sandbox = Sandbox::new();
    let redis = RedisServer::start();
    let missing = sandbox.path("no-such-ca.pem");
    let missing = missing.to_str().unwrap();
    for backend in [redis.url(), sandbox.sqlite()] {
        let out = output(sandbox.tenure().env("TENURE_CACERT", missing).args([
            "--backend",
            &backend,
            "run",
            "--key",
            "plain",
            "--",
            "true",
        ]));
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
    }
}
