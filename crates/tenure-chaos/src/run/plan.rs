//! The faults a scenario draws, with their durations and weights.

use std::time::Duration;

use tenure_test::nemesis::{FaultKind, FaultSpec, Plan};

use super::{MS, Scenario, Settings};

/// The durations a fault kind is drawn from.
type Span = (Duration, Duration);

/// Clients frozen past their TTL.
fn client_pause(clients: usize, ttl: Duration) -> FaultSpec {
    FaultSpec::new(FaultKind::ClientPause, clients, (ttl + 200 * MS, ttl * 3)).weight(2)
}

/// Latency, partitions of either direction and a paused server, on `nodes`
/// Redis servers behind their proxies.
fn network_and_pause(nodes: usize, long: Span) -> Vec<FaultSpec> {
    let mut f = vec![FaultSpec::new(FaultKind::Latency, nodes, long).weight(2)];
    for k in [
        FaultKind::PartitionToServerDrop,
        FaultKind::PartitionToServerStall,
        FaultKind::PartitionToClientDrop,
        FaultKind::PartitionToClientStall,
    ] {
        f.push(FaultSpec::new(k, nodes, long));
    }
    f.push(FaultSpec::new(FaultKind::ServerPause, nodes, long).weight(2));
    f
}

/// The store's faults of scenario `s` (before the resource's and the filter).
fn store_faults(s: &Settings, short: Span, long: Span) -> Vec<FaultSpec> {
    let (ttl, clients, nodes) = (s.ttl, s.clients, s.scenario.nodes());
    // Every client thread can be frozen; of processes, the slots.
    let paused = if s.scenario.processes() {
        clients
    } else {
        clients + s.set_clients + s.rw_clients
    };
    let keys = usize::try_from(s.keys).unwrap_or(1);
    match s.scenario {
        Scenario::Sqlite => vec![
            client_pause(paused, ttl),
            FaultSpec::new(FaultKind::ClientKill, clients, short).weight(2),
            FaultSpec::new(FaultKind::ClientClockJump, clients, long).weight(2),
            FaultSpec::new(FaultKind::WaiterKill, 1, short),
        ],
        Scenario::Redis | Scenario::Quorum3 | Scenario::Quorum5 => {
            let mut f = network_and_pause(nodes, long);
            f.push(FaultSpec::new(FaultKind::ServerRestartPersistent, nodes, short).weight(2));
            f.push(FaultSpec::new(
                FaultKind::ServerRestartVolatile,
                nodes,
                short,
            ));
            f.push(FaultSpec::new(FaultKind::ServerClockJump, nodes, long));
            f.push(client_pause(paused, ttl));
            f
        }
        Scenario::Replicated => {
            let mut f = network_and_pause(1, long);
            f.push(FaultSpec::new(FaultKind::ReplicationCut, 1, long).weight(2));
            f.push(FaultSpec::new(FaultKind::Failover, 1, long).weight(2));
            f.push(client_pause(paused, ttl));
            f
        }
        Scenario::Etcd3 => {
            // Partitions between the clients and one member (each member
            // behind its own proxy), a member frozen, its disk frozen, the
            // leader killed.
            let mut f = network_and_pause(nodes, long);
            f.push(FaultSpec::new(FaultKind::LeaderKill, 1, short).weight(2));
            f.push(FaultSpec::new(FaultKind::DiskStall, nodes, long).weight(2));
            f.push(client_pause(paused, ttl));
            f
        }
        Scenario::Cluster => {
            // Network faults on one master's client side; pauses shorter than
            // the node timeout (longer ones are failovers: master-partition).
            let mut f = network_and_pause(nodes, long);
            f.retain(|spec| spec.kind != FaultKind::ServerPause);
            let brief = (100 * MS, super::CLUSTER_NODE_TIMEOUT * 4 / 5);
            let failover = (ttl / 2, super::CLUSTER_NODE_TIMEOUT * 3);
            f.push(FaultSpec::new(FaultKind::ServerPause, nodes, brief));
            f.push(FaultSpec::new(FaultKind::MasterKill, keys, failover).weight(2));
            f.push(FaultSpec::new(FaultKind::MasterPartition, keys, failover).weight(2));
            f.push(FaultSpec::new(FaultKind::SlotMigration, keys, short).weight(2));
            f.push(client_pause(paused, ttl));
            f
        }
        Scenario::Sentinel => vec![
            // Sentinels declare the master down after 1 s: a kill longer
            // than that is a failover while leases are held.
            FaultSpec::new(FaultKind::MasterKill, 1, (ttl / 2, ttl * 4)).weight(3),
            FaultSpec::new(FaultKind::ServerPause, 1, (100 * MS, 800 * MS)),
            client_pause(paused, ttl),
        ],
        Scenario::Line => vec![
            FaultSpec::new(FaultKind::WaiterKill, 1, short).weight(3),
            FaultSpec::new(FaultKind::ClientKill, clients, short),
        ],
    }
}

/// The faults a scenario draws, with their durations.
pub fn plan(s: &Settings) -> Plan {
    let ttl = s.ttl;
    let short = (50 * MS, ttl / 2);
    let long = (100 * MS, ttl * 2 + 500 * MS);
    let mut f = store_faults(s, short, long);
    if s.postgres {
        f.push(FaultSpec::new(FaultKind::ResourcePause, 1, long));
        f.push(FaultSpec::new(FaultKind::ResourceRestart, 1, short));
    }
    if let Some(only) = &s.only {
        f.retain(|spec| only.contains(&spec.kind));
    }
    Plan {
        run_for: s.duration,
        gap: (100 * MS, 600 * MS),
        faults: f,
    }
}
