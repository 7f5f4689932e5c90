//! What the fault-suite tests share: the seed, where a run keeps its
//! history, and keeping it only when the run failed.

use std::path::PathBuf;

use tenure_chaos::run::RunResult;

/// `TENURE_CHAOS_SEED`, or `default` when it is unset or not a number.
pub fn seed(default: u64) -> u64 {
    std::env::var("TENURE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Each test its own directory: tests run at once, with the same seed.
pub fn out_dir(test: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("chaos")
        .join(test)
}

/// Keeps the history of a failed run (and says where); removes it otherwise.
pub fn keep_if(failed: bool, r: &RunResult, seed: u64) {
    if failed {
        eprintln!(
            "seed {seed}: history kept at {} (replay: TENURE_CHAOS_SEED={seed})\n{:#?}",
            r.history.display(),
            r.report
        );
    } else {
        let _ = std::fs::remove_file(&r.history);
    }
}
