//! One `tenure run --key K -- true` process, start to exit, on the embedded
//! SQLite default and on Redis, against `flock FILE true` and, when it is
//! built, the least a lease run on SQLite does (`examples/cold_floor.rs`):
//! interleaved, one of each per iteration in an order that rotates. Then
//! what one Redis cold start sends (the server's `INFO commandstats`) and
//! the system calls of each (`strace -c -f`, when strace is installed).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::samples::Samples;

/// Invocations of each command per round, at least (rounded up to a
/// multiple of the number of commands, for the rotation).
const RUNS: usize = 40;

/// The release build of the `tenure` binary: `TENURE_BIN`, or the workspace's
/// `target/release/tenure` (`scripts/bench` builds it).
pub fn tenure_bin() -> std::path::PathBuf {
    std::env::var_os("TENURE_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/tenure"),
        Into::into,
    )
}

/// The release build of `examples/cold_floor.rs`: `TENURE_FLOOR_BIN`, or the
/// workspace's `target/release/examples/cold_floor` (`scripts/bench` builds
/// it); `None` when there is none.
fn floor_bin() -> Option<std::path::PathBuf> {
    built("TENURE_FLOOR_BIN", "examples/cold_floor")
}

/// The binary the variable `var` names, or `file` under the workspace's
/// `target/release`; `None` when there is no such file.
fn built(var: &str, file: &str) -> Option<std::path::PathBuf> {
    let bin = std::env::var_os(var).map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/release")
                .join(file)
        },
        Into::into,
    );
    bin.is_file().then_some(bin)
}

/// A build of `tenure` measured beside the default one, each with its own
/// `HOME` (its own SQLite default file).
struct Build {
    /// The samples' name: `cli.<name>`.
    name: &'static str,
    /// The variable that names its binary.
    var: &'static str,
    /// Its binary in the workspace's `target/release` otherwise.
    file: &'static str,
}

/// The builds `scripts/bench` makes besides the default one: the embedded
/// SQLite store alone (`--no-default-features`), and every store linked
/// statically (glibc, `-C target-feature=+crt-static`, docs/cli.md).
const BUILDS: [Build; 2] = [
    Build {
        name: "sqlite_only",
        var: "TENURE_SQLITE_ONLY_BIN",
        file: "tenure-sqlite-only",
    },
    Build {
        name: "static",
        var: "TENURE_STATIC_BIN",
        file: "tenure-static",
    },
];

impl Build {
    /// Its binary: the variable's, or the workspace's; `None` when there is
    /// none.
    fn bin(&self) -> Option<std::path::PathBuf> {
        built(self.var, self.file)
    }

    /// `tenure run` of this build's binary `bin`, on the default file of its
    /// own `HOME` under `home` (created).
    fn run(&self, home: &Path, bin: &Path) -> Command {
        let home = home.join(self.name);
        std::fs::create_dir_all(&home).unwrap();
        let mut c = run_with(bin, &home);
        c.args(["run", "--key", "bench", "--", "true"]);
        c
    }
}

/// A run of the minimal lease program on the file `db`.
fn floor_run(bin: &Path, db: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg(db).arg("true");
    c
}

/// `cmd` without what `cargo bench` adds to this process's environment:
/// its `LD_LIBRARY_PATH` would make the dynamic loader of every measured
/// process search the target directory first.
pub fn plain(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("LD_LIBRARY_PATH")
}

fn time(cmd: &mut Command) -> Duration {
    let cmd = plain(cmd);
    let start = Instant::now();
    let status = cmd.stdout(Stdio::null()).status().unwrap();
    let took = start.elapsed();
    assert!(status.success(), "{cmd:?} failed: {status}");
    took
}

