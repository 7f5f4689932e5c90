//! The lock-set workload: each client loops acquire → read every resource →
//! random pause → (maybe a freeze) → write read+1 with its fence → release,
//! and checks a rate limiter. Every step goes to the history.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tenure::limit::{Algorithm, Limiter, Quota};
use tenure::{Attempt, Coordinator, LeaseGuard, ReleaseOutcome};
use tenure_test::nemesis::Rng;
use tokio::task::JoinHandle;

use crate::history::{Event, History, Kind, Op, now_ns};
use crate::resource::Resource;
use crate::section::Section;
use crate::store::StoreSpec;

/// The limit of each limiter key (admissions per hour: more is over-admission).
pub const LIMIT: u32 = 20;
/// A new limiter key every this long, so admissions keep being tested.
pub const LIMIT_SEGMENT: Duration = Duration::from_secs(5);

/// What every client of a run shares.
#[derive(Debug)]
pub struct Shared {
    /// The lease store.
    pub store: StoreSpec,
    /// Redis holding the fenced and control resources (never faulted).
    pub resource_url: String,
    /// PostgreSQL holding the fence-pattern rows, if any.
    pub pg_url: Option<String>,
    /// Lease keys `k0..kN`.
    pub keys: u64,
    /// Lease TTL.
    pub ttl: Duration,
    /// Longest random pause inside the critical section.
    pub hold_max: Duration,
    /// `false`: fenced resources are written without their fence check (the
    /// checker must then find stale writes).
    pub fence_check: bool,
    /// The history.
    pub history: History,
    /// Set to end the run.
    pub stop: AtomicBool,
    /// Per client: a freeze (ms) the nemesis asked for, taken at the next write.
    pub freezes: Vec<AtomicU64>,
    /// Run start on the history clock (limiter segments count from it).
    pub start_ns: u64,
}

/// The resources of lease key `key`: `(name, fenced?)`.
pub fn resource_names(key: &str, pg: bool) -> Vec<String> {
    let mut v = vec![format!("{key}/redis"), format!("{key}/control")];
    if pg {
        v.push(format!("{key}/pg"));
    }
    v
}

async fn connect_resources(sh: &Shared) -> Result<Vec<(String, Resource)>, String> {
    let mut v = vec![
        (
            "redis".to_string(),
            Resource::redis(&sh.resource_url, sh.fence_check).await?,
        ),
        (
            "control".to_string(),
            Resource::redis(&sh.resource_url, false).await?,
        ),
    ];
    if let Some(pg) = &sh.pg_url {
        v.push(("pg".to_string(), Resource::postgres(pg, sh.fence_check)));
    }
    Ok(v)
}

/// Runs client `id` on this thread (its own single-threaded runtime, so that a
/// freeze stops its lease's renewals too, as a real process pause would).
pub fn client_thread(id: usize, sh: &Arc<Shared>, mut rng: Rng) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure-chaos: client {id}: runtime: {e}");
            return;
        }
    };
    rt.block_on(client(id, sh, &mut rng));
}

/// One client's fixed parts.
struct Client<'a> {
    id: usize,
    me: String,
    sh: &'a Shared,
}

async fn client(id: usize, sh: &Arc<Shared>, rng: &mut Rng) {
    let c = Client {
        id,
        me: format!("t{id}"),
        sh,
    };
    let Some((tenure, mut resources)) = c.connect().await else {
        return;
    };
    let limiter = sh.store.shared_limits().then(|| {
        tenure.limiter(
            Quota::per_hour(NonZeroU32::new(LIMIT).unwrap_or(NonZeroU32::MIN)),
            Algorithm::SlidingLog,
        )
    });
    let mut n = 0u64;
    while !sh.stop.load(Ordering::SeqCst) {
        let key = format!("k{}", rng.below(sh.keys));
        let Some(guard) = c.acquire(&tenure, &key).await else {
            continue;
        };
        n += 1;
        let lease_id = format!("{}-{n}", c.me);
        c.hold(&key, &lease_id, guard, &mut resources, rng).await;
        if let Some(limiter) = &limiter {
            c.check_limit(limiter).await;
        }
    }
}

