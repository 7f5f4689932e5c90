//! The SQLite scenario's clients: slots of `tenure run` processes, each one
//! running the `rmw` writer under a lease, started one after the other.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_test::FakeClock;
use tenure_test::nemesis::Rng;

use super::nemesis::LiveProc;
use crate::history::{Event, History, Kind, Op};
use crate::store::StoreSpec;

/// One slot of `tenure run` processes, started one after the other.
pub(super) struct ProcCtx {
    pub(super) slot: usize,
    pub(super) tenure: PathBuf,
    pub(super) me: PathBuf,
    pub(super) store: StoreSpec,
    pub(super) resource_url: String,
    pub(super) pg_url: Option<String>,
    pub(super) history_path: PathBuf,
    pub(super) history: History,
    pub(super) keys: u64,
    pub(super) ttl: Duration,
    pub(super) fence_check: bool,
    pub(super) procs: Arc<Mutex<Vec<Option<LiveProc>>>>,
    pub(super) clock: Option<FakeClock>,
    pub(super) stop: Arc<AtomicBool>,
}

/// Runs slot `c.slot` until the run stops.
pub(super) fn proc_slot(c: &ProcCtx, rng: &mut Rng) {
    let StoreSpec::Url(url) = &c.store else {
        return;
    };
    let me = format!("s{}", c.slot);
    let mut n = 0u64;
    while !c.stop.load(Ordering::SeqCst) {
        n += 1;
        let key = format!("k{}", rng.below(c.keys));
        let ttl_ms = c.ttl.as_millis();
        let hold_ms = rng.below(u64::try_from(ttl_ms / 4).unwrap_or(1));
        let mut cmd = c.command(url, &key, &format!("{me}-{n}"), hold_ms);
        c.history
            .record(&Event::new(&me, Op::Acquire, Kind::Invoke).key(&key));
        let mut child = match cmd.spawn() {
            Ok(ch) => ch,
            Err(e) => {
                c.history.record(
                    &Event::new(&me, Op::Acquire, Kind::Info)
                        .key(&key)
                        .note(e.to_string()),
                );
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let live = LiveProc {
            pid: child.id(),
            key: key.clone(),
            since: Instant::now(),
        };
        set_slot(&c.procs, c.slot, Some(live));
        let status = child.wait();
        set_slot(&c.procs, c.slot, None);
        c.record_exit(&me, &key, status);
    }
}

impl ProcCtx {
    /// `tenure run` on `key` of store `url`, running the writer as `lease`.
    fn command(&self, url: &str, key: &str, lease: &str, hold_ms: u64) -> Command {
        let me = format!("s{}", self.slot);
        let ttl_ms = self.ttl.as_millis();
        let mut cmd = Command::new(&self.tenure);
        cmd.args(["--backend", url, "run", "--key", key])
            .args([
                "--ttl",
                &format!("{ttl_ms}ms"),
                "--wait",
                &format!("{ttl_ms}ms"),
            ])
            .args(["--grace", &format!("{}ms", ttl_ms / 4)])
            .arg("--")
            // The writer must not run on the jumped clock: the history's clock is its own.
            .args(["env", "-u", "LD_PRELOAD"])
            .arg(&self.me)
            .args(["rmw", "--history"])
            .arg(&self.history_path)
            .args(["--resource", &self.resource_url, "--client", &me])
            .args(["--lease", lease, "--hold-ms", &hold_ms.to_string()]);
        if let Some(pg) = &self.pg_url {
            cmd.args(["--pg", pg]);
        }
        if !self.fence_check {
            cmd.arg("--no-fence-check");
        }
        if let Some(clock) = &self.clock {
            clock.apply(&mut cmd);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// Records how the process ended: 0 (the writer recorded the rest), 75
    /// (the key was held: refused) or else an unknown outcome.
    fn record_exit(&self, me: &str, key: &str, status: std::io::Result<ExitStatus>) {
        let event = match status.map(|s| s.code()) {
            Ok(Some(0)) => return,
            Ok(Some(75)) => Event::new(me, Op::Acquire, Kind::Fail),
            Ok(code) => Event::new(me, Op::Acquire, Kind::Info).note(format!("exit {code:?}")),
            Err(e) => Event::new(me, Op::Acquire, Kind::Info).note(e.to_string()),
        };
        self.history.record(&event.key(key));
    }
}

fn set_slot(procs: &Mutex<Vec<Option<LiveProc>>>, slot: usize, live: Option<LiveProc>) {
    let mut p = procs.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = p.get_mut(slot) {
        *s = live;
    }
}
