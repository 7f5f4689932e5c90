//! The final checks, once every client stopped: lease keys still held after
//! TTL + ε (orphans), and the final value of every resource.

use std::time::Duration;

use tenure_test::PostgresServer;

use super::{Settings, rt};
use crate::history::{Event, History, Kind, Op};
use crate::resource::Resource;
use crate::store::StoreSpec;

/// Waits TTL + ε, then records orphan keys and final values in `history`.
///
/// # Errors
/// When no runtime can be built.
pub(super) fn record(
    s: &Settings,
    store: &StoreSpec,
    keys: &[String],
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

/// Records each of `keys` still held (or that could not be asked about).
async fn orphans(store: &StoreSpec, keys: &[String], history: &History) {
    let w = match store.connect().await {
        Ok(w) => w,
        Err(e) => {
            history.record(&Event::new("checker", Op::Orphan, Kind::Info).note(e.to_string()));
            return;
        }
    };
    for k in keys {
        match w.status(k).await {
            Ok(st) if st.held => history.record(
                &Event::new("checker", Op::Orphan, Kind::Ok)
                    .key(k)
                    .note(format!("{:?}", st.ttl_left)),
            ),
            Ok(_) => {}
            Err(e) => history.record(
                &Event::new("checker", Op::Orphan, Kind::Info)
                    .key(k)
                    .note(e.to_string()),
            ),
        }
    }
}

/// Records the final value of every resource of `keys`.
async fn finals(
    resource_url: &str,
    fence_check: bool,
    pg: Option<&PostgresServer>,
    keys: &[String],
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
    for k in keys {
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