/// Drops `cmd`'s program from the page cache, then runs it once, untimed, so
/// that every binary measured was read back by the kernel the same way, as
/// after a reboot or memory pressure. A binary just copied (as
/// `scripts/bench` copies the builds) keeps the pages of its writing in the
/// cache, and started with up to about 20 fewer page faults here (a 12 MB
/// `tenure`). The untimed run also creates the SQLite files.
fn read_back(cmd: &mut Command) {
    let program = Path::new(cmd.get_program());
    let path = if program.is_absolute() {
        Some(program.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|dirs| {
            std::env::split_paths(&dirs)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
    };
    if let Some(file) = path.and_then(|p| std::fs::File::open(p).ok()) {
        use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
        // Advice only: a file system that ignores it leaves the pages.
        let _ = posix_fadvise(&file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
    }
    time(cmd);
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1e3
}

/// Records `cli.{sqlite,redis,flock}` in ms (median of `RUNS` or a few
/// more, a multiple of the commands),
/// `cli.floor` when the minimal lease program is built, and `cli.<name>` of
/// each of [`BUILDS`] that is.
pub async fn run(redis_url: &str, out: &mut Samples) {
    let url = redis_url.to_string();
    let medians = tokio::task::spawn_blocking(move || {
        let home = std::env::temp_dir().join(format!("tenure-bench-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let mut runs = runs(&home, &url);
        for (_, cmd) in &mut runs {
            read_back(cmd);
        }
        let n = runs.len();
        let mut took: Vec<Vec<Duration>> = vec![Vec::new(); n];
        // One of each per iteration, the order rotated by one each time, so
        // that each command follows each other one equally often.
        for round in 0..RUNS.next_multiple_of(n) {
            for i in (0..n).map(|k| (round + k) % n) {
                took[i].push(time(&mut runs[i].1));
            }
        }
        let _ = std::fs::remove_dir_all(&home);
        let names = runs.iter().map(|(name, _)| *name);
        names.zip(took.into_iter().map(median)).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (name, ms) in medians {
        out.add(format!("cli.{name}"), ms);
    }
}

/// Every command the cold start times, by name, with their files under
/// `home`: tenure on SQLite and on Redis at `redis_url`, `flock`, and the
/// minimal lease run and each of [`BUILDS`] when they are built.
fn runs(home: &Path, redis_url: &str) -> Vec<(&'static str, Command)> {
    let floor = floor_bin().map(|bin| ("floor", floor_run(&bin, &home.join("floor.db"))));
    let builds = BUILDS
        .iter()
        .filter_map(|b| Some((b.name, b.run(home, &b.bin()?))));
    let mut flock = Command::new("flock");
    flock.arg(home.join("flock")).arg("true");
    [
        ("sqlite", tenure_run(home, None)),
        ("redis", tenure_run(home, Some(redis_url))),
        ("flock", flock),
    ]
    .into_iter()
    .chain(floor)
    .chain(builds)
    .collect()
}

/// A `tenure run` command: `HOME` in `home` (the SQLite default file there),
/// on `backend` when given.
fn tenure_run(home: &Path, backend: Option<&str>) -> Command {
    let mut c = run_with(&tenure_bin(), home);
    if let Some(b) = backend {
        c.args(["--backend", b]);
    }
    c.args(["run", "--key", "bench", "--", "true"]);
    c
}

/// `bin` with `HOME` in `home` and no store named by the environment.
fn run_with(bin: &Path, home: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env("HOME", home)
        .env_remove("TENURE_BACKEND")
        .env_remove("TENURE_DB")
        .env_remove("XDG_STATE_HOME");
    c
}

/// Records `cli.redis.commands` (commands one cold start sends, by name in
/// `cli.redis.command.<name>`) and, with strace,
/// `cli.<run>.syscalls` of each run [`run`] times.
pub async fn count(stats: &crate::server_stats::ServerStats, redis_url: &str, out: &mut Samples) {
    let home = std::env::temp_dir().join(format!("tenure-bench-count-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    // A first run loads the scripts, as any earlier client of the server has.
    time(&mut tenure_run(&home, Some(redis_url)));
    stats.reset().await;
    time(&mut tenure_run(&home, Some(redis_url)));
    let mut total = 0;
    for (name, calls) in stats.calls_by_command().await {
        total += calls;
        out.add(format!("cli.redis.command.{name}"), calls as f64);
    }
    out.add("cli.redis.commands", total as f64);
    if Command::new("strace").arg("-V").output().is_ok() {
        for (name, mut cmd) in runs(&home, redis_url) {
            // Counted on a second run: the first creates the SQLite files.
            time(&mut cmd);
            if let Some(n) = syscalls(cmd) {
                out.add(format!("cli.{name}.syscalls"), n);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// System calls of `cmd` and its children (`strace -c -f`'s total).
fn syscalls(cmd: Command) -> Option<f64> {
    let report = std::env::temp_dir().join(format!("tenure-bench-strace-{}", std::process::id()));
    let status = plain(&mut Command::new("strace"))
        .args(["-c", "-f", "-o"])
        .arg(&report)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdout(Stdio::null())
        .status()
        .ok()?;
    let text = std::fs::read_to_string(&report).ok()?;
    let _ = std::fs::remove_file(&report);
    if !status.success() {
        return None;
    }
    // The last line: "100.00 SECONDS USECS/CALL CALLS [ERRORS] total".
    let total = text
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with("total"))?;
    let nums: Vec<f64> = total
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    nums.get(3).copied()
}
