//! Bad input gets one line on stderr and the documented exit status.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, assert_one_line_error, output, stderr, stdout};

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
    check(run(&["--ttl", "1m30"]), "no unit");
    check(run(&["--ttl", "0s"]), "greater than zero");
    check(run(&["--wait", "soon"]), "soon");
    check(run(&["--conflict-exit-code", "256"]), "conflict-exit-code");
    // Counts say what they accept, not how Rust's integer parser failed.
    check(
        run(&["--permits", "0"]),
        "a whole number from 1 to 4294967295",
    );
    let limit = |flag: &str, value: &str| -> Vec<String> {
        ["limit", "--rate", "10/1m", flag, value, "k"]
            .iter()
            .map(|a| a.to_string())
            .collect()
    };
    for (flag, value) in [
        ("--cost", "0"),
        ("--burst", "0"),
        ("--refund", "0"),
        ("--refund", "99999999999"),
        ("--cost", "-1"),
    ] {
        check(limit(flag, value), "a whole number from 1 to 4294967295");
    }
    // A negative duration is refused as one, not as an unknown flag.
    check(run(&["--ttl", "-1s"]), "negative");
    check(run(&["--wait", "-1"]), "negative");
    // Below a millisecond, the message shows what was given.
    check(run(&["--ttl", "0.0001"]), "100µs");
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
    let port = tenure_test::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    assert_one_line_error(
        &s,
        &["--backend", &url, "run", "--key", "k", "--", "true"],
        69,
        "unreachable",
    );
    let err = assert_one_line_error(
        &s,
        &["status", "--key", "k", "--backend", &url],
        69,
        "unreachable during connect",
    );
    // The connect is for no key: the message names none.
    assert!(!err.contains("on key"), "{err}");
    // A cluster none of whose seeds answers is unreachable too.
    let cluster = format!("redis+cluster://127.0.0.1:{port}");
    assert_one_line_error(
        &s,
        &["status", "--key", "k", "--backend", &cluster],
        69,
        "unreachable during connect",
    );
    std::fs::write(s.path("notes.txt"), "not a database\n".repeat(200)).unwrap();
    let text = format!("sqlite:{}", s.path("notes.txt").display());
    assert_one_line_error(
        &s,
        &["--backend", &text, "status", "--key", "k"],
        69,
        "not a SQLite database",
    );
    // What the OS refused is named (sysfs refuses new files, even to root).
    assert_one_line_error(
        &s,
        &["--backend", "sqlite:/sys/tenure.db", "status", "--key", "k"],
        69,
        "Permission denied",
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
    // `status` of a free lease answers 75; anything else must succeed.
    let succeeds = |var: &str, value: String, args: &[&str]| {
        let out = output(s.tenure().env(var, value).args(args));
        let expected = if args.contains(&"status") { 75 } else { 0 };
        assert_eq!(out.status.code(), Some(expected), "{var}: {}", stderr(&out));
        stdout(&out)
    };
    let run = ["run", "--key", "k", "--", "true"];
    // TENURE_BACKEND, one URL.
    let db = s.path("env.db");
    succeeds("TENURE_BACKEND", format!("sqlite:{}", db.display()), &run);
    assert!(db.is_file());
    // --backend wins over TENURE_BACKEND.
    let db = s.path("flag.db");
    let flag = format!("sqlite:{}", db.display());
    succeeds(
        "TENURE_BACKEND",
        "ftp://ignored".into(),
        &["--backend", &flag, "status", "--key", "k"],
    );
    assert!(db.is_file());
    // Written after the subcommand, it wins too.
    let db = s.path("after.db");
    let flag = format!("sqlite:{}", db.display());
    succeeds(
        "TENURE_BACKEND",
        "ftp://ignored".into(),
        &["status", "--key", "k", "--backend", &flag],
    );
    assert!(db.is_file());
    // TENURE_DB names the default database.
    let db = s.path("named.db");
    succeeds("TENURE_DB", db.display().to_string(), &run);
    assert!(db.is_file());
    // XDG_STATE_HOME is respected, and the directory created.
    let state = s.path("state");
    let printed = succeeds(
        "XDG_STATE_HOME",
        state.display().to_string(),
        &["status", "--key", "k"],
    );
    assert!(state.join("tenure/tenure.db").is_file());
    assert!(printed.contains("free"), "{printed}");
}

