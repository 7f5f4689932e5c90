//! The waiting line of a lease in the SQLite file: table `tenure_waiters`,
//! one row per waiter, ordered by its rowid (a new row's rowid is above every
//! row in the table, so the order is the order of arrival). A release hands
//! the lease to the first live waiter and wakes only it (see the `notify`
//! module), so a contended lease changes hands in FIFO order.
//!
//! Each place carries the waiter's token, the TTL it asked for and an expiry
//! on the store clock that the waiter's looks (its heartbeat, every 250 ms)
//! push forward — in one transaction per process for all its waiters while
//! they look (the `keeper` module): a waiter that disappears without leaving
//! the line (killed) is skipped once its place has gone a second without a
//! refresh. A
//! lease handed to a waiter is set for it for half a second only, until its
//! look claims the full TTL, so a waiter that died just before the hand-off
//! holds up the line no longer than that. Serving a line reads it only up
//! to its first live place and deletes the dead places before it, so a
//! hand-off costs the same however many wait behind.
//!
//! The same semantics as the Redis line (`redis/queue.rs`); FIFO does not
//! cover a lease whose TTL ran out (a newcomer's plain acquire may take the
//! free key first) or a waiter whose look failed (it stands in line again).

use rusqlite::{Connection, params};

use super::Fault;
use super::clock::HostTime;
use super::lease::{Row, grant, next_fence, read_row};
use super::notify::RowState;
use crate::lease::{AcquireReply, CLAIM_WINDOW, HolderInfo, PLACE_LIFETIME};

/// The first live waiter of a line.
pub(super) struct Waiter {
    seq: i64,
    token: String,
    ttl_ms: i64,
}

/// What one look of a waiter did.
pub(super) struct Look {
    pub(super) reply: Result<i64, Option<std::time::Duration>>,
    /// The waiter's place (its rowid) while it waits.
    pub(super) place: Option<i64>,
    /// The lease's new state, when the look changed it.
    pub(super) changed: Option<RowState>,
}

/// Returns the first live place of `key`'s line, deleting the dead places
/// before it.
///
/// Reads the line in order and stops at that place, so serving a line costs
/// a row per dead place at its front and one more, however many wait behind
/// (the index `(key, seq)` gives the order). Dead places further back are
/// deleted when they reach the front. The delete runs only when the front
/// had dead places: the usual line is empty, and a cold start pays for every
/// statement compiled.
fn first_waiter(tx: &Connection, key: &str, now: &HostTime) -> rusqlite::Result<Option<Waiter>> {
    let mut select = tx.prepare_cached(
        "SELECT seq, token, ttl_ms, boot_id, expires_at_ms FROM tenure_waiters
         WHERE key = ?1 ORDER BY seq",
    )?;
    let mut rows = select.query([key])?;
    let (mut first, mut dead) = (None, false);
    while let Some(r) = rows.next()? {
        let (boot, expires_at_ms): (String, i64) = (r.get(3)?, r.get(4)?);
        if boot == *now.boot && expires_at_ms > now.ms() {
            first = Some(Waiter {
                seq: r.get(0)?,
                token: r.get(1)?,
                ttl_ms: r.get(2)?,
            });
            break;
        }
        dead = true;
    }
    drop(rows);
    if dead {
        // Every place read before the first live one (the whole line when
        // none is) was dead.
        let before = first.as_ref().map_or(i64::MAX, |w| w.seq);
        tx.prepare_cached("DELETE FROM tenure_waiters WHERE key = ?1 AND seq < ?2")?
            .execute(params![key, before])?;
    }
    Ok(first)
}

/// Removes every place of `token` in `key`'s line: a waiter leaving, which
/// may have places it never learnt of (a look it gave up on). Found through
/// [`TOKEN_INDEX`], not by reading the line: when a whole line gives up at
/// once (a deadline they share), each leave costs the same.
pub(super) const REMOVE_PLACES: &str = "DELETE FROM tenure_waiters WHERE key = ?1 AND token = ?2";

/// Runs [`REMOVE_PLACES`].
fn remove_place(tx: &Connection, key: &str, token: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(REMOVE_PLACES)?.execute([key, token])?;
    Ok(())
}

/// The index of places by key and token, for [`REMOVE_PLACES`]. It is not
/// among the tables a file gets when opened: the first waiter to join a line
/// creates it (in a file of an earlier version too), so a process that never
/// waits (a cold `tenure run`) compiles nothing more. Once it exists the
/// statement does nothing.
pub(super) const TOKEN_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS tenure_waiters_token ON tenure_waiters (key, token)";

/// Removes the place `seq` if it is `token`'s, by the line's primary key:
/// what a waiter that takes the lease does with the place it knows. A place
/// of its token it does not know (a look it gave up on) is removed by that
/// look's undo, which leaves the line; failing that, it lapses within
/// [`PLACE_LIFETIME`], as a dead waiter's does.
fn remove_known_place(tx: &Connection, seq: i64, token: &str) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM tenure_waiters WHERE seq = ?1 AND token = ?2")?
        .execute(params![seq, token])?;
    Ok(())
}

