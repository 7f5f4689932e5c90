//! Writing to stdout and stderr without panicking on a closed pipe.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use tenure::Coordinator;
use tokio::sync::watch;

use crate::{duration, secrets, status};

/// How often the waiting line re-reads who holds the lease.
const HOLDER_REFRESH: Duration = Duration::from_secs(1);

/// Prints a line on stdout; a closed pipe (`tenure status | head -0`) is not an
/// error worth a panic.
pub fn line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{}", secrets::scrub(text));
}

/// Prints `value` as one line of JSON on stdout, secrets scrubbed from its
/// strings only (see [`secrets::scrub_json`]).
pub fn json(value: &serde_json::Value) {
    let text = secrets::scrub_json(value).to_string();
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Prints `tenure: TEXT` on stderr (both without any password from the
/// command line or the environment).
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "tenure: {}", secrets::scrub(text));
}

/// Runs `work` while showing a live "waiting" line on stderr, redrawn every
/// 100 ms, when stderr is a terminal and `show` is set; the line is erased when
/// `work` completes. Nothing is printed otherwise. `wait` is `None` when
/// waiting has no limit. The line names the holder as its lease recorded it,
/// read from `tenure` every second.
pub async fn while_waiting<F: std::future::Future>(
    tenure: &Coordinator,
    key: &str,
    wait: Option<Duration>,
    show: bool,
    work: F,
) -> F::Output {
    if !show || !std::io::stderr().is_terminal() {
        return work.await;
    }
    let (holder_tx, holder) = watch::channel(None);
    let reader = tokio::spawn(read_holder(tenure.clone(), key.to_string(), holder_tx));
    let out = draw_while(key, wait, holder, work).await;
    reader.abort();
    out
}

/// Keeps `tx` at the description of who holds `key` (`None` when nobody or
/// unknown) until aborted.
async fn read_holder(tenure: Coordinator, key: String, tx: watch::Sender<Option<String>>) {
    loop {
        // A failed read keeps the last answer: the line is a hint.
        if let Ok(s) = tenure.status(&key).await {
            tx.send_replace(holder_note(&s));
        }
        tokio::time::sleep(HOLDER_REFRESH).await;
    }
}

/// `web-1 pid 42 "job" for 3s`: the holder, when it recorded itself.
pub fn holder_note(s: &tenure::LeaseStatus) -> Option<String> {
    let h = s.holder.as_ref().filter(|_| s.held)?;
    let since = h
        .held_for
        .map_or_else(String::new, |d| format!(" for {}", duration::show(d)));
    Some(format!("{}{since}", status::describe(h)))
}

async fn draw_while<F: std::future::Future>(
    key: &str,
    wait: Option<Duration>,
    holder: watch::Receiver<Option<String>>,
    work: F,
) -> F::Output {
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tokio::pin!(work);
    let mut line = LiveLine { drawn: false };
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => {
                let waited = start.elapsed();
                // Nothing to show in the first moments: most leases are free.
                if waited >= Duration::from_millis(200) {
                    line.drawn = true;
                    let limit = wait.map_or_else(
                        || "(no limit)".to_string(),
                        |w| format!("of {}", duration::show(w)),
                    );
                    let who = holder
                        .borrow()
                        .as_ref()
                        .map_or_else(String::new, |h| format!("; held by {h}"));
                    let _ = write!(
                        std::io::stderr().lock(),
                        "\r\x1b[2Ktenure: waiting for lease {key:?}: {} {limit}{}",
                        duration::show(waited),
                        secrets::scrub(&who),
                    );
                }
            }
        }
    }
}

/// The live line of a wait: cleared when the wait ends, and also when it is
/// dropped (a signal stopped it), so the shell's prompt starts clean.
struct LiveLine {
    drawn: bool,
}

impl Drop for LiveLine {
    fn drop(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
    }
}