/// Item 6: a TTL without the validity to be renewed (the clock drift margin
/// of 1% + 2 ms may take at most a quarter of it), and a --grace that cannot be honoured before the
/// lease could be granted again, are refused before anything runs.
#[test]
fn impossible_timings_exit_64_before_the_command_runs() {
    let s = Sandbox::new();
    let marker = s.path("ran");
    let touch = format!("touch {}", marker.display());
    for (extra, mentions) in [
        (vec!["--ttl", "1ms"], "drift"),
        (vec!["--ttl", "8ms"], "drift"),
        // Above the library's MIN_TTL, but too short for a command: starting
        // it and a renewal's round trip need more than a twelfth of 10 ms.
        (vec!["--ttl", "10ms"], "at least 100ms"),
        (vec!["--ttl", "99ms"], "at least 100ms"),
        (vec!["--grace", "11s"], "--grace"),
        (vec!["--ttl", "3s", "--grace", "2s"], "--grace"),
    ] {
        let mut args = vec!["run", "--key", "k"];
        args.extend_from_slice(&extra);
        args.extend_from_slice(&["--", "sh", "-c", &touch]);
        assert_one_line_error(&s, &args, 64, mentions);
        assert!(!marker.exists(), "{extra:?}: the command ran");
    }
    // A grace of a third of the TTL is fine, and so is a short TTL without
    // --grace (the default grace shrinks to a third of it).
    for extra in [vec!["--ttl", "3s", "--grace", "1s"], vec!["--ttl", "300ms"]] {
        let out = output(
            s.tenure()
                .args(["run", "--key", "k"])
                .args(&extra)
                .args(["--", "true"]),
        );
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", stderr(&out));
    }
}

/// Item 16: the in-process store coordinates nothing between invocations.
#[test]
fn the_in_process_store_is_refused() {
    let s = Sandbox::new();
    for args in [
        vec!["run", "--key", "k", "--", "true"],
        vec!["limit", "--key", "k", "--rate", "1/s"],
        vec!["status", "--key", "k"],
    ] {
        let mut all = vec!["--backend", "memory:"];
        all.extend_from_slice(&args);
        assert_one_line_error(&s, &all, 64, "memory:");
    }
}

/// Item 14: no output ever shows a password, even one holding `,` `@` `?`,
/// from a flag or from TENURE_BACKEND, in errors, -vvv logs, help or status.
#[test]
fn passwords_never_appear_in_any_output() {
    let s = Sandbox::new();
    let port = tenure_test::free_port();
    let urls = [
        // A comma and an `@` inside the password (one encoded, one not).
        format!("redis://:s3cr%2Cqx@yz9,wq7k@127.0.0.1:{port}"),
        format!("redis://user:s3cr,wq7k@127.0.0.1:{port}/0"),
        format!("redis://:s3cr?wq7k@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}/0?password=s3crwq7k"),
    ];
    let fragments = ["s3cr", "wq7k", "yz9", "%2C"];
    let check = |what: &str, out: &std::process::Output| {
        let all = format!("{}{}", stdout(out), stderr(out));
        for f in fragments {
            assert!(!all.contains(f), "{what}: {f:?} printed: {all}");
        }
    };
    for url in &urls {
        for args in [
            vec!["run", "--key", "k", "--", "true"],
            vec!["-vvv", "run", "--key", "k", "--", "true"],
            vec!["limit", "--key", "k", "--rate", "1/s"],
            vec!["status", "--key", "k", "--json"],
            vec!["run", "--key", "k", "--bogus", "--", "true"],
        ] {
            let flag = output(s.tenure().arg("--backend").arg(url).args(&args));
            assert_ne!(flag.status.code(), Some(0), "{url} {args:?}");
            check(&format!("--backend {url} {args:?}"), &flag);
            let env = output(s.tenure().env("TENURE_BACKEND", url).args(&args));
            assert_ne!(env.status.code(), Some(0), "{url} {args:?}");
            check(&format!("TENURE_BACKEND={url} {args:?}"), &env);
        }
        for help in [
            vec!["--help"],
            vec!["run", "--help"],
            vec!["status", "--help"],
        ] {
            let out = output(s.tenure().env("TENURE_BACKEND", url).args(&help));
            assert_eq!(out.status.code(), Some(0));
            check(&format!("{help:?}"), &out);
        }
    }
}

