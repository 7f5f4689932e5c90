//! Scrubbing passwords never corrupts tenure's own JSON: a password made of
//! JSON words and field names (`prod:true:key`) is kept out of the output,
//! and every `--json` line still parses with its fields intact.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, output, stderr, stdout};

#[test]
fn json_output_stays_valid_whatever_the_password() {
    let server = tenure_test::RedisServer::builder()
        .args(["--requirepass", "prod:true:key"])
        .start();
    let url = format!("redis://:prod%3Atrue%3Akey@127.0.0.1:{}", server.port());
    let sandbox = Sandbox::new();
    let json_file = sandbox.path("report.json");
    let runs: [(&[&str], &str); 5] = [
        (&["status", "--key", "k", "--json"], "held"),
        (&["leader", "--key", "k", "--json"], "key"),
        (
            &["limit", "--key", "k", "--rate", "10/s", "--json"],
            "allowed",
        ),
        (
            &[
                "run",
                "--key",
                "k",
                "--json-file",
                json_file.to_str().unwrap(),
                "--",
                "true",
            ],
            "",
        ),
        (&["list", "--json"], ""),
    ];
    for (args, field) in runs {
        // `list` has something to list while this runs.
        let out = output(sandbox.tenure().args(["--backend", &url]).args(args));
        assert!(
            matches!(out.status.code(), Some(0 | 75)),
            "{args:?}: {}",
            stderr(&out)
        );
        for line in stdout(&out).lines() {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {line}"));
            if !field.is_empty() {
                assert!(value.get(field).is_some(), "{args:?}: no {field:?}: {line}");
            }
        }
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            !all.contains("prod:true"),
            "{args:?}: password printed: {all}"
        );
    }
    let report = std::fs::read_to_string(&json_file).unwrap();
    let value: serde_json::Value = serde_json::from_str(report.trim())
        .unwrap_or_else(|e| panic!("--json-file: not JSON ({e}): {report}"));
    assert_eq!(value["key"], "k", "{report}");
    assert_eq!(value["acquired"], true, "{report}");
}
