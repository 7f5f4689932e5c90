//! The workloads of the in-process clients. Each client loops acquire → read
//! every resource of its keys → random pause → (maybe a freeze) → write
//! read+1 with each key's fence → release; what it acquires is its
//! [`Role`]'s: a lease on one key (and then a rate-limiter check), a lease
//! set over random overlapping keys, or a read-write lease as reader (who
//! only reads) or writer. Every step goes to the history.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tenure::limit::{Algorithm, Limiter, Quota};
use tenure::{Attempt, Coordinator, Lease, ReleaseOutcome};
use tenure_test::nemesis::Rng;
use tokio::task::JoinHandle;

use crate::held::{Held, joined};
use crate::history::{Event, History, Kind, Op, now_ns};
use crate::resource::Resource;
use crate::section::{Read, Section};
use crate::store::StoreSpec;

/// The limit of each limiter key (admissions per hour: more is over-admission).
pub const LIMIT: u32 = 20;
/// A new limiter key every this long, so admissions keep being tested.
pub const LIMIT_SEGMENT: Duration = Duration::from_secs(5);

/// The keys lease sets are drawn from (`m0..`): sets of two or three of
/// four keys overlap often.
pub const SET_KEYS: u64 = 4;
/// The read-write lease keys (`rw0..`).
pub const RW_KEYS: u64 = 1;

/// What a client acquires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A lease on one of the lease keys `k0..`, then a limiter check.
    Lease,
    /// A lease set of two or three of the keys `m0..`, in random order.
    Set,
    /// A read-write lease on one of `rw0..`: a writer one time in three,
    /// else a reader.
    ReadWrite,
}

impl Role {
    /// The client name's prefix (`t3`, `m4`, `r5`).
    fn prefix(self) -> &'static str {
        match self {
            Role::Lease => "t",
            Role::Set => "m",
            Role::ReadWrite => "r",
        }
    }
}

/// The keys lease sets are drawn from.
pub fn set_keys() -> Vec<String> {
    (0..SET_KEYS).map(|i| format!("m{i}")).collect()
}

/// The read-write lease keys.
pub fn rw_keys() -> Vec<String> {
    (0..RW_KEYS).map(|i| format!("rw{i}")).collect()
}

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

/// The resources of a client: Redis fenced and control values, and the
/// PostgreSQL rows when `pg` (the lease keys have rows; set and read-write
/// keys do not).
async fn connect_resources(sh: &Shared, pg: bool) -> Result<Vec<(String, Resource)>, String> {
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
    if let Some(url) = sh.pg_url.as_ref().filter(|_| pg) {
        v.push(("pg".to_string(), Resource::postgres(url, sh.fence_check)));
    }
    Ok(v)
}

/// Runs client `id` in `role` on this thread (its own single-threaded
/// runtime, so that a freeze stops its lease's renewals too, as a real
/// process pause would).
pub fn client_thread(id: usize, role: Role, sh: &Arc<Shared>, mut rng: Rng) {
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
    rt.block_on(client(id, role, sh, &mut rng));
}

/// One client's fixed parts.
struct Client<'a> {
    id: usize,
    role: Role,
    me: String,
    sh: &'a Shared,
}

async fn client(id: usize, role: Role, sh: &Arc<Shared>, rng: &mut Rng) {
    let c = Client {
        id,
        role,
        me: format!("{}{id}", role.prefix()),
        sh,
    };
    let Some((tenure, mut resources)) = c.connect().await else {
        return;
    };
    let limiter = (sh.store.shared_limits() && role == Role::Lease).then(|| {
        tenure.limiter(
            Quota::per_hour(NonZeroU32::new(LIMIT).unwrap_or(NonZeroU32::MIN)),
            Algorithm::SlidingLog,
        )
    });
    let mut n = 0u64;
    while !sh.stop.load(Ordering::SeqCst) {
        let Some(held) = c.acquire(&tenure, rng).await else {
            continue;
        };
        n += 1;
        let lease_id = format!("{}-{n}", c.me);
        c.hold(&lease_id, held, &mut resources, rng).await;
        if let Some(limiter) = &limiter {
            c.check_limit(limiter).await;
        }
    }
}

/// The end of `h`'s validity on the history clock, as the holder sees it now.
fn deadline(h: &Held) -> u64 {
    now_ns() + u64::try_from(h.remaining().as_nanos()).unwrap_or(0)
}

