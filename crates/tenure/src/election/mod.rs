//! Leader election on the lease core.
//!
//! An [`Election`] is a lease on its key: the leader is whoever holds it,
//! renewed by the watchdog. So everything a lease promises holds for a leader,
//! and nothing more:
//!
//! - **The term is the fence.** Every new leader's term is greater than every
//!   term before it on that key, on every store including a quorum — pass it to
//!   the resources the leader writes, and they can refuse a deposed leader
//!   (see [`fence`](crate::fence)).
//! - **Losing the lease is losing leadership.** [`Leadership::lost`] and
//!   [`Leadership::run`] are the lease's lost signal and guarded run: they fire
//!   on the leader's local deadline, which comes a clock-drift margin before
//!   the store lets another candidate win.
//! - **Who leads is readable.** The leader's id is written next to the lease as
//!   a fenced record (its value is the id, its fence the term), with a
//!   compare-and-set that never lets a deposed leader overwrite its
//!   successor's id. [`Election::leader`] reads the record and the lease and
//!   reports an id only when both name the same term. Between a new leader's
//!   win and its id's write (one round trip) the id reads as `None`.
//! - **Candidates are served in arrival order where leases are.** A campaign
//!   waits as [`Lease::acquire`] does: first come, first served on
//!   Redis (one master, Sentinel, Cluster), SQLite and etcd; in memory and on
//!   a quorum, woken candidates race.
//! - **Changes are pushed.** [`Election::observe`] wakes on every release of
//!   the leader's lease: Redis pub/sub, an etcd watch (on the lease key and
//!   the record), the SQLite file's changes (inotify on Linux, one read every
//!   100 ms per process elsewhere), at once in memory, each node's release on
//!   a quorum. A new leader is announced on Redis (its id, on the same
//!   channel), etcd and SQLite; in memory and on a quorum it is seen at the
//!   next re-read ([`Election::poll_every`]). A leader that crashes is noticed
//!   when its TTL runs out, on every store.
//!
//! # What an election does not guarantee
//!
//! At most one leader *by the leaders' own local deadlines*: a leader paused
//! past its TTL (GC, SIGSTOP, a VM migration) can still act after a successor
//! was elected, and no client-side check closes that window. Fence the
//! resources the leader writes with [`Leadership::term`].
//!
//! # On a quorum of Redis masters
//!
//! Elections work — the term is the quorum lease's fence, strictly increasing
//! across leaders — but **the leader's id is not kept**: a quorum keeps no
//! records, so [`Election::leader`] reports `id: None` there, and
//! `tenure elect --id` refuses to run on one. The term `leader()` reports on a
//! quorum is the fence the nodes holding the leader's lease agree on — the
//! leader's own [`Leadership::term`], also after a candidate's failed vote
//! raised the counter of a node the leader does not hold.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::Coordinator;
//!
//! let tenure = Coordinator::memory();
//! let election = tenure.election("scheduler").ttl(Duration::from_secs(10));
//! let leadership = election.try_campaign("node-a").await?.expect("nobody else runs");
//! let now = election.leader().await?.expect("someone leads");
//! assert_eq!(now.id.as_deref(), Some("node-a"));
//! assert_eq!(now.term, leadership.term());
//! // Do the leader's work, cancelled if leadership is lost first.
//! leadership.run(async { /* write with leadership.term() */ }).await?;
//! leadership.resign().await?;
//! assert!(election.leader().await?.is_none());
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::{Attempt, Lease, LeaseGuard, LeaseStore, LostSignal, ReleaseOutcome};
use crate::record::{PutOutcome, PutRule, Record, RecordStore};

/// The longest candidate id accepted, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// How often [`Observer::changed`] re-reads the election when no
/// notification tells it of a change (a new leader in memory or on a quorum,
/// a leader whose id is not written yet), unless set with
/// [`Election::poll_every`].
pub const DEFAULT_POLL: Duration = Duration::from_millis(250);

/// An election on one key. Cheap to clone; see the [module docs](self).
#[derive(Debug, Clone)]
#[must_use]
pub struct Election {
    lease: Lease,
    store: Arc<dyn LeaseStore>,
    records: Option<Arc<dyn RecordStore>>,
    poll: Duration,
}

