//! `warden --backend redis+cluster://…` against a real Redis Cluster (3
//! masters, 1 replica each): a command runs under the lease with its fence,
//! the lease is gone after, and a second `warden run` on the same key sees it
//! held while the first runs.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, output, stderr};
use warden_test::RedisCluster;

#[test]
fn run_on_a_cluster_holds_the_lease_and_releases_it() {
    let sandbox = Sandbox::new();
    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    let out = output(sandbox.warden().args([
        "--backend",
        &url,
        "run",
        "--key",
        "job",
        "--",
        "sh",
        "-c",
        "echo \"fence=$WARDEN_FENCE\"",
    ]));
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fence=1"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The lease key lives on the master of its slot; EXISTS there is 0.
    let master = cluster.master_of("warden:{job}");
    assert_eq!(
        cluster
            .node(master)
            .command("EXISTS warden:{job}")
            .unwrap()
            .trim(),
        ":0"
    );
    assert_eq!(
        cluster
            .node(master)
            .command("GET warden:{job}:fence")
            .unwrap()
            .trim(),
        "$1\r\n1"
    );
    // While one run holds the key, a second one with no wait exits 75.
    let mut holder = sandbox
        .warden()
        .args(["--backend", &url, "run", "--key", "job", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let held = cluster.node(master).command("EXISTS warden:{job}").unwrap();
        if held.trim() == ":1" {
            break;
        }
        assert!(
            start.elapsed().as_secs() < 10,
            "the holder never took the lease"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = output(sandbox.warden().args([
        "--backend",
        &url,
        "run",
        "--key",
        "job",
        "-n",
        "--",
        "true",
    ]));
    assert_eq!(second.status.code(), Some(75), "{}", stderr(&second));
    assert!(holder.wait().unwrap().success());
}