/// Two or three of the set keys, in random order.
fn draw_set(rng: &mut Rng) -> Vec<String> {
    let mut pool = set_keys();
    let n = 2 + usize::try_from(rng.below(2)).unwrap_or(0);
    let mut keys = Vec::with_capacity(n);
    while keys.len() < n && !pool.is_empty() {
        let i = usize::try_from(rng.below(pool.len() as u64)).unwrap_or(0);
        keys.push(pool.swap_remove(i));
    }
    keys
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
            let pg = self.role == Role::Lease;
            match (sh.store.connect().await, connect_resources(sh, pg).await) {
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

    /// Acquires what the client's role asks for within a TTL; records a
    /// refusal or an error; what it got.
    async fn acquire(&self, tenure: &Coordinator, rng: &mut Rng) -> Option<Held> {
        let ttl = self.sh.ttl;
        match self.role {
            Role::Lease => {
                let key = format!("k{}", rng.below(self.sh.keys));
                let lease = tenure.lease(&key).ttl(ttl).watchdog(true);
                self.acquire_one(lease, key, None).await
            }
            Role::ReadWrite => {
                let key = format!("rw{}", rng.below(RW_KEYS));
                let rw = match tenure.rw_lease(&key) {
                    Ok(rw) => rw,
                    Err(e) => {
                        self.unknown(&key, e.to_string()).await;
                        return None;
                    }
                };
                let (lease, mode) = if rng.below(3) == 0 {
                    (rw.write(), "write")
                } else {
                    (rw.read(), "read")
                };
                self.acquire_one(lease.ttl(ttl).watchdog(true), key, Some(mode))
                    .await
            }
            Role::Set => self.acquire_set(tenure, draw_set(rng)).await,
        }
    }

    /// Records an acquire of `key` with an unknown outcome, and backs off.
    async fn unknown(&self, key: &str, note: String) {
        let e = Event::new(&self.me, Op::Acquire, Kind::Info).key(key);
        self.history().record(&e.note(note));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// Acquires `lease` (of `key`, in `mode`) within a TTL.
    async fn acquire_one(
        &self,
        lease: Lease,
        key: String,
        mode: Option<&'static str>,
    ) -> Option<Held> {
        let (h, me) = (self.history(), &self.me);
        let wait = self.sh.ttl;
        h.record(&Event::new(me, Op::Acquire, Kind::Invoke).key(&key));
        let res =
            tokio::time::timeout(wait + Duration::from_secs(3), lease.attempt_within(wait)).await;
        match res {
            Ok(Ok(Attempt::Acquired(guard))) => Some(Held::One { guard, key, mode }),
            Ok(Ok(_)) => {
                h.record(&Event::new(me, Op::Acquire, Kind::Fail).key(&key));
                None
            }
            Ok(Err(e)) => {
                self.unknown(&key, e.to_string()).await;
                None
            }
            Err(_) => {
                h.record(
                    &Event::new(me, Op::Acquire, Kind::Info)
                        .key(&key)
                        .note("timeout"),
                );
                None
            }
        }
    }

    /// Acquires every key of `keys` (all or none) within a TTL.
    async fn acquire_set(&self, tenure: &Coordinator, keys: Vec<String>) -> Option<Held> {
        let (h, me, wait) = (self.history(), &self.me, self.sh.ttl);
        let name = joined(&keys);
        h.record(&Event::new(me, Op::Acquire, Kind::Invoke).key(&name));
        let set = tenure.lease_all(keys.clone()).ttl(wait).watchdog(true);
        let res =
            tokio::time::timeout(wait + Duration::from_secs(3), set.acquire_timeout(wait)).await;
        match res {
            Ok(Ok(guard)) => Some(Held::Set { guard, keys }),
            Ok(Err(e)) if e.is_busy() => {
                h.record(&Event::new(me, Op::Acquire, Kind::Fail).key(&name));
                None
            }
            Ok(Err(e)) => {
                self.unknown(&name, e.to_string()).await;
                None
            }
            Err(_) => {
                h.record(
                    &Event::new(me, Op::Acquire, Kind::Info)
                        .key(&name)
                        .note("timeout"),
                );
                None
            }
        }
    }

    /// Records the grant of `held` as lease `lease_id`: an acquire's ok reply
    /// with the fence (and the read-write mode), or for a set one `grant` per
    /// key, then the set's ok reply.
    fn record_grant(&self, held: &Held, lease_id: &str) {
        let (h, me) = (self.history(), &self.me);
        // The local deadline at the grant goes along, for the record.
        let until = Some(deadline(held));
        if let Held::One { mode, .. } = held {
            for (key, fence) in held.fences() {
                let mut e = Event::new(me, Op::Acquire, Kind::Ok)
                    .key(&key)
                    .held(fence.unwrap_or(0), lease_id);
                e.note = mode.map(str::to_string);
                e.until = until;
                h.record(&e);
            }
            return;
        }
        for (key, fence) in held.fences() {
            let e = Event::new(me, Op::Grant, Kind::Ok).key(&key);
            h.record(&match fence {
                Some(f) => e.held(f, lease_id),
                None => Event::new(me, Op::Grant, Kind::Fail).key(&key),
            });
        }
        let mut ok = Event::new(me, Op::Acquire, Kind::Ok).key(&held.label());
        ok.lease = Some(lease_id.to_string());
        ok.until = until;
        h.record(&ok);
    }

    /// Holds `held` (lease `lease_id`): records the grant, reads every
    /// resource of its keys, pauses, maybe freezes, writes (unless a reader),
    /// releases.
    async fn hold(
        &self,
        lease_id: &str,
        held: Held,
        resources: &mut [(String, Resource)],
        rng: &mut Rng,
    ) {
        let h = self.history();
        let fences: Vec<(String, u64)> = held
            .fences()
            .into_iter()
            .filter_map(|(k, f)| Some((k, f?)))
            .collect();
        let mut last_deadline = deadline(&held);
        self.record_grant(&held, lease_id);
        let watcher = self.watch_lost(&held, lease_id);
        let mut reads: Vec<(Section<'_>, Vec<Read>)> = Vec::new();
        for (key, fence) in &fences {
            let section = Section {
                history: h,
                client: &self.me,
                lease: lease_id,
                fence: *fence,
            };
            reads.push((section, section.read_all(key, resources).await));
        }
        let pause = rng.between(Duration::ZERO, self.sh.hold_max);
        sample_deadline(&held, pause, &mut last_deadline).await;
        let mut frozen = false;
        if !held.is_lost() {
            frozen = self.freeze();
            for (section, read) in reads.into_iter().filter(|_| held.writes()) {
                section.write_all(read, resources).await;
            }
        }
        let still = !held.is_lost();
        if still {
            last_deadline = last_deadline.max(deadline(&held));
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
        self.release(held, &fences, lease_id, until).await;
        watcher.abort();
    }

    /// Records the lost signal when it fires (for the detection latency).
    fn watch_lost(&self, held: &Held, lease_id: &str) -> JoinHandle<()> {
        let (sig, h, key, me) = (
            held.lost(),
            self.history().clone(),
            held.label(),
            self.me.clone(),
        );
        let mut lost = Event::new(&me, Op::Lost, Kind::Ok).key(&key);
        lost.lease = Some(lease_id.to_string());
        if let [(_, Some(fence))] = held.fences().as_slice() {
            lost.fence = Some(*fence);
        }
        tokio::spawn(async move {
            sig.wait().await;
            lost.t = now_ns();
            lost.note = sig.cause().map(|c| c.label().to_string());
            h.record(&lost);
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

    /// Records the end of the holder's belief (`until`) for each key (of
    /// `fences`) and releases.
    async fn release(&self, held: Held, fences: &[(String, u64)], lease_id: &str, until: u64) {
        let (h, me, label) = (self.history(), &self.me, held.label());
        for (key, fence) in fences {
            let mut e = Event::new(me, Op::Release, Kind::Invoke)
                .key(key)
                .held(*fence, lease_id);
            e.until = Some(until);
            h.record(&e);
        }
        let done = match tokio::time::timeout(Duration::from_secs(3), held.release()).await {
            Ok(Ok(ReleaseOutcome::Released)) => Event::new(me, Op::Release, Kind::Ok),
            Ok(Ok(_)) => Event::new(me, Op::Release, Kind::Fail),
            Ok(Err(e)) => Event::new(me, Op::Release, Kind::Info).note(e.to_string()),
            Err(_) => Event::new(me, Op::Release, Kind::Info).note("timeout"),
        };
        let mut done = done.key(&label);
        done.lease = Some(lease_id.to_string());
        h.record(&done);
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

/// Waits `pause`, sampling the holder's local deadline (renewals move it) so
/// the end of this holder's validity is known if the lease is lost.
async fn sample_deadline(held: &Held, pause: Duration, last_deadline: &mut u64) {
    let hold_until = tokio::time::Instant::now() + pause;
    loop {
        if !held.is_lost() {
            *last_deadline = (*last_deadline).max(deadline(held));
        }
        let now = tokio::time::Instant::now();
        if now >= hold_until {
            break;
        }
        tokio::time::sleep((hold_until - now).min(Duration::from_millis(10))).await;
    }
}