/// Who leads an election now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's id; `None` in the moment between a new leader's win and
    /// the write of its id, and always on a store that keeps no records (a
    /// quorum of Redis masters; a custom [`LeaseStore`] without
    /// [`Coordinator::with_records`](crate::Coordinator::with_records)).
    pub id: Option<String>,
    /// The leader's term: its lease's fence (on a quorum, as the nodes
    /// holding the lease agree on it: see the [module
    /// docs](self#on-a-quorum-of-redis-masters)).
    pub term: Fence,
    /// How long the store keeps the leader's lease without renewal, when the
    /// store knows.
    pub ttl_left: Option<Duration>,
}

impl Election {
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        records: Option<Arc<dyn RecordStore>>,
        key: String,
    ) -> Self {
        Election {
            lease: Lease::new(Arc::clone(&store), key).watchdog(true),
            store,
            records,
            poll: DEFAULT_POLL,
        }
    }

    /// Sets the TTL of the leader's lease (default
    /// [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL)); it is renewed every third
    /// of it. A crashed leader is replaced within about this long.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lease = self.lease.ttl(ttl);
        self
    }

    /// Sets how often [`observe`](Self::observe) re-reads when nothing is
    /// pushed (default [`DEFAULT_POLL`]).
    pub fn poll_every(mut self, interval: Duration) -> Self {
        self.poll = interval.max(Duration::from_millis(1));
        self
    }

    /// The election's key (the key of the leader's lease).
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// Tries once to become the leader as `id`: `None` when someone else leads.
    pub async fn try_campaign(&self, id: &str) -> Result<Option<Leadership>> {
        validate_id(id)?;
        match self.lease.attempt().await? {
            Attempt::Acquired(guard) => self.take_office(id, guard).await.map(Some),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// Campaigns as `id` until elected or until `max_wait` has passed, then
    /// [`Error::Busy`] (see [`Error::is_busy`]), as [`Lease::acquire_timeout`]
    /// does. Candidates wait in arrival order on Redis (one master, Sentinel,
    /// Cluster), SQLite and etcd, woken by the leader's release; in memory and
    /// on a quorum woken candidates race. A leader that crashed is replaced
    /// when its TTL runs out.
    pub async fn campaign_timeout(&self, id: &str, max_wait: Duration) -> Result<Leadership> {
        validate_id(id)?;
        let guard = self.lease.acquire_timeout(max_wait).await?;
        self.take_office(id, guard).await
    }

    /// Campaigns as `id` until elected (cancel it by dropping the future), as
    /// [`Lease::acquire`] does.
    pub async fn campaign(&self, id: &str) -> Result<Leadership> {
        validate_id(id)?;
        let guard = self.lease.acquire().await?;
        self.take_office(id, guard).await
    }

    /// Publishes the new leader's id under its term. A failure to write it
    /// gives the lease back: a leader nobody can name is refused rather than
    /// kept silently.
    async fn take_office(&self, id: &str, guard: LeaseGuard) -> Result<Leadership> {
        if let Some(records) = &self.records {
            let record = Record {
                fence: guard.fence(),
                value: id.as_bytes().to_vec(),
            };
            match records
                .put_record(self.key(), &record, None, PutRule::IfNotOlder)
                .await
            {
                Ok(PutOutcome::Written) => {}
                Ok(PutOutcome::Kept(newer)) => {
                    // A newer term exists already: this lease cannot be
                    // current (fences only grow), so it was lost meanwhile.
                    tracing::debug!(key = self.key(), newer = %newer.fence, "a newer term was elected before ours was recorded");
                    let _ = guard.release().await;
                    return Err(Error::LeaseLost {
                        key: self.key().to_string(),
                    });
                }
                Err(e) => {
                    let _ = guard.release().await;
                    return Err(e);
                }
            }
        }
        Ok(Leadership {
            guard,
            id: id.to_string(),
        })
    }

    /// Who leads now, or `None` when nobody does.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        crate::key::validate_key(self.key())?;
        // Record first, then the lease: a record whose term equals the lease's
        // last fence while the lease is held names the current leader, however
        // the two reads interleave with elections (a newer election moves the
        // fence, so a stale record never matches). A mismatch is a new
        // leader's id not written yet, or an election between the reads: read
        // again, a couple of times.
        let mut tries = 0;
        loop {
            let record = match &self.records {
                Some(records) => records.get_record(self.key()).await?,
                None => None,
            };
            let status = self.store.status(self.key()).await?;
            let (true, Some(term)) = (status.held, status.fence) else {
                return Ok(None);
            };
            let id = record
                .filter(|r| r.fence == term)
                .map(|r| String::from_utf8_lossy(&r.value).into_owned());
            tries += 1;
            if id.is_some() || self.records.is_none() || tries >= 3 {
                return Ok(Some(Leader {
                    id,
                    term,
                    ttl_left: status.ttl_left,
                }));
            }
            tokio::task::yield_now().await;
        }
    }

    /// Watches the election for changes of leadership; see [`Observer`].
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            last: None,
        }
    }
}

