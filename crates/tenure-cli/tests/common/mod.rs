//! Helpers for the tests that spawn the real `tenure` binary.

#![allow(clippy::unwrap_used, dead_code, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory with a HOME, and the `tenure` binary to run in it.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A `sqlite:` URL for a database in the sandbox.
    pub fn sqlite(&self) -> String {
        format!("sqlite:{}", self.path("tenure.db").display())
    }

    /// Starts `tenure ARGS` in the background, stderr captured.
    pub fn start(&self, args: &[&str]) -> Running {
        Running(
            self.tenure()
                .args(args)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }

    /// `tenure` with a clean environment: HOME in the sandbox, no TENURE_*.
    pub fn tenure(&self) -> Command {
        let mut cmd = Command::new(binary());
        cmd.env("HOME", self.dir.path())
            .env_remove("TENURE_BACKEND")
            .env_remove("TENURE_DB")
            .env_remove("XDG_STATE_HOME")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        cmd
    }
}

/// The `tenure` binary under test: cargo's, or `TENURE_TEST_BIN` when set (a
/// target directory shared by several checkouts holds one `tenure` for all of
/// them; this names the build to test).
pub fn binary() -> PathBuf {
    std::env::var_os("TENURE_TEST_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tenure")),
        PathBuf::from,
    )
}

/// Runs to completion, capturing output.
pub fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `tenure --backend BACKEND run --key KEY OPTIONS -- sh -c SCRIPT`
/// in the background, stderr captured.
pub fn start_run(
    sandbox: &Sandbox,
    backend: &str,
    key: &str,
    options: &[&str],
    script: &str,
) -> Running {
    let mut args = vec!["--backend", backend, "run", "--key", key];
    args.extend_from_slice(options);
    args.extend(["--", "sh", "-c", script]);
    sandbox.start(&args)
}

/// Starts a holder of `key` on the sandbox's default store that keeps the
/// lease until `release` exists; returns once it holds the lease.
pub fn hold(sandbox: &Sandbox, key: &str, release: &Path) -> Running {
    let marker = sandbox.path(&format!("{key}.held"));
    // A marker left by an earlier holder would say "held" too early.
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "echo $$ > {m}; while [ ! -e {r} ]; do sleep 0.02; done",
        m = marker.display(),
        r = release.display()
    );
    let holder = sandbox.start(&["run", "-k", key, "--", "sh", "-c", &script]);
    wait_for_file(&marker, Duration::from_secs(10));
    holder
}

/// Waits until `path` exists and is not empty (or panics after `max`).
pub fn wait_for_file(path: &Path, max: Duration) -> String {
    poll_file(path, max)
        .unwrap_or_else(|| panic!("{} did not appear within {max:?}", path.display()))
}

/// As [`wait_for_file`], for a file that the command of `run` writes: on a
/// timeout `run` is killed, and the panic says how it ended and what it
/// printed on stderr.
pub fn wait_for_file_of(path: &Path, max: Duration, run: &mut Running) -> String {
    if let Some(text) = poll_file(path, max) {
        return text;
    }
    let _ = run.0.kill();
    let status = run.0.wait();
    panic!(
        "{} did not appear within {max:?}; its tenure ended {status:?}, stderr:\n{}",
        path.display(),
        run.stderr()
    );
}

/// The text of `path` once it exists and is not empty, within `max`.
fn poll_file(path: &Path, max: Duration) -> Option<String> {
    let start = Instant::now();
    loop {
        match std::fs::read_to_string(path) {
            Ok(text) if !text.is_empty() => return Some(text),
            _ => {}
        }
        if start.elapsed() >= max {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid a command wrote into `path` (waiting up to 10 s for it).
pub fn pid_in(path: &Path) -> i32 {
    wait_for_file(path, Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap()
}

/// Waits for a child with a deadline; kills it and panics when it is exceeded.
pub fn wait_with_deadline(
    child: &mut std::process::Child,
    max: Duration,
) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > max {
            let _ = child.kill();
            panic!("tenure did not exit within {max:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A spawned `tenure` that is killed if the test fails before it exits.
pub struct Running(pub std::process::Child);

impl Running {
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).unwrap())
    }

    pub fn wait(&mut self, max: Duration) -> std::process::ExitStatus {
        wait_with_deadline(&mut self.0, max)
    }

    pub fn stderr(&mut self) -> String {
        let mut err = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            std::io::Read::read_to_string(&mut pipe, &mut err).unwrap();
        }
        err
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One `tenure run` as its command recorded it: its fence and the start and
/// end (ns) of the command.
pub type Stay = (u64, u128, u128);

/// Starts one `tenure --backend BACKEND run SHAPE --wait 60s` per entry of
/// `shapes`, all at once, each command sleeping `sleep` seconds and
/// recording its fence and start/end times; waits for every run (each must
/// succeed) and returns the records in the order of `shapes`.
pub fn timed_runs(
    sandbox: &Sandbox,
    backend: &str,
    sleep: &str,
    shapes: &[Vec<&str>],
) -> Vec<Stay> {
    let children: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, shape)| {
            let record = sandbox.path(&format!("run.{i}"));
            let script = format!(
                "s=$(date +%s%N); sleep {sleep}; e=$(date +%s%N); echo \"$TENURE_FENCE $s $e\" > {}",
                record.display()
            );
            sandbox
                .tenure()
                .args(["--backend", backend, "run"])
                .args(shape)
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
    (0..shapes.len())
        .map(|i| {
            let text = std::fs::read_to_string(sandbox.path(&format!("run.{i}"))).unwrap();
            let f: Vec<&str> = text.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

/// Starts `n` concurrent `tenure --backend BACKEND run` on one key, each
/// command sleeping `sleep` seconds and recording its fence and start/end times
/// (ns). Checks that no two intervals overlap and that fences strictly increase
/// in the order the lease was acquired.
pub fn concurrent_runs_take_turns(sandbox: &Sandbox, backend: &str, n: usize, sleep: &str) {
    let shapes = vec![vec!["--key", "batch"]; n];
    let mut runs = timed_runs(sandbox, backend, sleep, &shapes);
    runs.sort_by_key(|r| r.1);
    for pair in runs.windows(2) {
        let ((f1, _, end1), (f2, start2, _)) = (pair[0], pair[1]);
        assert!(end1 <= start2, "two holders at once: {runs:?}");
        assert!(
            f2 > f1,
            "fences must increase in acquisition order: {runs:?}"
        );
    }
}

/// Runs `tenure ARGS` and checks that it fails with `code` and one line on
/// stderr (`tenure: …`, mentioning `mentions`, no panic), nothing on stdout;
/// returns that line.
pub fn assert_one_line_error(
    sandbox: &Sandbox,
    args: &[&str],
    code: i32,
    mentions: &str,
) -> String {
    let out = output(sandbox.tenure().args(args));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line expected: {err}");
    assert!(err.starts_with("tenure: "), "{err}");
    assert!(
        err.contains(mentions),
        "{args:?}: {err} should mention {mentions:?}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    err
}
