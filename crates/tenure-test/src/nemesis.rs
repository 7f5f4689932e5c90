//! A fault schedule drawn from a seed: which fault, on which target, when and
//! for how long. The schedule is a plain list, so a run can print it, and the
//! same seed and plan give the same schedule again.
//!
//! ```
//! use std::time::Duration;
//! use tenure_test::nemesis::{FaultKind, FaultSpec, Plan, schedule};
//!
//! let plan = Plan {
//!     run_for: Duration::from_secs(10),
//!     gap: (Duration::from_millis(200), Duration::from_millis(800)),
//!     faults: vec![FaultSpec::new(FaultKind::ServerPause, 3, (Duration::from_millis(100), Duration::from_secs(1)))],
//! };
//! let faults = schedule(42, &plan);
//! assert_eq!(faults, schedule(42, &plan)); // a seed replays its schedule
//! assert!(faults.iter().all(|f| f.target < 3));
//! ```

use std::fmt;
use std::time::Duration;

/// A small deterministic generator (SplitMix64): every random choice of a run
/// comes from one, seeded by the run's printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence follows from `seed` alone.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A duration in `lo..=hi`, with millisecond steps.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo_ms, hi_ms) = (millis(lo), millis(hi.max(lo)));
        Duration::from_millis(lo_ms + self.below(hi_ms - lo_ms + 1))
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A generator for a sub-task (a client), independent of later draws here.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2)
}

/// The faults the suite knows. Which of them a scenario draws is its [`Plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Every chunk between clients and a server is delayed, with jitter.
    Latency,
    /// Requests to a server are dropped (one-way partition).
    PartitionToServerDrop,
    /// Requests to a server are held back and delivered late.
    PartitionToServerStall,
    /// Replies from a server are dropped.
    PartitionToClientDrop,
    /// Replies from a server are held back and delivered late.
    PartitionToClientStall,
    /// A server is frozen with SIGSTOP, then resumed.
    ServerPause,
    /// A server with `appendfsync always` is killed (-9) and restarted.
    ServerRestartPersistent,
    /// A server is killed (-9) and restarted with its data gone.
    ServerRestartVolatile,
    /// A server's wall clock jumps forward (libfaketime).
    ServerClockJump,
    /// The replication link is cut; the replica is promoted; clients move.
    Failover,
    /// The replication link is cut for a while (the master stays).
    ReplicationCut,
    /// A client process (or a client's thread) freezes past its lease's TTL.
    ClientPause,
    /// A client process is killed (-9) while it may hold a lease.
    ClientKill,
    /// A client's wall clock jumps (leases must not care).
    ClientClockJump,
    /// The protected resource's server (PostgreSQL) is frozen.
    ResourcePause,
    /// The protected resource's server (PostgreSQL) crashes and restarts.
    ResourceRestart,
    /// The etcd leader is killed (-9) and restarted after the fault.
    LeaderKill,
    /// An etcd member's disk stops completing writes (its filesystem frozen
    /// with `fsfreeze`, or the member frozen where that is not possible).
    DiskStall,
    /// A Redis Cluster or Sentinel master is killed (-9) while leases are held;
    /// its replica is promoted, and it comes back as a replica.
    MasterKill,
    /// A Redis Cluster master is cut off from its clients and the cluster bus
    /// (its replica is promoted when the cut outlasts the node timeout).
    MasterPartition,
    /// The slot of a lease key moves to another Redis Cluster master while
    /// leases are held.
    SlotMigration,
    /// The first waiter in a key's line is killed (-9) while it waits.
    WaiterKill,
}

