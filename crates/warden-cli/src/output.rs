//! Writing to stdout and stderr without panicking on a closed pipe.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::{duration, secrets};

/// Prints a line on stdout; a closed pipe (`warden status | head -0`) is not an
/// error worth a panic.
pub fn line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{}", secrets::scrub(text));
}

/// Prints `warden: TEXT` on stderr (both without any password from the
/// command line or the environment).
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "warden: {}", secrets::scrub(text));
}

/// Runs `work` while showing a live "waiting" line on stderr, redrawn every
/// 100 ms, when stderr is a terminal and `show` is set; the line is erased when
/// `work` completes. Nothing is printed otherwise. `wait` is `None` when
/// waiting has no limit.
pub async fn while_waiting<F: std::future::Future>(
    key: &str,
    wait: Option<Duration>,
    show: bool,
    work: F,
) -> F::Output {
    if !show || !std::io::stderr().is_terminal() {
        return work.await;
    }
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tokio::pin!(work);
    let mut drawn = false;
    let out = loop {
        tokio::select! {
            out = &mut work => break out,
            _ = tick.tick() => {
                let waited = start.elapsed();
                // Nothing to show in the first moments: most leases are free.
                if waited >= Duration::from_millis(200) {
                    drawn = true;
                    let limit = wait.map_or_else(
                        || "(no limit)".to_string(),
                        |w| format!("of {}", duration::show(w)),
                    );
                    let _ = write!(
                        std::io::stderr().lock(),
                        "\r\x1b[2Kwarden: waiting for lease {key:?}: {} {limit}",
                        duration::show(waited),
                    );
                }
            }
        }
    };
    if drawn {
        let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
    }
    out
}
