//! `tenure release KEY --force`, the break-glass: the hung holder's `tenure run`
//! exits 76 at its next renewal, the next holder's fence is greater, and a
//! fenced resource refuses the old holder's write.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Sandbox, assert_one_line_error, output, stderr, stdout, wait_for_file};
use tenure::Fence;
use tenure::fence::FencedWrite;
use tenure::redis::RedisFencedStore;
use tenure_test::RedisServer;

/// Starts `tenure run KEY` on `backend` whose command writes its fence into a
/// file and then waits forever (a hung job); returns it and the fence.
fn hung_holder(s: &Sandbox, backend: &str, key: &str) -> (common::Running, u64) {
    let fence_file = s.path(&format!("{key}.fence"));
    let script = format!(
        "echo $TENURE_FENCE > {}; while :; do sleep 0.05; done",
        fence_file.display()
    );
    let holder = s.start(&[
        "--backend",
        backend,
        "run",
        key,
        "-t",
        "3",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let fence = wait_for_file(&fence_file, Duration::from_secs(10));
    (holder, fence.trim().parse().unwrap())
}

fn break_glass(backend: &str) {
    let s = Sandbox::new();
    let redis = RedisServer::start();
    let (mut holder, old) = hung_holder(&s, backend, "job");

    // Without --force: refused, and the holder keeps its lease.
    assert_one_line_error(&s, &["--backend", backend, "release", "job"], 64, "--force");
    let held = output(s.tenure().args(["--backend", backend, "status", "job"]));
    assert_eq!(held.status.code(), Some(0), "{}", stdout(&held));

    let out = output(
        s.tenure()
            .args(["--backend", backend, "release", "job", "--force"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("released lease \"job\""),
        "{}",
        stderr(&out)
    );

    // The next holder gets the lease at once, with a greater fence.
    let next = output(s.tenure().args([
        "--backend",
        backend,
        "run",
        "job",
        "-w",
        "0",
        "sh",
        "-c",
        "echo $TENURE_FENCE",
    ]));
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    let new: u64 = stdout(&next).trim().parse().unwrap();
    assert!(new > old, "fence {new} after {old}");

    // The old holder sees the loss at its next renewal (every 1 s here).
    let status = holder.wait(Duration::from_secs(15));
    assert_eq!(status.code(), Some(76), "{}", holder.stderr());

    // A fenced resource takes the new holder's write and refuses the old one's.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = RedisFencedStore::connect(&redis.url()).await.unwrap();
        let applied = store.write("report", Fence::new(new), "new").await.unwrap();
        assert_eq!(applied, FencedWrite::Applied);
        let stale = store.write("report", Fence::new(old), "old").await.unwrap();
        assert!(matches!(stale, FencedWrite::Rejected { .. }), "{stale:?}");
    });

    // A free lease: nothing to release, exit 0.
    let out = output(
        s.tenure()
            .args(["--backend", backend, "release", "-k", "job", "--force"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("not held"), "{}", stderr(&out));
}

#[test]
fn release_force_on_sqlite() {
    let s = Sandbox::new();
    break_glass(&s.sqlite());
}

#[test]
fn release_force_on_redis() {
    let redis = RedisServer::start();
    break_glass(&redis.url());
}

#[test]
fn a_quorum_refuses_release_force() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let s = Sandbox::new();
    let mut args: Vec<String> = Vec::new();
    for node in &nodes {
        args.push("--backend".into());
        args.push(node.url());
    }
    args.extend(["release", "k", "--force"].map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_one_line_error(&s, &refs, 64, "cannot release");
}

#[test]
fn release_force_on_etcd() {
    let etcd = tenure_test::EtcdCluster::start(1);
    break_glass(&etcd.url());
}
