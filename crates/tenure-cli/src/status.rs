//! `tenure status`: a read-only look at a lease — and the words and JSON fields
//! `tenure list` and the waiting line of `tenure run` share with it.

use tenure::{Holder, LeaseStatus};

use crate::cli::{Global, StatusArgs};
use crate::exit::{self, Failure};
use crate::gates::{self, Gate};
use crate::{duration, output, store};

pub async fn status(global: &Global, args: &StatusArgs) -> Result<u8, Failure> {
    tenure::validate_key(args.key.get())?;
    let tenure = store::connect(global).await?;
    let s = tenure.status(args.key.get()).await?;
    // The key's read-write lease and semaphore, when held or waited for.
    let mut held_gates = Vec::new();
    for gate in Gate::ALL {
        if let Some(g) = gates::status_of(&tenure, args.key.get(), gate).await? {
            held_gates.push((gate, g));
        }
    }
    if args.json {
        let mut json = to_json(args.key.get(), &s);
        for (gate, g) in &held_gates {
            json[gate.field()] = gates::to_json(args.key.get(), *gate, g);
        }
        output::json(&json);
    } else if !global.quiet {
        let state = match (s.held, s.ttl_left) {
            (true, Some(ttl)) => format!("held, {} left", duration::show(ttl)),
            (true, None) => "held, no expiry".to_string(),
            (false, _) => "free".to_string(),
        };
        let fence = s
            .fence
            .map_or_else(|| "none (never acquired)".to_string(), |f| f.to_string());
        output::line(&format!("key      {}", args.key.get()));
        output::line(&format!("state    {state}"));
        if s.held {
            let holder = s
                .holder
                .as_ref()
                .map_or_else(|| "not recorded".to_string(), describe);
            let held_for = s
                .holder
                .as_ref()
                .and_then(|h| h.held_for)
                .map_or_else(|| "unknown".to_string(), duration::show);
            output::line(&format!("holder   {holder}"));
            output::line(&format!("held for {held_for}"));
        }
        let waiting = s
            .waiters
            .map_or_else(|| "unknown".to_string(), |n| n.to_string());
        output::line(&format!("fence    {fence}"));
        output::line(&format!("waiting  {waiting}"));
        output::line(&format!("storage  {}", s.storage_key));
        output::line(&format!("backend  {}", tenure.backend().describe()));
        for (gate, g) in &held_gates {
            for line in gates::lines(*gate, g) {
                output::line(&line);
            }
        }
    }
    // Scripts branch on it as on `leader`: 0 held (the lease, a reader or
    // writer, a permit), 75 free.
    let gate_held = held_gates.iter().any(|(_, g)| !g.holders.is_empty());
    Ok(if s.held || gate_held {
        0
    } else {
        exit::NOT_ACQUIRED
    })
}

/// The JSON of one lease: `key`, `held`, `ttl_ms`, `fence`, `storage_key`,
/// `holder` (`{"host","pid","label","held_ms"}`, null when free or not
/// recorded) and `waiters` (null when the store cannot tell).
pub fn to_json(key: &str, s: &LeaseStatus) -> serde_json::Value {
    let holder = s.holder.as_ref().map(|h| {
        serde_json::json!({
            "host": h.host,
            "pid": h.pid,
            "label": h.label,
            "held_ms": h.held_for.map(duration::millis),
        })
    });
    serde_json::json!({
        "key": key,
        "held": s.held,
        "ttl_ms": s.ttl_left.map(duration::millis),
        "fence": s.fence.map(|f| f.get()),
        "storage_key": s.storage_key,
        "holder": holder,
        "waiters": s.waiters,
    })
}

/// A holder in words: `web-1 pid 4242 "POST /orders/42"`. (Another client
/// may have written anything into the store: control characters are shown
/// escaped, never sent to the terminal.)
pub fn describe(h: &Holder) -> String {
    let host: String = h.host.escape_debug().collect();
    match &h.label {
        Some(label) => format!("{host} pid {} {label:?}", h.pid),
        None => format!("{host} pid {}", h.pid),
    }
}