/// How long a lease handed to `waiter` is set for it until it claims it.
fn claim_ms(waiter: &Waiter) -> i64 {
    waiter.ttl_ms.min(crate::duration::millis_i64(CLAIM_WINDOW))
}

/// Hands the lease of `key` (whose last fence is `last`) to `waiter`: a fresh
/// fence, its token for the claim window (the waiter's look claims the full
/// TTL, so a lease handed to a waiter that died is free again soon), its
/// place removed. With the fence counter
/// exhausted nothing is handed over: the waiter meets the error when it
/// takes the lease itself.
fn hand_off(
    tx: &Connection,
    key: &str,
    last: i64,
    waiter: &Waiter,
    now: &HostTime,
) -> Result<Option<RowState>, Fault> {
    let Ok(fence) = next_fence(last) else {
        return Ok(None);
    };
    grant(tx, key, fence, &waiter.token, claim_ms(waiter), None, now)?;
    tx.prepare_cached("DELETE FROM tenure_waiters WHERE seq = ?1")?
        .execute([waiter.seq])?;
    Ok(Some(Some((fence, Some(waiter.token.clone())))))
}

/// The lease of `key` (ours, or free), whose row is `row`, goes to the first
/// live waiter in line, or is cleared when nobody waits. Returns the row's
/// new state.
pub(super) fn release_to_next(
    tx: &Connection,
    key: &str,
    row: &Row,
    now: &HostTime,
) -> Result<RowState, Fault> {
    if let Some(waiter) = first_waiter(tx, key, now)?
        && let Some(state) = hand_off(tx, key, row.fence, &waiter, now)?
    {
        return Ok(state);
    }
    tx.prepare_cached(
        "UPDATE tenure_leases
         SET token = NULL, boot_id = NULL, expires_at_ms = NULL, ttl_ms = NULL,
           holder_host = NULL, holder_pid = NULL, holder_label = NULL, acquired_at_ms = NULL
         WHERE key = ?1",
    )?
    .execute([key])?;
    Ok(Some((row.fence, None)))
}

/// The waiter's request of one look.
pub(super) struct Request<'a> {
    pub(super) key: &'a str,
    pub(super) token: &'a str,
    pub(super) ttl_ms: i64,
    pub(super) holder: Option<&'a HolderInfo>,
    pub(super) place: Option<i64>,
}

/// One look by a waiter in line (see `LeaseStore::wait_turn`): takes the
/// lease when it was handed to the waiter or is free with the waiter first
/// in line; otherwise keeps (or takes) its place.
pub(super) fn look(tx: &Connection, req: &Request<'_>, now: &HostTime) -> Result<Look, Fault> {
    let row = read_row(tx, req.key)?;
    let held = row.as_ref().and_then(|r| r.held_for(now));
    let mut changed = None;
    let mut ttl_left = held;
    match &row {
        // Handed over: claimed, so the holder counts its validity from now.
        Some(r) if held.is_some() && r.token.as_deref() == Some(req.token) => {
            grant(tx, req.key, r.fence, req.token, req.ttl_ms, req.holder, now)?;
            // The hand-off removed the place it handed over from; the one
            // this waiter knows goes too, without reading the whole line
            // (every hand-off comes here).
            if let Some(seq) = req.place {
                remove_known_place(tx, seq, req.token)?;
            }
            return Ok(granted(r.fence, None));
        }
        Some(_) if held.is_some() => {}
        // Free (released by an older version, or its TTL ran out): the first
        // live waiter gets it.
        _ => {
            let last = row.as_ref().map_or(0, |r| r.fence);
            match first_waiter(tx, req.key, now)? {
                Some(w) if w.token != req.token => {
                    changed = hand_off(tx, req.key, last, &w, now)?;
                    ttl_left = Some(claim_for(&w));
                }
                first => {
                    let fence = next_fence(last)?;
                    grant(tx, req.key, fence, req.token, req.ttl_ms, req.holder, now)?;
                    // The waiter first in line: the place it took the lease
                    // from goes, and the one it knows when that is another.
                    // (An empty line holds no place of the waiter's either.)
                    if let Some(w) = first {
                        remove_known_place(tx, w.seq, req.token)?;
                        if let Some(seq) = req.place.filter(|&seq| seq != w.seq) {
                            remove_known_place(tx, seq, req.token)?;
                        }
                    }
                    return Ok(granted(fence, Some(Some((fence, Some(req.token.into()))))));
                }
            }
        }
    }
    let place = keep_place(tx, req, now)?;
    Ok(Look {
        reply: Err(ttl_left),
        place: Some(place),
        changed,
    })
}

fn granted(fence: i64, changed: Option<RowState>) -> Look {
    Look {
        reply: Ok(fence),
        place: None,
        changed,
    }
}

/// The expiry of a place refreshed `now`.
fn place_expiry(now: &HostTime) -> i64 {
    now.ms()
        .saturating_add(crate::duration::millis_i64(PLACE_LIFETIME))
}