/// The end of `g`'s validity on the history clock, as the guard sees it now.
fn deadline(g: &LeaseGuard) -> u64 {
    now_ns() + u64::try_from(g.remaining().as_nanos()).unwrap_or(0)
}

impl Client<'_> {
    fn history(&self) -> &History {
        &self.sh.history
    }

    /// Connects to the store and the resources, retrying until the run stops
    /// (`None`).
    async fn connect(&self) -> Option<(Coordinator, Vec<(String, Resource)>)> {
        let (sh, h, me) = (self.sh, self.history(), &self.me);
        loop {
            if sh.stop.load(Ordering::SeqCst) {
                return None;
            }
            match (sh.store.connect().await, connect_resources(sh).await) {
                (Ok(w), Ok(r)) => return Some((w, r)),
                (Err(e), _) => {
                    h.record(&Event::new(me, Op::Config, Kind::Info).note(format!("connect: {e}")))
                }
                (_, Err(e)) => h.record(
                    &Event::new(me, Op::Config, Kind::Info).note(format!("resources: {e}")),
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Acquires `key` within a TTL; records the outcome; the guard if it got one.
    async fn acquire(&self, tenure: &Coordinator, key: &str) -> Option<LeaseGuard> {
        let (sh, h, me) = (self.sh, self.history(), &self.me);
        let wait = sh.ttl;
        let lease = tenure.lease(key).ttl(sh.ttl).watchdog(true);
        h.record(&Event::new(me, Op::Acquire, Kind::Invoke).key(key));
        let res =
            tokio::time::timeout(wait + Duration::from_secs(3), lease.attempt_within(wait)).await;
        match res {
            Ok(Ok(Attempt::Acquired(g))) => Some(g),
            Ok(Ok(_)) => {
                h.record(&Event::new(me, Op::Acquire, Kind::Fail).key(key));
                None
            }
            Ok(Err(e)) => {
                h.record(
                    &Event::new(me, Op::Acquire, Kind::Info)
                        .key(key)
                        .note(e.to_string()),
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                None
            }
            Err(_) => {
                h.record(
                    &Event::new(me, Op::Acquire, Kind::Info)
                        .key(key)
                        .note("timeout"),
                );
                None
            }
        }
    }

    /// Holds `guard` (lease `lease_id` of `key`): records the grant, reads every
    /// resource, pauses, maybe freezes, writes, releases.
    async fn hold(
        &self,
        key: &str,
        lease_id: &str,
        guard: LeaseGuard,
        resources: &mut [(String, Resource)],
        rng: &mut Rng,
    ) {
        let h = self.history();
        let fence = guard.fence().get();
        let mut last_deadline = deadline(&guard);
        h.record(
            &Event::new(&self.me, Op::Acquire, Kind::Ok)
                .key(key)
                .held(fence, lease_id),
        );
        let watcher = self.watch_lost(&guard, key, lease_id);
        let section = Section {
            history: h,
            client: &self.me,
            lease: lease_id,
            fence,
        };
        let reads = section.read_all(key, resources).await;
        let pause = rng.between(Duration::ZERO, self.sh.hold_max);
        sample_deadline(&guard, pause, &mut last_deadline).await;
        let mut frozen = false;
        if !guard.is_lost() {
            frozen = self.freeze();
            section.write_all(reads, resources).await;
        }
        let still = !guard.is_lost();
        if still {
            last_deadline = last_deadline.max(deadline(&guard));
        }
        let t_release = now_ns();
        // The end of this holder's validity: its release, or — once the lease
        // is lost — its last local deadline (a frozen holder's too: it wrote
        // after it, which is what the fence is for).
        let until = if still && !frozen {
            t_release
        } else {
            last_deadline.min(t_release)
        };
        self.release(guard, key, lease_id, fence, until).await;
        watcher.abort();
    }

    /// Records the lost signal when it fires (for the detection latency).
    fn watch_lost(&self, guard: &LeaseGuard, key: &str, lease_id: &str) -> JoinHandle<()> {
        let (sig, h, key, lease_id, me) = (
            guard.lost(),
            self.history().clone(),
            key.to_string(),
            lease_id.to_string(),
            self.me.clone(),
        );
        let fence = guard.fence().get();
        tokio::spawn(async move {
            sig.wait().await;
            h.record(
                &Event::new(&me, Op::Lost, Kind::Ok)
                    .key(&key)
                    .held(fence, &lease_id),
            );
        })
    }

    /// A freeze the nemesis asked for, taken between the check and the write,
    /// like a GC pause: the whole runtime stops, renewals included. Whether
    /// there was one.
    fn freeze(&self) -> bool {
        let freeze = self
            .sh
            .freezes
            .get(self.id)
            .map_or(0, |f| f.swap(0, Ordering::SeqCst));
        if freeze == 0 {
            return false;
        }
        let h = self.history();
        h.record(
            &Event::new(&self.me, Op::Fault, Kind::Info)
                .note("client-pause")
                .value(self.id as u64),
        );
        std::thread::sleep(Duration::from_millis(freeze));
        h.record(&Event::new(&self.me, Op::Heal, Kind::Info).note("client-pause"));
        true
    }

    /// Records the end of the holder's belief (`until`) and releases.
    async fn release(&self, guard: LeaseGuard, key: &str, lease_id: &str, fence: u64, until: u64) {
        let (h, me) = (self.history(), &self.me);
        let mut e = Event::new(me, Op::Release, Kind::Invoke)
            .key(key)
            .held(fence, lease_id);
        e.until = Some(until);
        h.record(&e);
        let done = match tokio::time::timeout(Duration::from_secs(3), guard.release()).await {
            Ok(Ok(ReleaseOutcome::Released)) => {
                Event::new(me, Op::Release, Kind::Ok).held(fence, lease_id)
            }
            Ok(Ok(_)) => Event::new(me, Op::Release, Kind::Fail).held(fence, lease_id),
            Ok(Err(e)) => Event::new(me, Op::Release, Kind::Info).note(e.to_string()),
            Err(_) => Event::new(me, Op::Release, Kind::Info).note("timeout"),
        };
        h.record(&done.key(key));
    }

    /// Checks this segment's limiter key; records the decision.
    async fn check_limit(&self, limiter: &Limiter) {
        let (sh, h, me) = (self.sh, self.history(), &self.me);
        let segment =
            (now_ns() - sh.start_ns) / u64::try_from(LIMIT_SEGMENT.as_nanos()).unwrap_or(1);
        let lkey = format!("lim:{segment}");
        h.record(&Event::new(me, Op::Limit, Kind::Invoke).key(&lkey));
        let d = tokio::time::timeout(Duration::from_secs(2), limiter.check(&lkey)).await;
        let kind = match d {
            Ok(Ok(d)) if d.allowed => Kind::Ok,
            Ok(Ok(_)) => Kind::Fail,
            _ => Kind::Info,
        };
        h.record(
            &Event::new(me, Op::Limit, kind)
                .key(&lkey)
                .value(u64::from(LIMIT)),
        );
    }
}

/// Waits `pause`, sampling the guard's local deadline (renewals move it) so
/// the end of this holder's validity is known if the lease is lost.
async fn sample_deadline(guard: &LeaseGuard, pause: Duration, last_deadline: &mut u64) {
    let hold_until = tokio::time::Instant::now() + pause;
    loop {
        if !guard.is_lost() {
            *last_deadline = (*last_deadline).max(deadline(guard));
        }
        let now = tokio::time::Instant::now();
        if now >= hold_until {
            break;
        }
        tokio::time::sleep((hold_until - now).min(Duration::from_millis(10))).await;
    }
}
