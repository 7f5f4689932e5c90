//! The grammar a flock(1) user expects, run through the real binary: the key
//! first and the command right after it, bare numbers as seconds, clap's tip
//! kept in our one-line errors, and `status` answering with its exit status.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Sandbox, assert_one_line_error, hold, output, stderr, stdout};

/// `sh -c` that prints the key and fence it was given.
const SHOW: &str = "echo \"$TENURE_KEY $TENURE_FENCE\"";

#[test]
fn the_key_is_positional_and_the_double_dash_optional() {
    let s = Sandbox::new();
    let forms: [&[&str]; 5] = [
        &["run", "k1", "sh", "-c", SHOW],
        &["run", "k1", "--", "sh", "-c", SHOW],
        &["run", "-k", "k1", "--", "sh", "-c", SHOW],
        &["run", "-c", SHOW, "--key", "k1"],
        &["run", "k1", "-c", SHOW],
    ];
    let mut fences = Vec::new();
    for args in forms {
        let out = output(s.tenure().args(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let printed = stdout(&out);
        let (key, fence) = printed.trim().split_once(' ').unwrap();
        assert_eq!(key, "k1", "{args:?}");
        fences.push(fence.parse::<u64>().unwrap());
    }
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    // The command's own options are its own, without `--`.
    let out = output(s.tenure().args(["run", "k1", "echo", "-n", "--flag"]));
    assert_eq!(stdout(&out), "--flag", "{}", stderr(&out));
    // The other keyed subcommands take the key first too.
    let out = output(s.tenure().args(["once", "k2", "sh", "-c", SHOW]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("k2 "), "{}", stdout(&out));
    let out = output(s.tenure().args(["limit", "k3", "--rate", "1/1h"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = output(s.tenure().args(["limit", "-k", "k3", "--rate", "1/1h"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let out = output(s.tenure().args(["leader", "k4"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // A key given twice, or no command, is a usage error.
    assert_one_line_error(&s, &["status", "k", "-k", "j"], 64, "--key");
    assert_one_line_error(&s, &["run", "k"], 64, "command is required");
    assert_one_line_error(&s, &["run", "k", "-c", "true", "true"], 64, "exclude");
    // After -k KEY, `-c` before `--` is tenure's: the error says what to do.
    assert_one_line_error(&s, &["run", "-k", "k", "sh", "-c", "true"], 64, "'--'");
}

#[test]
fn bare_numbers_are_seconds() {
    let s = Sandbox::new();
    let release = s.path("release");
    let mut holder = hold(&s, "busy", &release);
    // `-w 1` waits one second (not one millisecond, not the 10 s default).
    let start = Instant::now();
    let out = output(s.tenure().args(["run", "busy", "-w", "1", "true"]));
    let waited = start.elapsed();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(
        waited >= Duration::from_millis(950) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    // Fractions and units still work; `--wait 0` tries once.
    let start = Instant::now();
    let out = output(s.tenure().args(["run", "busy", "--wait", "0", "true"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_millis(950));
    std::fs::write(&release, "").unwrap();
    assert!(holder.wait(Duration::from_secs(10)).success());
    let out = output(
        s.tenure()
            .args(["run", "free", "-t", "2", "-w", "0.5", "true"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = output(
        s.tenure()
            .args(["once", "o", "-t", "1.5", "-w", "30s", "true"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_one_line_error(&s, &["run", "k", "-t", "1m30", "true"], 64, "no unit");
}

/// Without `--` after `-k KEY`, an option meant for the command is read as
/// tenure's: the one-line error keeps clap's tip on how to pass it.
#[test]
fn a_usage_error_keeps_clap_tip() {
    let s = Sandbox::new();
    let err = assert_one_line_error(
        &s,
        &["run", "-k", "k", "./job.sh", "--flag"],
        64,
        "'--flag'",
    );
    assert!(
        err.contains("tip: to pass '--flag' as a value, use '-- --flag'"),
        "{err}"
    );
    let err = assert_one_line_error(&s, &["status", "--frobnicate"], 64, "--frobnicate");
    assert!(err.contains("see 'tenure --help'"), "{err}");
}

#[test]
fn status_exits_0_when_held_and_75_when_free() {
    let s = Sandbox::new();
    let release = s.path("release");
    let look = |args: &[&str]| {
        let out = output(s.tenure().args(args));
        (out.status.code(), stdout(&out))
    };
    let (code, free) = look(&["status", "job"]);
    assert_eq!(code, Some(75), "{free}");
    let mut holder = hold(&s, "job", &release);
    let (code, held) = look(&["status", "job"]);
    assert_eq!(code, Some(0), "{held}");
    // The same lines either way: only the state differs.
    let labels = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .filter(|l| !["holder", "held"].contains(&l.as_str()))
            .collect()
    };
    assert_eq!(labels(&free), labels(&held), "{free}\n{held}");
    assert!(held.contains("state    held"), "{held}");
    let (code, json) = look(&["status", "-k", "job", "--json"]);
    assert_eq!(code, Some(0), "{json}");
    assert!(json.contains("\"held\":true"), "{json}");
    std::fs::write(&release, "").unwrap();
    assert!(holder.wait(Duration::from_secs(10)).success());
    let (code, json) = look(&["status", "job", "--json"]);
    assert_eq!(code, Some(75), "{json}");
    assert!(json.contains("\"held\":false"), "{json}");
    // Quiet prints nothing and still answers.
    let (code, quiet) = look(&["status", "job", "-q"]);
    assert_eq!((code, quiet.as_str()), (Some(75), ""));
}
