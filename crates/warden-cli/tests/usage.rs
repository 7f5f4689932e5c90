//! Bad input gets one line on stderr and the documented exit status.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, output, stderr, stdout};

fn assert_one_line_error(sandbox: &Sandbox, args: &[&str], code: i32, mentions: &str) {
    let out = output(sandbox.warden().args(args));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line expected: {err}");
    assert!(err.starts_with("warden: "), "{err}");
    assert!(
        err.contains(mentions),
        "{args:?}: {err} should mention {mentions:?}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
}

#[test]
fn bad_usage_exits_64_with_one_line() {
    let s = Sandbox::new();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--key", "k"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "true"]);
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let check = |args: Vec<String>, mentions: &str| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_one_line_error(&s, &refs, 64, mentions);
    };
    check(run(&["--frobnicate"]), "--frobnicate");
    check(run(&["--ttl", "10x"]), "unknown unit \"x\"");
    check(run(&["--ttl", "10"]), "no unit");
    check(run(&["--ttl", "0s"]), "greater than zero");
    check(run(&["--wait", "soon"]), "soon");
    check(run(&["--conflict-exit-code", "256"]), "conflict-exit-code");
    check(
        vec![
            "run".into(),
            "--key".into(),
            "".into(),
            "--".into(),
            "true".into(),
        ],
        "must not be empty",
    );
    check(vec!["run".into(), "--key".into(), "k".into()], "CMD");
    check(vec![], "a command is required");
    check(vec!["lease".into()], "lease");
    check(
        vec![
            "--backend".into(),
            "ftp://x".into(),
            "status".into(),
            "--key".into(),
            "k".into(),
        ],
        "unknown scheme",
    );
    check(
        vec![
            "status".into(),
            "--key".into(),
            "k".into(),
            "--backend".into(),
            "sqlite:".into(),
        ],
        "no path",
    );
}

#[test]
fn an_unreachable_or_unusable_backend_exits_69() {
    let s = Sandbox::new();
    let port = warden_test::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    assert_one_line_error(
        &s,
        &["--backend", &url, "run", "--key", "k", "--", "true"],
        69,
        "unreachable",
    );
    assert_one_line_error(
        &s,
        &["status", "--key", "k", "--backend", &url],
        69,
        "unreachable",
    );
    std::fs::write(s.path("notes.txt"), "not a database\n".repeat(200)).unwrap();
    let text = format!("sqlite:{}", s.path("notes.txt").display());
    assert_one_line_error(
        &s,
        &["--backend", &text, "status", "--key", "k"],
        69,
        "not a SQLite database",
    );
    let missing = format!("sqlite:{}", s.path("no/such/dir/w.db").display());
    assert_one_line_error(
        &s,
        &["--backend", &missing, "status", "--key", "k"],
        69,
        "does not exist",
    );
}

#[test]
fn the_backend_comes_from_the_environment_or_the_default_locations() {
    let s = Sandbox::new();
    let succeeds = |var: &str, value: String, args: &[&str]| {
        let out = output(s.warden().env(var, value).args(args));
        assert!(out.status.success(), "{var}: {}", stderr(&out));
        stdout(&out)
    };
    let run = ["run", "--key", "k", "--", "true"];
    // WARDEN_BACKEND, one URL.
    let db = s.path("env.db");
    succeeds("WARDEN_BACKEND", format!("sqlite:{}", db.display()), &run);
    assert!(db.is_file());
    // --backend wins over WARDEN_BACKEND.
    let db = s.path("flag.db");
    let flag = format!("sqlite:{}", db.display());
    succeeds(
        "WARDEN_BACKEND",
        "ftp://ignored".into(),
        &["--backend", &flag, "status", "--key", "k"],
    );
    assert!(db.is_file());
    // WARDEN_DB names the default database.
    let db = s.path("named.db");
    succeeds("WARDEN_DB", db.display().to_string(), &run);
    assert!(db.is_file());
    // XDG_STATE_HOME is respected, and the directory created.
    let state = s.path("state");
    let printed = succeeds(
        "XDG_STATE_HOME",
        state.display().to_string(),
        &["status", "--key", "k"],
    );
    assert!(state.join("warden/warden.db").is_file());
    assert!(printed.contains("free"), "{printed}");
}
