//! One `tenure run --key K -- true` process, start to exit, on the embedded
//! SQLite default and on Redis, against `flock FILE true` and, when it is
//! built, the least a lease run on SQLite does (`examples/cold_floor.rs`):
//! interleaved, one of each per iteration. Then what one Redis cold start
//! sends (the server's `INFO commandstats`) and the system calls of each
//! (`strace -c -f`, when strace is installed).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::samples::Samples;

/// Invocations of each command per round.
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
    let bin = std::env::var_os("TENURE_FLOOR_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/examples/cold_floor"),
        Into::into,
    );
    bin.is_file().then_some(bin)
}

/// The release build of `tenure` with the embedded SQLite store alone
/// (`--no-default-features`): `TENURE_SQLITE_ONLY_BIN`, or the workspace's
/// `target/release/tenure-sqlite-only` (`scripts/bench` builds it); `None`
/// when there is none.
fn sqlite_only_bin() -> Option<std::path::PathBuf> {
    let bin = std::env::var_os("TENURE_SQLITE_ONLY_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/tenure-sqlite-only"),
        Into::into,
    );
    bin.is_file().then_some(bin)
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

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1e3
}

/// Records `cli.{sqlite,redis,flock}` in ms (median of `RUNS`),
/// `cli.floor` when the minimal lease program is built, and
/// `cli.sqlite_only` when the SQLite-only build of `tenure` is.
pub async fn run(redis_url: &str, out: &mut Samples) {
    let url = redis_url.to_string();
    let [sqlite, redis, flock, floor, sqlite_only] = tokio::task::spawn_blocking(move || {
        let home = std::env::temp_dir().join(format!("tenure-bench-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let tenure = |backend: Option<&str>| tenure_run(&home, backend);
        let lock_file = home.join("flock");
        let floor_bin = floor_bin();
        let floor_db = home.join("floor.db");
        let lean = sqlite_only_bin();
        std::fs::create_dir_all(home.join("sqlite-only")).unwrap();
        let mut v: [Vec<Duration>; 5] = Default::default();
        for _ in 0..RUNS {
            v[0].push(time(&mut tenure(None)));
            v[1].push(time(&mut tenure(Some(&url))));
            v[2].push(time(Command::new("flock").arg(&lock_file).arg("true")));
            if let Some(bin) = &floor_bin {
                v[3].push(time(&mut floor_run(bin, &floor_db)));
            }
            if let Some(bin) = &lean {
                v[4].push(time(&mut sqlite_only_run(&home, bin)));
            }
        }
        let _ = std::fs::remove_dir_all(&home);
        v.map(|v| (!v.is_empty()).then(|| median(v)))
    })
    .await
    .unwrap();
    let named = [
        ("sqlite", sqlite),
        ("redis", redis),
        ("flock", flock),
        ("floor", floor),
        ("sqlite_only", sqlite_only),
    ];
    for (name, ms) in named {
        if let Some(ms) = ms {
            out.add(format!("cli.{name}"), ms);
        }
    }
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

/// `tenure run` of the SQLite-only build `bin`, on the default file of its
/// own `HOME` under `home`.
fn sqlite_only_run(home: &Path, bin: &Path) -> Command {
    let mut c = run_with(bin, &home.join("sqlite-only"));
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
/// `cli.{sqlite,redis,flock,floor,sqlite_only}.syscalls`.
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
        let lock_file = home.join("flock");
        let mut flock = Command::new("flock");
        flock.arg(&lock_file).arg("true");
        let floor = floor_bin().map(|bin| ("floor", floor_run(&bin, &home.join("floor.db"))));
        std::fs::create_dir_all(home.join("sqlite-only")).unwrap();
        let lean = sqlite_only_bin().map(|bin| ("sqlite_only", sqlite_only_run(&home, &bin)));
        for (name, mut cmd) in [
            ("sqlite", tenure_run(&home, None)),
            ("redis", tenure_run(&home, Some(redis_url))),
            ("flock", flock),
        ]
        .into_iter()
        .chain(floor)
        .chain(lean)
        {
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
