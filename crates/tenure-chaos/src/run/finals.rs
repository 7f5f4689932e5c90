//! The final checks, once every client stopped: lease keys still held after
//! TTL + ε (orphans), and the final value of every resource.

use std::time::Duration;

use tenure_test::PostgresServer;

use super::{Settings, rt};
use crate::history::{Event, History, Kind, Op};
use crate::resource::Resource;
use crate::store::StoreSpec;

/// The keys a run's clients acquired.
pub(super) struct Keys {
    /// Lease keys (`k0..`), with PostgreSQL rows when the run has them.
    pub(super) leases: Vec<String>,
    /// Keys of lease sets (`m0..`).
    pub(super) sets: Vec<String>,
    /// Read-write lease keys (`rw0..`).
    pub(super) rw: Vec<String>,
}

impl Keys {
    /// Every key whose resources were written.
    fn all(&self) -> impl Iterator<Item = &String> {
        self.leases.iter().chain(&self.sets).chain(&self.rw)
    }
}

/// Waits TTL + ε, then records orphan keys and final values in `history`.
///
/// # Errors
/// When no runtime can be built.
pub(super) fn record(
    s: &Settings,
    store: &StoreSpec,
    keys: &Keys,
    resource_url: &str,
    pg: Option<&PostgresServer>,
    history: &History,
) -> Result<(), String> {
    // Every client stopped: after TTL + ε no lease key may still be held.
    let epsilon = Duration::from_millis(500);
    std::thread::sleep(s.ttl + epsilon);
    rt()?.block_on(async {
        orphans(store, keys, history).await;
        finals(resource_url, s.fence_check, pg, keys, history).await;
    });
    Ok(())
}

/// Records each of `keys` still held (or that could not be asked about): a
/// lease or a read-write lease with any holder.
async fn orphans(store: &StoreSpec, keys: &Keys, history: &History) {
    let w = match store.connect().await {
        Ok(w) => w,
        Err(e) => {
            history.record(&Event::new("checker", Op::Orphan, Kind::Info).note(e.to_string()));
            return;
        }
    };
    for k in keys.leases.iter().chain(&keys.sets) {
        let held = w
            .status(k)
            .await
            .map(|st| st.held.then(|| format!("{:?}", st.ttl_left)));
        record_orphan(history, k, held);
    }
    for k in &keys.rw {
        let held = match w.rw_lease(k) {
            Ok(rw) => rw.status().await.map(|st| {
                (!st.holders.is_empty()).then(|| format!("{} holders", st.holders.len()))
            }),
            Err(e) => Err(e),
        };
        record_orphan(history, k, held);
    }
}

/// Records `key` as an orphan when it is still held (`Some`: how), or as
/// unknown when the store could not say.
fn record_orphan(history: &History, key: &str, held: tenure::Result<Option<String>>) {
    let e = Event::new("checker", Op::Orphan, Kind::Ok).key(key);
    match held {
        Ok(Some(how)) => history.record(&e.note(how)),
        Ok(None) => {}
        Err(err) => history.record(
            &Event {
                kind: Kind::Info,
                ..e
            }
            .note(err.to_string()),
        ),
    }
}

/// Records the final value of every resource of `keys`.
async fn finals(
    resource_url: &str,
    fence_check: bool,
    pg: Option<&PostgresServer>,
    keys: &Keys,
    history: &History,
) {
    let mut res: Vec<(String, Resource)> = Vec::new();
    if let Ok(r) = Resource::redis(resource_url, fence_check).await {
        res.push(("redis".into(), r));
    }
    if let Ok(r) = Resource::redis(resource_url, false).await {
        res.push(("control".into(), r));
    }
    if let Some(pg) = pg {
        res.push(("pg".into(), Resource::postgres(&pg.url(), true)));
    }
    for k in keys.all() {
        for (kind, r) in &mut res {
            let name = format!("{k}/{kind}");
            if let Ok(v) = r.read(&name).await {
                history.record(
                    &Event::new("checker", Op::Final, Kind::Ok)
                        .key(&name)
                        .value(v),
                );
            }
        }
    }
}
