//! One `tenure run --key K -- true` process, start to exit, on the embedded
//! SQLite default and on Redis, against `flock FILE true`: interleaved, one
//! of each per iteration.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::samples::Samples;

/// Invocations of each command per round.
const RUNS: usize = 40;

/// The release build of the `tenure` binary: `TENURE_BIN`, or the workspace's
/// `target/release/tenure` (`scripts/bench` builds it).
fn tenure_bin() -> std::path::PathBuf {
    std::env::var_os("TENURE_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/tenure"),
        Into::into,
    )
}

fn time(cmd: &mut Command) -> Duration {
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

/// Records `cli.{sqlite,redis,flock}` in ms (median of `RUNS`).
pub async fn run(redis_url: &str, out: &mut Samples) {
    let url = redis_url.to_string();
    let [sqlite, redis, flock] = tokio::task::spawn_blocking(move || {
        let home = std::env::temp_dir().join(format!("tenure-bench-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let bin = tenure_bin();
        let tenure = |backend: Option<&str>| {
            let mut c = Command::new(&bin);
            c.env("HOME", &home)
                .env_remove("TENURE_BACKEND")
                .env_remove("TENURE_DB")
                .env_remove("XDG_STATE_HOME");
            if let Some(b) = backend {
                c.args(["--backend", b]);
            }
            c.args(["run", "--key", "bench", "--", "true"]);
            c
        };
        let lock_file = home.join("flock");
        let (mut s, mut r, mut f) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            s.push(time(&mut tenure(None)));
            r.push(time(&mut tenure(Some(&url))));
            f.push(time(Command::new("flock").arg(&lock_file).arg("true")));
        }
        let _ = std::fs::remove_dir_all(&home);
        [median(s), median(r), median(f)]
    })
    .await
    .unwrap();
    out.add("cli.sqlite", sqlite);
    out.add("cli.redis", redis);
    out.add("cli.flock", flock);
}
