//! Redis TLS (`rediss://`) and ACL users from the CLI: the real binary against
//! real redis-server processes.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, output, stderr};
use warden_test::RedisServer;

/// Redis 7 denies every channel to a new ACL user, so the release script's
/// PUBLISH is refused. The notification is best-effort: the release must still
/// succeed and the key be gone right after `warden run` exits.
#[test]
fn run_under_an_acl_user_without_channel_rights_releases() {
    let sandbox = Sandbox::new();
    let redis = RedisServer::start();
    let url = redis.acl_user("app", "s3cret", "~warden:* resetchannels +@all");
    let out =
        output(
            sandbox
                .warden()
                .args(["--backend", &url, "run", "--key", "job", "--", "true"]),
        );
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(!stderr(&out).contains("s3cret"), "{}", stderr(&out));
    let exists = redis.command("EXISTS warden:{job}").unwrap();
    assert_eq!(exists.trim(), ":0", "lease key still held after run");
}
