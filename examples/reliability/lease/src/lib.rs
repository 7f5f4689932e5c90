//! The stale-holder scenario: a lease holder pauses past its TTL and writes late.
//!
//! ```text
//! t=0      A acquires "account:1" with a short TTL, checks it still holds it
//! t=0+     A pauses (GC, swap, SIGSTOP…) right after the check
//! t>TTL    the lease expires; B acquires (a larger fence) and writes 200
//! later    A wakes up and writes 100 with its old fence
//! ```
//!
//! Against a fenced resource A's write is rejected and B's work survives. Against
//! an unfenced resource the same sequence silently loses B's work. A's check
//! before the pause cannot help: the pause falls between check and write.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use tenure::fence::FencedWrite;
use tenure::{Coordinator, Fence};

/// The lease TTL of the scenario.
pub const TTL: Duration = Duration::from_millis(300);

/// What happened in one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Human-readable timeline, one line per event.
    pub timeline: Vec<String>,
    /// A's fence and B's fence.
    pub fences: (Fence, Fence),
    /// Whether A's late write was applied.
    pub stale_write_applied: bool,
    /// The resource's value at the end.
    pub final_value: String,
}

/// Where the two holders write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A Redis value written with a fencing check ([`RedisFencedStore`](tenure::redis::RedisFencedStore)).
    Fenced,
    /// A plain Redis `SET`: last writer wins.
    Unfenced,
}

struct Timeline {
    start: Instant,
    lines: Vec<String>,
}

impl Timeline {
    fn note(&mut self, who: &str, what: impl AsRef<str>) {
        let ms = self.start.elapsed().as_millis();
        self.lines
            .push(format!("t={ms:>4}ms  {who}  {}", what.as_ref()));
    }
}

/// Any failure of the scenario's infrastructure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the scenario against the Redis server at `url`.
pub async fn run(url: &str, resource: Resource) -> Result<Outcome, BoxError> {
    let tenure = Coordinator::connect(url).await?;
    let store = tenure.fenced_store()?;
    let mut plain = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let name = match resource {
        Resource::Fenced => "account:1:fenced",
        Resource::Unfenced => "account:1:plain",
    };
    let write = |fence: Fence, value: &'static str| {
        let store = store.clone();
        let mut plain = plain.clone();
        async move {
            match resource {
                Resource::Fenced => Ok(store.write(name, fence, value).await?),
                Resource::Unfenced => {
                    let _: () =
                        plain
                            .set(name, value)
                            .await
                            .map_err(|e| tenure::Error::Backend {
                                backend: "redis".into(),
                                op: "plain set",
                                key: name.into(),
                                cause: Box::new(e),
                            })?;
                    Ok::<_, tenure::Error>(FencedWrite::Applied)
                }
            }
        }
    };
    let mut t = Timeline {
        start: Instant::now(),
        lines: Vec::new(),
    };
    // No renewal: a real pause (GC, SIGSTOP) would stop the renewal task too.
    let lease = tenure.lease(name).ttl(TTL).watchdog(false);

    let a = lease
        .try_acquire()
        .await?
        .ok_or("the scenario's key was already held")?;
    t.note("A", format!("acquires, fence {}, TTL {TTL:?}", a.fence()));
    t.note(
        "A",
        format!("checks: lost = {} — all good, about to write", a.is_lost()),
    );
    t.note("A", "pauses (GC, swap, SIGSTOP…)");
    tokio::time::sleep(TTL * 2).await;

    let b = lease
        .try_acquire()
        .await?
        .ok_or("B could not acquire after A's TTL")?;
    t.note(
        "B",
        format!("acquires after A's TTL ran out, fence {}", b.fence()),
    );
    let _ = write(b.fence(), "200 (B)").await?;
    t.note("B", "writes 200");

    t.note(
        "A",
        format!("wakes up (lost signal: {}) and writes 100", a.is_lost()),
    );
    let applied = write(a.fence(), "100 (A, stale)").await?;
    let stale_write_applied = applied == FencedWrite::Applied;
    match applied {
        FencedWrite::Applied => t.note("A", "write APPLIED: B's work is lost"),
        FencedWrite::Rejected { current } => t.note(
            "A",
            format!("write REJECTED: fence {} < {current}", a.fence()),
        ),
        _ => t.note("A", "write: unexpected outcome"),
    }
    let final_value = match resource {
        Resource::Fenced => store
            .read(name)
            .await?
            .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default(),
        Resource::Unfenced => plain.get(name).await?,
    };
    t.note("--", format!("final value: {final_value}"));
    let fences = (a.fence(), b.fence());
    let _ = a.release().await?;
    let _ = b.release().await?;
    Ok(Outcome {
        timeline: t.lines,
        fences,
        stale_write_applied,
        final_value,
    })
}