/// Checks a candidate id: not empty, at most [`MAX_ID_LEN`] bytes, no control
/// characters (it is printed by `tenure leader`).
fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid("candidate id", "must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(Error::invalid(
            "candidate id",
            format!(
                "is {} bytes long; at most {MAX_ID_LEN} are allowed",
                id.len()
            ),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(Error::invalid(
            "candidate id",
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// The leadership of an elected candidate: a lease held with the watchdog.
/// Resign with [`resign`](Self::resign); dropping it resigns in the
/// background.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns"]
pub struct Leadership {
    guard: LeaseGuard,
    id: String,
}

impl Leadership {
    /// The term: this leader's fence, greater than every earlier leader's.
    /// Send it with every write to a fenced resource.
    pub fn term(&self) -> Fence {
        self.guard.fence()
    }

    /// The id this leader campaigned with.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A signal that fires when leadership is lost (see
    /// [`LeaseGuard::lost`]).
    pub fn lost(&self) -> LostSignal {
        self.guard.lost()
    }

    /// Whether leadership is known or presumed lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Runs `work` while leading; see [`LeaseGuard::run`].
    pub async fn run<F: std::future::Future>(&self, work: F) -> Result<F::Output> {
        self.guard.run(work).await
    }

    /// The lease behind the leadership.
    pub fn guard(&self) -> &LeaseGuard {
        &self.guard
    }

    /// Gives up the leadership; the lease behind it, from now on.
    pub fn into_guard(self) -> LeaseGuard {
        self.guard
    }

    /// Resigns: releases the lease so another candidate is elected at once.
    /// [`ReleaseOutcome::NotHeld`] means leadership had been lost already.
    /// Cancel-safe like [`LeaseGuard::release`]: a resign its caller stops
    /// waiting for still finishes in the background.
    pub async fn resign(self) -> Result<ReleaseOutcome> {
        self.guard.release().await
    }
}

/// Leadership changes of an election, from [`Election::observe`].
#[derive(Debug)]
pub struct Observer {
    election: Election,
    last: Option<Option<Leader>>,
}

impl Observer {
    /// Waits until leadership differs from what this observer reported last
    /// (the first call reports the current state at once) and returns it:
    /// `None` when nobody leads.
    ///
    /// Two leaders with the same term and id are the same leadership; a
    /// change of `ttl_left` alone is not a change. A new leader is reported
    /// once its id is readable. The wait ends on a release (pushed on every
    /// store) and, on Redis, etcd and SQLite, on a new leader; otherwise, and for a leader
    /// that crashed, the election is re-read every
    /// [`poll_every`](Election::poll_every) (at the latest when the
    /// leader's TTL runs out).
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let key = self.election.key().to_string();
        // Subscribed before the first read, so a change between the read and
        // the wait wakes it.
        let mut watch = self.election.store.watch_releases(&key).await;
        loop {
            let now = self.election.leader().await?;
            let same = self.last.as_ref().is_some_and(|last| match (last, &now) {
                (None, None) => true,
                (Some(a), Some(b)) => a.term == b.term && a.id == b.id,
                _ => false,
            });
            // A new leader whose id is not written yet is reported once it
            // is (announced on Redis); if it dies before, once its TTL ends.
            let pending =
                self.election.records.is_some() && now.as_ref().is_some_and(|l| l.id.is_none());
            if !same && !pending {
                self.last = Some(now.clone());
                return Ok(now);
            }
            let mut pause = self.election.poll;
            if watch.is_push()
                && let Some(Some(leader)) = &self.last
                && leader.id.is_some()
            {
                // Pushed: a release or a new leader's id wakes us; a crash
                // shows when the TTL runs out.
                pause = leader
                    .ttl_left
                    .map_or(pause, |t| t + Duration::from_millis(1));
            }
            watch.wait(pause).await;
        }
    }
}
