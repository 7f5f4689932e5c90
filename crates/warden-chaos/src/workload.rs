//! The lock-set workload: each client loops acquire → read every resource →
//! random pause → (maybe a freeze) → write read+1 with its fence → release,
//! and checks a rate limiter. Every step goes to the history.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use warden::TryAcquire;
use warden::limit::{Algorithm, Quota};
use warden_test::nemesis::Rng;

use crate::history::{Event, History, Kind, Op, now_ns};
use crate::resource::{Outcome, Resource};
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
            eprintln!("warden-chaos: client {id}: runtime: {e}");
            return;
        }
    };
    rt.block_on(client(id, sh, &mut rng));
}

async fn client(id: usize, sh: &Arc<Shared>, rng: &mut Rng) {
    let me = format!("t{id}");
    let h = &sh.history;
    let (warden, mut resources) = loop {
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        match (sh.store.connect().await, connect_resources(sh).await) {
            (Ok(w), Ok(r)) => break (w, r),
            (Err(e), _) => {
                h.record(&Event::new(&me, Op::Config, Kind::Info).note(format!("connect: {e}")))
            }
            (_, Err(e)) => {
                h.record(&Event::new(&me, Op::Config, Kind::Info).note(format!("resources: {e}")))
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let limiter = sh.store.shared_limits().then(|| {
        warden.limiter(
            Quota::per_hour(NonZeroU32::new(LIMIT).unwrap_or(NonZeroU32::MIN)),
            Algorithm::SlidingLog,
        )
    });
    let wait = sh.ttl;
    let mut n = 0u64;
    while !sh.stop.load(Ordering::SeqCst) {
        let key = format!("k{}", rng.below(sh.keys));
        let lease = warden.lease(&key).ttl(sh.ttl).watchdog(true);
        h.record(&Event::new(&me, Op::Acquire, Kind::Invoke).key(&key));
        let res =
            tokio::time::timeout(wait + Duration::from_secs(3), lease.acquire_within(wait)).await;
        let guard = match res {
            Ok(Ok(TryAcquire::Acquired(g))) => g,
            Ok(Ok(_)) => {
                h.record(&Event::new(&me, Op::Acquire, Kind::Fail).key(&key));
                continue;
            }
            Ok(Err(e)) => {
                h.record(
                    &Event::new(&me, Op::Acquire, Kind::Info)
                        .key(&key)
                        .note(e.to_string()),
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => {
                h.record(
                    &Event::new(&me, Op::Acquire, Kind::Info)
                        .key(&key)
                        .note("timeout"),
                );
                continue;
            }
        };
        n += 1;
        let lease_id = format!("{me}-{n}");
        let fence = guard.fence().get();
        let deadline = |g: &warden::LeaseGuard| {
            now_ns() + u64::try_from(g.remaining().as_nanos()).unwrap_or(0)
        };
        let mut last_deadline = deadline(&guard);
        h.record(
            &Event::new(&me, Op::Acquire, Kind::Ok)
                .key(&key)
                .held(fence, &lease_id),
        );

        // The lost signal, timed when it fires (for the detection latency).
        let watcher = {
            let (sig, h, key, lease_id, me) = (
                guard.lost(),
                h.clone(),
                key.clone(),
                lease_id.clone(),
                me.clone(),
            );
            tokio::spawn(async move {
                sig.wait().await;
                h.record(
                    &Event::new(&me, Op::Lost, Kind::Ok)
                        .key(&key)
                        .held(fence, &lease_id),
                );
            })
        };

        // Read every resource.
        let mut reads = Vec::new();
        for (i, (kind, r)) in resources.iter_mut().enumerate() {
            let name = format!("{key}/{kind}");
            h.record(
                &Event::new(&me, Op::Read, Kind::Invoke)
                    .key(&name)
                    .held(fence, &lease_id),
            );
            match r.read(&name).await {
                Ok(v) => {
                    h.record(
                        &Event::new(&me, Op::Read, Kind::Ok)
                            .key(&name)
                            .held(fence, &lease_id)
                            .value(v),
                    );
                    reads.push((i, name, v));
                }
                Err(e) => h.record(&Event::new(&me, Op::Read, Kind::Info).key(&name).note(e)),
            }
        }
        // The random pause, sampling the local deadline (renewals move it) so
        // the end of this holder's validity is known if the lease is lost.
        let hold_until = tokio::time::Instant::now() + rng.between(Duration::ZERO, sh.hold_max);
        loop {
            if !guard.is_lost() {
                last_deadline = last_deadline.max(deadline(&guard));
            }
            let now = tokio::time::Instant::now();
            if now >= hold_until {
                break;
            }
            tokio::time::sleep((hold_until - now).min(Duration::from_millis(10))).await;
        }
        let mut frozen = false;
        if !guard.is_lost() {
            // A freeze between the check and the write, like a GC pause: the
            // whole runtime stops, renewals included.
            let freeze = sh
                .freezes
                .get(id)
                .map_or(0, |f| f.swap(0, Ordering::SeqCst));
            if freeze > 0 {
                frozen = true;
                h.record(
                    &Event::new(&me, Op::Fault, Kind::Info)
                        .note("client-pause")
                        .value(id as u64),
                );
                std::thread::sleep(Duration::from_millis(freeze));
                h.record(&Event::new(&me, Op::Heal, Kind::Info).note("client-pause"));
            }
            for (i, name, v) in reads {
                let Some((_, r)) = resources.get_mut(i) else {
                    continue;
                };
                let mut e = Event::new(&me, Op::Write, Kind::Invoke)
                    .key(&name)
                    .held(fence, &lease_id)
                    .value(v + 1);
                e.read = Some(v);
                h.record(&e);
                match r.write(&name, fence, v + 1).await {
                    Ok(Outcome::Applied) => h.record(
                        &Event::new(&me, Op::Write, Kind::Ok)
                            .key(&name)
                            .held(fence, &lease_id),
                    ),
                    Ok(Outcome::Refused) => h.record(
                        &Event::new(&me, Op::Write, Kind::Fail)
                            .key(&name)
                            .held(fence, &lease_id),
                    ),
                    Err(e) => h.record(
                        &Event::new(&me, Op::Write, Kind::Info)
                            .key(&name)
                            .held(fence, &lease_id)
                            .note(e),
                    ),
                }
            }
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
        let mut e = Event::new(&me, Op::Release, Kind::Invoke)
            .key(&key)
            .held(fence, &lease_id);
        e.until = Some(until);
        h.record(&e);
        match tokio::time::timeout(Duration::from_secs(3), guard.release()).await {
            Ok(Ok(warden::ReleaseOutcome::Released)) => h.record(
                &Event::new(&me, Op::Release, Kind::Ok)
                    .key(&key)
                    .held(fence, &lease_id),
            ),
            Ok(Ok(_)) => h.record(
                &Event::new(&me, Op::Release, Kind::Fail)
                    .key(&key)
                    .held(fence, &lease_id),
            ),
            Ok(Err(e)) => h.record(
                &Event::new(&me, Op::Release, Kind::Info)
                    .key(&key)
                    .note(e.to_string()),
            ),
            Err(_) => h.record(
                &Event::new(&me, Op::Release, Kind::Info)
                    .key(&key)
                    .note("timeout"),
            ),
        }
        watcher.abort();

        if let Some(limiter) = &limiter {
            let segment =
                (now_ns() - sh.start_ns) / u64::try_from(LIMIT_SEGMENT.as_nanos()).unwrap_or(1);
            let lkey = format!("lim:{segment}");
            h.record(&Event::new(&me, Op::Limit, Kind::Invoke).key(&lkey));
            let d = tokio::time::timeout(Duration::from_secs(2), limiter.check(&lkey)).await;
            let kind = match d {
                Ok(Ok(d)) if d.allowed => Kind::Ok,
                Ok(Ok(_)) => Kind::Fail,
                _ => Kind::Info,
            };
            h.record(
                &Event::new(&me, Op::Limit, kind)
                    .key(&lkey)
                    .value(u64::from(LIMIT)),
            );
        }
    }
}
