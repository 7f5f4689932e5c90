//! `warden run --permits N` end to end: twenty contenders, never more than N
//! inside; on Redis, SQLite and etcd.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Stdio;

use common::{Sandbox, output, stderr};
use warden_test::RedisServer;

fn never_more_than_three(backend: &str) {
    let sandbox = Sandbox::new();
    let children: Vec<_> = (0..20)
        .map(|i| {
            let record = sandbox.path(&format!("in.{i}"));
            let script = format!(
                "s=$(date +%s%N); sleep 0.2; e=$(date +%s%N); echo \"$WARDEN_FENCE $s $e\" > {}",
                record.display()
            );
            sandbox
                .warden()
                .args([
                    "--backend",
                    backend,
                    "run",
                    "--key",
                    "pool",
                    "--permits",
                    "3",
                ])
                .args(["--wait", "60s", "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    }
    let mut events = Vec::new();
    let mut fences = Vec::new();
    for i in 0..20 {
        let text = std::fs::read_to_string(sandbox.path(&format!("in.{i}"))).unwrap();
        let f: Vec<u128> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        fences.push(f[0]);
        events.push((f[1], 1i32));
        events.push((f[2], -1i32));
    }
    // Ends sort before starts at the same instant.
    events.sort();
    let (mut inside, mut most) = (0, 0);
    for (_, delta) in events {
        inside += delta;
        most = most.max(inside);
    }
    assert!(most <= 3, "{most} inside at once");
    assert!(most >= 2, "the permits were used concurrently ({most})");
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 20, "every permit has its own fence");
}

#[test]
fn twenty_contenders_on_redis() {
    let server = RedisServer::start();
    never_more_than_three(&server.url());
}

#[test]
fn twenty_contenders_on_etcd() {
    let etcd = warden_test::EtcdCluster::single();
    never_more_than_three(&etcd.url());
}

#[test]
fn twenty_contenders_on_sqlite() {
    let sandbox = Sandbox::new();
    never_more_than_three(&sandbox.sqlite());
}

#[test]
fn zero_permits_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let out = output(sandbox.warden().args([
        "--backend",
        &sandbox.sqlite(),
        "run",
        "--key",
        "k",
        "--permits",
        "0",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
}