/// Item 15: the default database is per user: its directory is 0700 and the
/// file 0600 (owner tokens are in it), also when an older tenure left them
/// readable by others.
#[test]
fn the_default_database_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let s = Sandbox::new();
    let out = output(s.tenure().args(["run", "--key", "k", "--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = s.path(".local/state/tenure");
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("tenure.db")), 0o600);
    // The log and the shared memory beside it are tightened too.
    let sides = [dir.join("tenure.db-wal"), dir.join("tenure.db-shm")];
    for side in &sides {
        std::fs::set_permissions(side, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = output(s.tenure().args(["run", "--key", "k", "--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    for side in &sides {
        assert_eq!(mode(side), 0o600, "{}", side.display());
    }

    let state = s.path("xdg");
    let dir = state.join("tenure");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = dir.join("tenure.db");
    std::fs::write(&db, "").unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = output(
        s.tenure()
            .env("XDG_STATE_HOME", &state)
            .args(["run", "--key", "k", "--", "true"]),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&db), 0o600);
}

/// Item 14, on a working store: a Redis that requires a password with `,`, `@`
/// and `?` is used (from a flag and from TENURE_BACKEND), and neither `run`,
/// `status` (human or JSON), `limit` nor the `-vvv` log shows the password.
#[test]
fn a_password_protected_redis_works_and_its_password_is_never_printed() {
    let password = "s3cr,wq7k@zz?q";
    let server = tenure_test::RedisServer::builder()
        .args(["--requirepass", password])
        .start();
    let port = server.port();
    let s = Sandbox::new();
    for url in [
        format!("redis://:s3cr,wq7k%40zz%3Fq@127.0.0.1:{port}"),
        format!("redis://default:s3cr%2Cwq7k%40zz%3Fq@127.0.0.1:{port}/0"),
    ] {
        for args in [
            vec!["-vvv", "run", "--key", "pw", "--", "true"],
            vec!["-vvv", "status", "--key", "pw"],
            vec!["status", "--key", "pw", "--json"],
            vec!["-vvv", "limit", "--key", "pw", "--rate", "100/s"],
        ] {
            for from_env in [false, true] {
                let mut cmd = s.tenure();
                if from_env {
                    cmd.env("TENURE_BACKEND", &url);
                } else {
                    cmd.arg("--backend").arg(&url);
                }
                let out = output(cmd.args(&args));
                let all = format!("{}{}", stdout(&out), stderr(&out));
                // The lease is free again by the time `status` looks: 75.
                let expected = if args.contains(&"status") { 75 } else { 0 };
                assert_eq!(out.status.code(), Some(expected), "{url} {args:?}: {all}");
                for f in ["s3cr", "wq7k", "%2C", "%40", "%3F"] {
                    assert!(!all.contains(f), "{url} {args:?}: {f:?} printed: {all}");
                }
            }
        }
    }
}

/// A `--json-file` that cannot be created is exit 73 before the lease is taken
/// (the command never runs), and so is a `man --dir` that cannot be made.
#[test]
fn files_that_cannot_be_created_exit_73_before_anything_runs() {
    let s = Sandbox::new();
    let marker = s.path("ran");
    let report = s.path("no/such/dir/report.json");
    let touch = format!("touch {}", marker.display());
    let report = report.to_str().unwrap();
    let err = assert_one_line_error(
        &s,
        &[
            "run",
            "--key",
            "k",
            "--json-file",
            report,
            "--",
            "sh",
            "-c",
            &touch,
        ],
        73,
        "--json-file",
    );
    assert!(!marker.exists(), "the command ran: {err}");
    let status = output(s.tenure().args(["status", "--key", "k", "--json"]));
    assert!(
        stdout(&status).contains("\"held\":false"),
        "{}",
        stdout(&status)
    );
    assert!(
        stdout(&status).contains("\"fence\":null"),
        "the lease was taken: {}",
        stdout(&status)
    );
    std::fs::write(s.path("file"), "").unwrap();
    let under_a_file = s.path("file/man");
    assert_one_line_error(
        &s,
        &["man", "--dir", under_a_file.to_str().unwrap()],
        73,
        "",
    );
}
