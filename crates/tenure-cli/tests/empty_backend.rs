//! An explicitly empty `--backend` (an unset variable: `--backend "$REDIS_URL"`)
//! is a usage error, never a silent fall-back to this user's SQLite file.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, assert_one_line_error, output};

#[test]
fn an_empty_backend_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let ran = sandbox.path("ran");
    let touch = format!("touch {}", ran.display());
    for value in ["", " ", ","] {
        assert_one_line_error(
            &sandbox,
            &["--backend", value, "status", "--key", "k"],
            64,
            "--backend",
        );
        let out = output(sandbox.tenure().args([
            "--backend",
            value,
            "run",
            "--key",
            "k",
            "--",
            "sh",
            "-c",
            &touch,
        ]));
        assert_eq!(out.status.code(), Some(64), "{value:?}");
        assert!(
            !ran.exists(),
            "{value:?}: the command ran on a fall-back store"
        );
        let from_env = output(
            sandbox
                .tenure()
                .env("TENURE_BACKEND", value)
                .args(["status", "--key", "k"]),
        );
        assert_eq!(from_env.status.code(), Some(64), "TENURE_BACKEND={value:?}");
    }
    assert!(!sandbox.path(".local/state/tenure/tenure.db").exists());
}
