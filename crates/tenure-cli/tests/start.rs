//! What a Rust program's start-up gives it, tenure's own entry point gives
//! it too: SIGPIPE ignored by tenure and back to its default action in the
//! commands it runs, closed standard descriptors opened on `/dev/null`.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Sandbox, output, stderr, stdout, wait_for_file};
use tenure_test::RedisServer;

/// The bit of SIGPIPE (13) in a `Sig*` mask of `/proc/PID/status`.
const SIGPIPE_BIT: u64 = 1 << (13 - 1);

/// The `Sig*` mask named `field` in a `/proc/PID/status` text.
fn mask(status: &str, field: &str) -> u64 {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    u64::from_str_radix(line.trim(), 16).unwrap()
}

#[test]
fn the_command_gets_sigpipe_with_its_default_action() {
    let sandbox = Sandbox::new();
    let out = output(sandbox.tenure().args([
        "run",
        "-k",
        "pipe",
        "--",
        "grep",
        "^Sig",
        "/proc/self/status",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let status = stdout(&out);
    for field in ["SigIgn", "SigBlk"] {
        assert_eq!(mask(&status, field) & SIGPIPE_BIT, 0, "{field}: {status}");
    }
}

#[test]
fn a_pipeline_in_the_command_ends_as_it_would_without_tenure() {
    let sandbox = Sandbox::new();
    // `yes` ends by SIGPIPE when `head` has read its line; with SIGPIPE
    // ignored or blocked it would complain of a broken pipe instead.
    let out =
        output(
            sandbox
                .tenure()
                .args(["run", "-k", "pipe", "--", "sh", "-c", "yes | head -1"]),
        );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "y\n");
    assert!(
        !stderr(&out).contains("Broken pipe"),
        "yes did not get SIGPIPE: {}",
        stderr(&out)
    );
}

#[test]
fn tenure_writing_into_a_closed_pipe_is_not_killed_by_sigpipe() {
    let sandbox = Sandbox::new();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = sandbox
        .tenure()
        .args(["--backend", &sandbox.sqlite(), "status", "free"])
        .stdout(writer)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), None, "tenure was killed: {status:?}");
    // `status` of a free key: 75, whatever became of its line.
    assert_eq!(status.code(), Some(75));
}

#[test]
fn closed_standard_descriptors_are_opened_on_dev_null() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let (tenures, commands) = (sandbox.path("tenure.fd1"), sandbox.path("command.fd1"));
    // tenure starts with stdout closed: without /dev/null on descriptor 1,
    // the first file it opens (its runtime's, a socket to Redis) would take
    // that number and receive what tenure prints. The command's parent is
    // tenure, and the command gets tenure's descriptor 1 as its stdout (its
    // copy on 3 fails, and the command with it, when that is closed).
    let script = format!(
        "readlink /proc/$PPID/fd/1 > {}; exec 3>&1; readlink /proc/self/fd/3 > {}",
        tenures.display(),
        commands.display()
    );
    let status = Command::new("sh")
        .args(["-c", "exec \"$0\" \"$@\" >&-"])
        .arg(common::binary())
        .args(["--backend", &server.url(), "run", "-k", "fds", "--"])
        .args(["sh", "-c", &script])
        .env("HOME", sandbox.dir.path())
        .env_remove("TENURE_BACKEND")
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    for seen in [tenures, commands] {
        let target = wait_for_file(&seen, Duration::from_secs(10));
        assert_eq!(target.trim(), "/dev/null", "{}", seen.display());
    }
}
