//! redis-py's asyncio `Lock`, run as a child process (`peers/redis_py_lock.py`)
//! by the interpreter of the venv `scripts/bench` installs it into.

use std::collections::HashMap;
use std::path::PathBuf;

/// The interpreter and the peer script.
pub struct Python {
    exe: PathBuf,
    script: PathBuf,
}

impl Python {
    /// The interpreter named by `TENURE_BENCH_PYTHON`, when set: without it
    /// the redis-py columns are left out (`scripts/bench` always sets it).
    pub fn from_env() -> Option<Self> {
        let exe = std::env::var_os("TENURE_BENCH_PYTHON")?;
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/redis_py_lock.py");
        Some(Python {
            exe: exe.into(),
            script,
        })
    }

    /// Runs one mode of the peer script and returns its numbers.
    pub async fn run(&self, args: &[&str]) -> HashMap<String, f64> {
        let out = tokio::process::Command::new(&self.exe)
            .arg(&self.script)
            .args(args)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "redis-py peer {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}
