//! The conventions people bring from `flock(1)`, `etcdctl lock` and `consul
//! lock`: short flags, waiting forever, `-c 'shell command'`, `--json` on
//! `run`, `RUST_LOG`, help with examples, completions and a man page.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Sandbox, hold, output, stderr, stdout};

/// The last line of stderr, parsed as JSON.
fn last_json_line(text: &str) -> serde_json::Value {
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn short_flags_work_as_in_flock() {
    let s = Sandbox::new();
    let release = s.path("release");
    let mut holder = hold(&s, "busy", &release);
    let busy = |extra: &[&str]| {
        output(
            s.tenure()
                .args(["run", "-k", "busy"])
                .args(extra)
                .args(["--", "true"]),
        )
    };
    // -n: no wait (flock --nonblock).
    let out = busy(&["-n"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // -E: the conflict exit code (flock --conflict-exit-code).
    assert_eq!(busy(&["-n", "-E", "1"]).status.code(), Some(1));
    // -w: how long to wait (flock --timeout).
    let start = Instant::now();
    let out = busy(&["-w", "300ms", "-q"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(start.elapsed() >= Duration::from_millis(300));
    // -t: the TTL.
    let out = busy(&["-n", "-t", "0s"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("greater than zero"),
        "{}",
        stderr(&out)
    );
    // -k works on status and limit too.
    let out = output(s.tenure().args(["status", "-k", "busy", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["held"], true, "{json}");
    let out = output(s.tenure().args(["limit", "-k", "l", "--rate", "1/m"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // And on the election commands (nobody leads: 75).
    let out = output(s.tenure().args(["leader", "-k", "e"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let out = output(s.tenure().args([
        "elect",
        "-k",
        "e",
        "-t",
        "3s",
        "--exit-on-loss",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait(Duration::from_secs(10)).code(), Some(0));
}

#[test]
fn wait_inf_waits_until_the_lease_is_free() {
    let s = Sandbox::new();
    let release = s.path("release");
    let mut holder = hold(&s, "k", &release);
    for forever in ["inf", "infinity"] {
        let waiter = s
            .tenure()
            .args(["run", "-k", "k", "-w", forever, "--json", "--", "true"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut waiter = common::Running(waiter);
        // Still waiting, past the default wait of 10 s for `inf` (a shorter
        // look for the synonym), while the lease is held.
        let look = if forever == "inf" { 12_000 } else { 300 };
        std::thread::sleep(Duration::from_millis(look));
        if let Some(status) = waiter.0.try_wait().unwrap() {
            panic!("{forever}: gave up ({status}): {}", waiter.stderr());
        }
        std::fs::write(&release, "").unwrap();
        assert_eq!(holder.wait(Duration::from_secs(10)).code(), Some(0));
        assert_eq!(waiter.wait(Duration::from_secs(10)).code(), Some(0));
        let json = last_json_line(&waiter.stderr());
        assert_eq!(json["outcome"], "exited", "{json}");
        // Counted from when the waiter itself started (after its own start-up),
        // so only the `inf` round's bound is meaningful: beyond the default 10 s.
        let waited = json["waited_ms"].as_u64().unwrap();
        assert!(forever != "inf" || waited > 10_000, "{json}");
        std::fs::remove_file(&release).unwrap();
        holder = hold(&s, "k", &release);
    }
    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait(Duration::from_secs(10)).code(), Some(0));
    // Nothing else reads as forever.
    let out = output(
        s.tenure()
            .args(["run", "-k", "k", "-w", "never", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("inf"),
        "the error names inf: {}",
        stderr(&out)
    );
}

#[test]
fn dash_c_runs_a_shell_command() {
    let s = Sandbox::new();
    let out = output(s.tenure().args([
        "run",
        "-k",
        "sh",
        "-c",
        "echo \"$TENURE_KEY $TENURE_FENCE\" | tr a-z A-Z; exit 4",
    ]));
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let printed = stdout(&out);
    let fence = printed
        .strip_prefix("SH ")
        .and_then(|f| f.strip_suffix('\n'));
    assert!(fence.is_some_and(|f| f.parse::<u64>().is_ok()), "{printed}");
    // /bin/sh itself, as system(3) does: no PATH lookup (cron's PATH is short).
    let out = output(
        s.tenure()
            .env("PATH", "")
            .args(["run", "-k", "sh", "-c", "exit 6"]),
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    // The long form, and after other options.
    let out = output(s.tenure().args(["run", "--command", "exit 5", "-k", "sh"]));
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    // Either -c or `-- CMD`, not both, and not neither.
    for args in [
        vec!["run", "-k", "sh", "-c", "true", "--", "true"],
        vec!["run", "-k", "sh"],
    ] {
        let out = output(s.tenure().args(&args));
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
}

#[test]
fn run_json_reports_the_fence_and_timings_without_touching_stdout() {
    let s = Sandbox::new();
    let out = output(s.tenure().args([
        "run",
        "-k",
        "j",
        "--json",
        "-c",
        "echo out; echo err >&2; sleep 0.2; exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), "out\n", "stdout is the command's alone");
    let err = stderr(&out);
    assert_eq!(err.lines().next(), Some("err"), "{err}");
    let json = last_json_line(&err);
    assert_eq!(json["key"], "j");
    assert_eq!(json["outcome"], "exited");
    assert_eq!(json["acquired"], true);
    let first = json["fence"].as_u64().expect("a whole number");
    assert_eq!(json["command_status"], 3);
    assert_eq!(json["exit_status"], 3);
    assert!(json["held_ms"].as_u64().unwrap() >= 200, "{json}");
    assert!(json["ran_ms"].as_u64().unwrap() >= 200, "{json}");
    assert!(json["waited_ms"].as_u64().is_some(), "{json}");
    let text = json.to_string();
    assert!(!text.contains("owner") && !text.contains("token"), "{text}");

    // --json-file: the report goes to a file, stderr stays the command's.
    let file = s.path("report.json");
    let out = output(
        s.tenure()
            .args(["run", "-k", "j", "--json-file"])
            .arg(&file)
            .args(["-q", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(json["fence"].as_u64().unwrap() > first, "{json}");
    assert_eq!(json["exit_status"], 0, "{json}");

    // Not acquired: a report too, with no fence.
    let release = s.path("release");
    let mut holder = hold(&s, "j", &release);
    let out = output(
        s.tenure()
            .args(["run", "-k", "j", "-n", "--json", "-q", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let json = last_json_line(&stderr(&out));
    assert_eq!(json["outcome"], "not_acquired", "{json}");
    assert_eq!(json["acquired"], false, "{json}");
    assert_eq!(json["fence"], serde_json::Value::Null, "{json}");
    assert_eq!(json["exit_status"], 75, "{json}");
    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait(Duration::from_secs(10)).code(), Some(0));
}

#[test]
fn rust_log_turns_on_logging_as_v_does() {
    let s = Sandbox::new();
    let run = |env: Option<&str>, extra: &[&str]| {
        let mut cmd = s.tenure();
        cmd.env_remove("RUST_LOG");
        if let Some(value) = env {
            cmd.env("RUST_LOG", value);
        }
        output(cmd.args(extra).args(["run", "-k", "log", "--", "true"]))
    };
    let quiet = run(None, &[]);
    assert_eq!(quiet.status.code(), Some(0));
    assert!(stderr(&quiet).is_empty(), "{}", stderr(&quiet));
    let verbose = run(None, &["-v"]);
    assert!(
        stderr(&verbose).contains("lease acquired"),
        "{}",
        stderr(&verbose)
    );
    for value in ["info", "tenure=info", "debug"] {
        let out = run(Some(value), &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("lease acquired"),
            "RUST_LOG={value}: {}",
            stderr(&out)
        );
    }
    // The library's spans: `tenure=debug` shows the lease's acquire and
    // release with their fields.
    let story = stderr(&run(Some("tenure=debug"), &[]));
    for needle in [
        "acquire{key=log",
        "outcome=\"acquired\"",
        "release{key=log",
        "held_ms=",
    ] {
        assert!(story.contains(needle), "{needle}: {story}");
    }
    // RUST_LOG names what to hide, too.
    let off = run(Some("off"), &["-v"]);
    assert!(!stderr(&off).contains("lease acquired"), "{}", stderr(&off));
    // A malformed RUST_LOG is one line, and the command still runs.
    let bad = run(Some("tenure=loud"), &[]);
    assert_eq!(bad.status.code(), Some(0), "{}", stderr(&bad));
    let err = stderr(&bad);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("tenure: ") && err.contains("RUST_LOG"),
        "{err}"
    );
}

#[test]
fn help_shows_examples() {
    let s = Sandbox::new();
    for (args, mentions) in [
        (vec!["--help"], "tenure run nightly"),
        (vec!["-h"], "Exit statuses:"),
        (vec!["help"], "Exit statuses:"),
        (vec!["run", "--help"], "-c '"),
        (vec!["run", "--help"], "--wait inf"),
        (vec!["limit", "--help"], "--rate"),
        (vec!["status", "--help"], "--json"),
        (vec!["elect", "--help"], "tenure elect scheduler"),
        (vec!["leader", "--help"], "tenure leader scheduler"),
        (vec!["once", "--help"], "tenure once"),
        (vec!["completions", "--help"], "tenure completions bash"),
        (vec!["man", "--help"], "tenure man --dir"),
    ] {
        let out = output(s.tenure().args(&args));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = stdout(&out);
        assert!(text.contains("Examples:"), "{args:?}: {text}");
        assert!(
            text.contains(mentions),
            "{args:?} should mention {mentions:?}: {text}"
        );
    }
}

/// The statuses `tenure --help` lists, in order (`the command's`, `128+N`,
/// `0`, …): the first column of its "Exit statuses:" section.
fn statuses_in_help(help: &str) -> Vec<String> {
    let section = help
        .split("Exit statuses:\n")
        .nth(1)
        .expect("an Exit statuses section");
    section
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' '))
        .map(|l| l.split("  ").next().unwrap_or("").trim().to_string())
        .collect()
}

/// The statuses docs/cli.md's exit-status table lists, in order.
fn statuses_in_docs() -> Vec<String> {
    let doc = include_str!("../../../docs/cli.md");
    let section = doc.split("## Exit statuses\n").nth(1).expect("the section");
    section
        .lines()
        .skip_while(|l| !l.starts_with("| status |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap_or("").trim().to_string())
        .collect()
}

#[test]
fn help_man_and_docs_list_the_same_exit_statuses() {
    let s = Sandbox::new();
    let out = output(s.tenure().arg("--help"));
    assert_eq!(out.status.code(), Some(0));
    let help = statuses_in_help(&stdout(&out));
    let docs = statuses_in_docs();
    for expected in [
        "the command's",
        "128+N",
        "0",
        "64",
        "65",
        "69",
        "70",
        "73",
        "75",
        "76",
        "126",
        "127",
    ] {
        assert!(
            help.iter().any(|h| h == expected),
            "--help lacks {expected}: {help:?}"
        );
    }
    assert_eq!(help, docs, "--help and docs/cli.md disagree");
    // The man page's section comes from the same table (roff escapes the
    // apostrophe of "the command's", so that row is looked up by its start).
    let man = stdout(&output(s.tenure().arg("man")));
    let exit_section = man.split("EXIT STATUS").nth(1).expect("EXIT STATUS");
    for status in &help {
        let head = status.split('\'').next().unwrap_or(status);
        assert!(exit_section.contains(head), "man lacks {status}");
    }
}

#[test]
fn completions_are_generated_for_every_shell() {
    let s = Sandbox::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = output(s.tenure().args(["completions", shell]));
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in [
            "tenure",
            "run",
            "limit",
            "status",
            "backend",
            "wait",
            "json-file",
        ] {
            assert!(script.contains(word), "{shell}: no {word:?} in {script}");
        }
    }
    // The bash script is valid bash.
    let out = output(s.tenure().args(["completions", "bash"]));
    let file = s.path("tenure.bash");
    std::fs::write(&file, &out.stdout).unwrap();
    let check = output(std::process::Command::new("bash").arg("-n").arg(&file));
    assert!(check.status.success(), "bash -n: {}", stderr(&check));
    let out = output(s.tenure().args(["completions", "tcsh"]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

#[test]
fn a_man_page_is_generated_from_the_grammar() {
    let s = Sandbox::new();
    let out = output(s.tenure().arg("man"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(page.starts_with(".ie") || page.starts_with(".TH"), "{page}");
    assert!(page.contains(".TH tenure 1"), "{page}");
    for word in [
        "run",
        "limit",
        "status",
        "completions",
        "EXIT STATUS",
        "EXAMPLES",
    ] {
        assert!(page.contains(word), "no {word:?} in {page}");
    }
    // One page per subcommand into a directory, as a packager installs them.
    let dir = s.path("man1");
    let out = output(s.tenure().args(["man", "--dir"]).arg(&dir));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for page in [
        "tenure.1",
        "tenure-run.1",
        "tenure-limit.1",
        "tenure-status.1",
    ] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(text.contains(".TH"), "{page}: {text}");
    }
    let run = std::fs::read_to_string(dir.join("tenure-run.1")).unwrap();
    assert!(run.contains("TENURE_FENCE"), "{run}");
}

#[test]
fn a_missing_subcommand_is_answered_with_all_of_them() {
    let s = Sandbox::new();
    let out = output(&mut s.tenure());
    assert_eq!(out.status.code(), Some(64));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    for name in [
        "run",
        "limit",
        "status",
        "elect",
        "leader",
        "completions",
        "man",
    ] {
        assert!(err.contains(name), "{name} missing: {err}");
    }
}
