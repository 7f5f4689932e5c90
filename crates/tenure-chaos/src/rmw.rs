//! The writer run by `tenure run` in the SQLite scenario: one read-modify-write
//! of every resource with `TENURE_FENCE`, recorded in the history.

use std::path::PathBuf;
use std::time::Duration;

use crate::history::{Event, History, Kind, Op};
use crate::resource::Resource;
use crate::run::rt;
use crate::section::Section;

/// The writer's arguments (see the module docs).
#[derive(Debug, Clone)]
pub struct RmwArgs {
    /// The history file (appended).
    pub history: PathBuf,
    /// The resource Redis.
    pub resource: String,
    /// PostgreSQL, if used.
    pub pg: Option<String>,
    /// The spawning slot's client name.
    pub client: String,
    /// The acquisition's id.
    pub lease: String,
    /// Pause between the reads and the writes.
    pub hold: Duration,
    /// Whether fenced resources check the fence.
    pub fence_check: bool,
}

/// Runs the writer (see [`RmwArgs`]).
///
/// # Errors
/// When the history cannot be opened or `TENURE_FENCE` / `TENURE_KEY` are missing.
pub fn rmw(a: &RmwArgs) -> Result<(), String> {
    let h = History::append(&a.history).map_err(|e| e.to_string())?;
    let fence: u64 = std::env::var("TENURE_FENCE")
        .ok()
        .and_then(|f| f.parse().ok())
        .ok_or("TENURE_FENCE missing or not a number")?;
    let key = std::env::var("TENURE_KEY").map_err(|_| "TENURE_KEY missing")?;
    let (me, lease) = (&a.client, &a.lease);
    h.record(
        &Event::new(me, Op::Acquire, Kind::Ok)
            .key(&key)
            .held(fence, lease),
    );
    let section = Section {
        history: &h,
        client: me,
        lease,
        fence,
    };
    rt()?.block_on(async {
        let mut res = resources(a, &h).await;
        let reads = section.read_all(&key, &mut res).await;
        tokio::time::sleep(a.hold).await;
        section.write_all(reads, &mut res).await;
    });
    let mut e = Event::new(me, Op::Release, Kind::Invoke)
        .key(&key)
        .held(fence, lease);
    e.until = Some(e.t);
    h.record(&e);
    Ok(())
}

/// The resources the writer reaches (the fenced Redis one's error recorded).
async fn resources(a: &RmwArgs, h: &History) -> Vec<(String, Resource)> {
    let mut res: Vec<(String, Resource)> = Vec::new();
    match Resource::redis(&a.resource, a.fence_check).await {
        Ok(r) => res.push(("redis".into(), r)),
        Err(e) => h.record(&Event::new(&a.client, Op::Read, Kind::Info).note(e)),
    }
    if let Ok(r) = Resource::redis(&a.resource, false).await {
        res.push(("control".into(), r));
    }
    if let Some(pg) = &a.pg {
        res.push(("pg".into(), Resource::postgres(pg, a.fence_check)));
    }
    res
}