impl FaultKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultKind; 22] = [
        FaultKind::Latency,
        FaultKind::PartitionToServerDrop,
        FaultKind::PartitionToServerStall,
        FaultKind::PartitionToClientDrop,
        FaultKind::PartitionToClientStall,
        FaultKind::ServerPause,
        FaultKind::ServerRestartPersistent,
        FaultKind::ServerRestartVolatile,
        FaultKind::ServerClockJump,
        FaultKind::Failover,
        FaultKind::ReplicationCut,
        FaultKind::ClientPause,
        FaultKind::ClientKill,
        FaultKind::ClientClockJump,
        FaultKind::ResourcePause,
        FaultKind::ResourceRestart,
        FaultKind::LeaderKill,
        FaultKind::DiskStall,
        FaultKind::MasterKill,
        FaultKind::MasterPartition,
        FaultKind::SlotMigration,
        FaultKind::WaiterKill,
    ];

    /// A short stable name, as written in histories and the scorecard.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Latency => "latency",
            FaultKind::PartitionToServerDrop => "partition-to-server-drop",
            FaultKind::PartitionToServerStall => "partition-to-server-stall",
            FaultKind::PartitionToClientDrop => "partition-to-client-drop",
            FaultKind::PartitionToClientStall => "partition-to-client-stall",
            FaultKind::ServerPause => "server-pause",
            FaultKind::ServerRestartPersistent => "server-restart-fsync",
            FaultKind::ServerRestartVolatile => "server-restart-volatile",
            FaultKind::ServerClockJump => "server-clock-jump",
            FaultKind::Failover => "failover",
            FaultKind::ReplicationCut => "replication-cut",
            FaultKind::ClientPause => "client-pause",
            FaultKind::ClientKill => "client-kill",
            FaultKind::ClientClockJump => "client-clock-jump",
            FaultKind::ResourcePause => "resource-pause",
            FaultKind::ResourceRestart => "resource-restart",
            FaultKind::LeaderKill => "leader-kill",
            FaultKind::DiskStall => "disk-stall",
            FaultKind::MasterKill => "master-kill",
            FaultKind::MasterPartition => "master-partition",
            FaultKind::SlotMigration => "slot-migration",
            FaultKind::WaiterKill => "waiter-kill",
        }
    }

    /// The kind named `name` (see [`name`](Self::name)).
    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether tenure's leases are meant to stay exclusive under this fault
    /// (one at a time, on a minority of a quorum): double grants must be 0.
    /// The others — a client frozen past its TTL, a server forgetting or
    /// jumping its clock, a failover to a replica that missed writes (Redis
    /// replication is asynchronous: a killed or partitioned master's last
    /// grants may never reach the replica promoted in its place) — can hand a
    /// lease to two holders; there only the fenced resource protects, and the
    /// suite measures how often.
    pub fn tolerated(self) -> bool {
        !matches!(
            self,
            FaultKind::ClientPause
                | FaultKind::ServerRestartVolatile
                | FaultKind::ServerClockJump
                | FaultKind::Failover
                | FaultKind::MasterKill
                | FaultKind::MasterPartition
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One fault a scenario may draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpec {
    /// Which fault.
    pub kind: FaultKind,
    /// How many targets it can hit (servers, clients); one is drawn.
    pub targets: usize,
    /// How long it lasts: drawn in this range.
    pub duration: (Duration, Duration),
    /// Relative weight of this fault in the draw.
    pub weight: u32,
}

impl FaultSpec {
    /// A fault of weight 1.
    pub fn new(kind: FaultKind, targets: usize, duration: (Duration, Duration)) -> Self {
        FaultSpec {
            kind,
            targets,
            duration,
            weight: 1,
        }
    }

    /// The same with another weight.
    #[must_use]
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }
}

/// What a nemesis may do during a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Faults start within this time from the start of the run.
    pub run_for: Duration,
    /// Quiet time between the end of a fault and the start of the next.
    pub gap: (Duration, Duration),
    /// The faults to draw from.
    pub faults: Vec<FaultSpec>,
}

/// One scheduled fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// When it starts, from the start of the run.
    pub at: Duration,
    /// Which fault.
    pub kind: FaultKind,
    /// Which target (index into the scenario's servers or clients).
    pub target: usize,
    /// How long it lasts before it is healed.
    pub duration: Duration,
}

/// Draws the faults of `plan` from `seed`: one at a time, separated by a gap,
/// until `plan.run_for` is reached. Faults do not overlap, so each double grant
/// can be blamed on one fault kind.
pub fn schedule(seed: u64, plan: &Plan) -> Vec<Fault> {
    let mut rng = Rng::new(seed);
    let total: u64 = plan.faults.iter().map(|f| u64::from(f.weight)).sum();
    let mut out = Vec::new();
    let mut at = rng.between(plan.gap.0, plan.gap.1);
    while at < plan.run_for && total > 0 {
        let mut pick = rng.below(total);
        let Some(spec) = plan.faults.iter().find(|f| {
            let w = u64::from(f.weight);
            if pick < w {
                true
            } else {
                pick -= w;
                false
            }
        }) else {
            break;
        };
        let target = usize::try_from(rng.below(spec.targets as u64)).unwrap_or(0);
        let duration = rng.between(spec.duration.0, spec.duration.1);
        out.push(Fault {
            at,
            kind: spec.kind,
            target,
            duration,
        });
        at += duration + rng.between(plan.gap.0, plan.gap.1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            run_for: Duration::from_secs(60),
            gap: (Duration::from_millis(10), Duration::from_millis(500)),
            faults: vec![
                FaultSpec::new(
                    FaultKind::ServerPause,
                    3,
                    (Duration::from_millis(1), Duration::from_secs(2)),
                ),
                FaultSpec::new(
                    FaultKind::Latency,
                    5,
                    (Duration::from_millis(1), Duration::from_secs(1)),
                )
                .weight(3),
            ],
        }
    }

    #[test]
    fn a_seed_replays_its_schedule_and_seeds_differ() {
        assert_eq!(schedule(7, &plan()), schedule(7, &plan()));
        assert_ne!(schedule(7, &plan()), schedule(8, &plan()));
    }

    #[test]
    fn faults_do_not_overlap_and_stay_in_range() {
        let faults = schedule(99, &plan());
        assert!(faults.len() > 20);
        for w in faults.windows(2) {
            assert!(w[0].at + w[0].duration <= w[1].at);
        }
        for f in &faults {
            assert!(f.at < Duration::from_secs(60));
            let max = if f.kind == FaultKind::Latency { 5 } else { 3 };
            assert!(f.target < max);
        }
        let kinds: std::collections::HashSet<_> = faults.iter().map(|f| f.kind).collect();
        assert_eq!(kinds.len(), 2);
    }

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(FaultKind::from_name(k.name()), Some(k));
        }
    }
}