/// Refreshes the waiter's place (`req.place`, when it is still in line) or
/// takes one at the end. Returns the place.
fn keep_place(tx: &Connection, req: &Request<'_>, now: &HostTime) -> rusqlite::Result<i64> {
    let expires = place_expiry(now);
    if let Some(seq) = req.place {
        let kept = tx
            .prepare_cached(
                "UPDATE tenure_waiters SET expires_at_ms = ?3, ttl_ms = ?4, boot_id = ?5
                 WHERE seq = ?1 AND token = ?2",
            )?
            .execute(params![seq, req.token, expires, req.ttl_ms, &*now.boot])?;
        if kept == 1 {
            return Ok(seq);
        }
    }
    tx.prepare_cached(TOKEN_INDEX)?.execute([])?;
    tx.prepare_cached(
        "INSERT INTO tenure_waiters (key, token, ttl_ms, boot_id, expires_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![req.key, req.token, req.ttl_ms, &*now.boot, expires])?;
    Ok(tx.last_insert_rowid())
}

/// Refreshes the places `places` (place, owner token) as their waiters'
/// looks would: one statement, compiled once, per place. Returns for each
/// whether it was still in line.
pub(super) fn refresh_places(
    tx: &Connection,
    places: &[(i64, &str)],
    now: &HostTime,
) -> rusqlite::Result<Vec<bool>> {
    let expires = place_expiry(now);
    let mut update = tx.prepare_cached(
        "UPDATE tenure_waiters SET expires_at_ms = ?3, boot_id = ?4 WHERE seq = ?1 AND token = ?2",
    )?;
    places
        .iter()
        .map(|(seq, token)| Ok(update.execute(params![seq, token, expires, &*now.boot])? == 1))
        .collect()
}

/// What [`serve`] found and did.
pub(super) struct Served {
    /// How long the lease is held for from now (`None`: free).
    pub(super) held_for: Option<std::time::Duration>,
    /// The lease's state after serving.
    pub(super) state: RowState,
}

/// Hands the lease of `key` to the first live waiter when nobody holds it
/// (its TTL ran out, or an older version freed it), as that waiter's look
/// would.
pub(super) fn serve(tx: &Connection, key: &str, now: &HostTime) -> Result<Served, Fault> {
    let row = read_row(tx, key)?;
    let held_for = row.as_ref().and_then(|r| r.held_for(now));
    let idle = Served {
        held_for,
        state: row.as_ref().map(|r| (r.fence, r.token.clone())),
    };
    if held_for.is_some() {
        return Ok(idle);
    }
    let Some(waiter) = first_waiter(tx, key, now)? else {
        return Ok(idle);
    };
    match hand_off(tx, key, row.map_or(0, |r| r.fence), &waiter, now)? {
        Some(state) => Ok(Served {
            held_for: Some(claim_for(&waiter)),
            state,
        }),
        None => Ok(idle),
    }
}

/// [`claim_ms`] as a duration.
fn claim_for(waiter: &Waiter) -> std::time::Duration {
    std::time::Duration::from_millis(claim_ms(waiter).unsigned_abs())
}

/// Leaves the line of `key`: removes the waiter's place and, if the lease was
/// handed to `token` meanwhile, passes it on. Returns the lease's new state
/// when it was passed on.
pub(super) fn leave(
    tx: &Connection,
    key: &str,
    token: &str,
    now: &HostTime,
) -> Result<Option<RowState>, Fault> {
    remove_place(tx, key, token)?;
    match read_row(tx, key)? {
        Some(row) if row.token.as_deref() == Some(token) && row.held_for(now).is_some() => {
            release_to_next(tx, key, &row, now).map(Some)
        }
        _ => Ok(None),
    }
}

/// How many live waiters stand in `key`'s line.
pub(super) fn waiting(tx: &Connection, key: &str, now: &HostTime) -> rusqlite::Result<u64> {
    let n: i64 = tx
        .prepare_cached(
            "SELECT count(*) FROM tenure_waiters
             WHERE key = ?1 AND boot_id = ?2 AND expires_at_ms > ?3",
        )?
        .query_row(params![key, &*now.boot, now.ms()], |r| r.get(0))?;
    Ok(n.unsigned_abs())
}

/// [`waiting`] for every key that has a live place, in one query.
pub(super) fn waiting_by_key(
    tx: &Connection,
    now: &HostTime,
) -> rusqlite::Result<std::collections::HashMap<String, u64>> {
    let mut select = tx.prepare_cached(
        "SELECT key, count(*) FROM tenure_waiters
         WHERE boot_id = ?1 AND expires_at_ms > ?2 GROUP BY key",
    )?;
    let rows = select.query_map(params![&*now.boot, now.ms()], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.unsigned_abs()))
    })?;
    rows.collect()
}

/// A look's reply as the lease layer wants it.
pub(super) fn reply(
    look: &Look,
    sent: crate::clock::Moment,
    ttl: std::time::Duration,
) -> AcquireReply {
    match look.reply {
        Ok(fence) => AcquireReply::Acquired {
            // Positive: a granted fence is checked by `next_fence`.
            fence: crate::fence::Fence::new(fence.unsigned_abs()),
            valid_until: crate::lease::valid_until(sent, ttl),
        },
        Err(ttl_left) => AcquireReply::Held { ttl_left },
    }
}
