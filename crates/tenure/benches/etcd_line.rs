//! What the requests of a hand-off in an etcd waiting line cost on the
//! server, against the length of the line.
//!
//! A one-member etcd; for each line length (10, 100, 1 000 places, planted
//! as tenure plants them: `KEY\0line\0TOKEN`, empty values, on an etcd
//! lease) each request the line sends is timed, interleaved over the line
//! lengths and repeated; the medians are printed, and their ratio to a
//! one-key transaction measured in the same rounds. Write transactions keep
//! their writes off the line (a scratch key) so the line stays as planted.
//!
//! Run with `cargo bench -p tenure --features etcd --bench etcd_line`.

#![allow(clippy::unwrap_used, missing_docs, dead_code, unreachable_pub)]

#[path = "../src/etcd/api/mod.rs"]
mod api;

use std::time::Duration;

use api::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use api::etcdserverpb::kv_client::KvClient;
use api::etcdserverpb::lease_client::LeaseClient;
use api::etcdserverpb::range_request::{SortOrder, SortTarget};
use api::etcdserverpb::{
    Compare, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, request_op,
};
use tenure_test::EtcdCluster;
use tokio::time::Instant;
use tonic::transport::Channel;

const LENGTHS: [usize; 3] = [10, 100, 1000];
const ROUNDS: usize = 150;

/// One planted line: its lease key, prefix and range end, and the create
/// revisions of its first and last places.
struct Line {
    lease: Vec<u8>,
    prefix: Vec<u8>,
    end: Vec<u8>,
    first: (Vec<u8>, i64),
    last: (Vec<u8>, i64),
}

fn create_cmp(key: &[u8], end: &[u8], result: CompareResult, rev: i64) -> Compare {
    Compare {
        result: result.into(),
        target: CompareTarget::Create.into(),
        key: key.to_vec(),
        range_end: end.to_vec(),
        target_union: Some(TargetUnion::CreateRevision(rev)),
    }
}

fn get(range: RangeRequest) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(range)),
    }
}

fn put(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.to_vec(),
            value: b"x".to_vec(),
            ..PutRequest::default()
        })),
    }
}

fn range(key: &[u8], end: &[u8]) -> RangeRequest {
    RangeRequest {
        key: key.to_vec(),
        range_end: end.to_vec(),
        ..RangeRequest::default()
    }
}

fn by_create(line: &Line, order: SortOrder, limit: i64) -> RangeRequest {
    RangeRequest {
        sort_target: SortTarget::Create.into(),
        sort_order: order.into(),
        limit,
        ..range(&line.prefix, &line.end)
    }
}

const SCRATCH: &[u8] = b"bench/scratch";

/// The requests timed, by name: a transaction or a plain range read.
enum Request {
    Txn(TxnRequest),
    Range(RangeRequest),
}

fn requests(line: &Line) -> Vec<(&'static str, Request)> {
    let all = |c: CompareResult, rev: i64| create_cmp(&line.prefix, &line.end, c, rev);
    let lease_free = create_cmp(&line.lease, &[], CompareResult::Equal, 0);
    let lease_held = create_cmp(&line.lease, &[], CompareResult::Greater, 0);
    let mut before_all = line.prefix.clone();
    before_all.push(b'0');
    let ahead = RangeRequest {
        max_create_revision: line.last.1 - 1,
        ..by_create(line, SortOrder::Descend, 1)
    };
    let txn = |compare: Vec<Compare>, success: Vec<RequestOp>, failure: Vec<RequestOp>| {
        Request::Txn(TxnRequest {
            compare,
            success,
            failure,
        })
    };
    // A look by the waiter at `place`: the lease key free, its place there,
    // nobody created before it; `failure` is read when that does not hold.
    let look = |place: &(Vec<u8>, i64), failure: Vec<RequestOp>| {
        let (key, created) = place;
        txn(
            vec![
                lease_free.clone(),
                create_cmp(key, &[], CompareResult::Equal, *created),
                all(CompareResult::Greater, created - 1),
            ],
            vec![put(SCRATCH)],
            failure,
        )
    };
    // A stand: the lease key's state (`lease`), then "nobody in line"; when
    // either fails, the place is written and the newest two read.
    let stand = |lease: Compare| {
        txn(
            vec![lease, all(CompareResult::Equal, 0)],
            vec![],
            vec![
                put(SCRATCH),
                get(range(SCRATCH, &[])),
                get(by_create(line, SortOrder::Descend, 2)),
            ],
        )
    };
    vec![
        // One key compared, one key written: the floor of a write.
        (
            "base: 1-key txn + put",
            txn(
                vec![create_cmp(b"bench/none", &[], CompareResult::Equal, 0)],
                vec![put(SCRATCH)],
                vec![],
            ),
        ),
        // The head's look that takes the lease: every place compared.
        ("look (head): range cmp holds", look(&line.first, vec![])),
        // A look from behind: the compare fails, then reads who is ahead.
        (
            "look (last): cmp fails + ahead",
            look(
                &line.last,
                vec![get(range(&line.last.0, &[])), get(ahead.clone())],
            ),
        ),
        // A stand while the lease is free: "nobody in line" fails, then the
        // newest two places by create revision.
        ("stand (key free)", stand(lease_free.clone())),
        // A stand while the lease is held: the first compare fails at once,
        // the newest two places are still read.
        ("stand (key held)", stand(lease_held)),
        // A plain attempt while the key is free and the line is not empty.
        (
            "try_acquire (key free)",
            txn(
                vec![lease_free.clone(), all(CompareResult::Equal, 0)],
                vec![put(SCRATCH)],
                vec![
                    get(range(&line.lease, &[])),
                    get(by_create(line, SortOrder::Ascend, 1)),
                ],
            ),
        ),
        // The parts, as read-only requests (no Raft).
        (
            "ro: range cmp over line",
            txn(vec![all(CompareResult::Greater, 0)], vec![], vec![]),
        ),
        // A compare over an empty part of the line (tokens are hex: no
        // place sorts before `prefix + "0"`): what the head's compare would
        // cost were places named in the order of the line.
        (
            "ro: range cmp, empty sub-range",
            txn(
                vec![create_cmp(
                    &line.prefix,
                    &before_all,
                    CompareResult::Equal,
                    0,
                )],
                vec![],
                vec![],
            ),
        ),
        (
            "ro: newest 2 by create",
            Request::Range(by_create(line, SortOrder::Descend, 2)),
        ),
        ("ro: ahead (max_create_rev)", Request::Range(ahead)),
        (
            "ro: key order, limit 1",
            Request::Range(RangeRequest {
                limit: 1,
                ..range(&line.prefix, &line.end)
            }),
        ),
        (
            "ro: key order, limit 1, keys",
            Request::Range(RangeRequest {
                limit: 1,
                keys_only: true,
                ..range(&line.prefix, &line.end)
            }),
        ),
        (
            "ro: count_only",
            Request::Range(RangeRequest {
                count_only: true,
                ..range(&line.prefix, &line.end)
            }),
        ),
        ("ro: 1-key get", Request::Range(range(&line.lease, &[]))),
    ]
}

async fn plant(channel: &Channel, n: usize) -> Line {
    let mut kv = KvClient::new(channel.clone());
    let mut lease = LeaseClient::new(channel.clone());
    let id = lease
        .lease_grant(LeaseGrantRequest { ttl: 3600, id: 0 })
        .await
        .unwrap()
        .into_inner()
        .id;
    let lease_key = format!("tenure/lease/line-cost-{n}").into_bytes();
    let mut prefix = lease_key.clone();
    prefix.extend_from_slice(b"\0line\0");
    let mut end = prefix.clone();
    *end.last_mut().unwrap() += 1;
    let mut places = Vec::new();
    for _ in 0..n {
        let token = format!("{:032x}", rand::random::<u128>());
        let mut key = prefix.clone();
        key.extend_from_slice(token.as_bytes());
        let reply = kv
            .put(PutRequest {
                key: key.clone(),
                lease: id,
                ..PutRequest::default()
            })
            .await
            .unwrap()
            .into_inner();
        places.push((key, reply.header.unwrap().revision));
    }
    Line {
        lease: lease_key,
        prefix,
        end,
        first: places.first().cloned().unwrap(),
        last: places.last().cloned().unwrap(),
    }
}

async fn time(kv: &mut KvClient<Channel>, request: &Request) -> Duration {
    let start = Instant::now();
    match request {
        Request::Txn(t) => {
            kv.txn(t.clone()).await.unwrap();
        }
        Request::Range(r) => {
            kv.range(r.clone()).await.unwrap();
        }
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let etcd = EtcdCluster::start(1);
    let channel = Channel::from_shared(format!("http://{}", etcd.member(0).addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut kv = KvClient::new(channel.clone());
    let mut lines = Vec::new();
    for n in LENGTHS {
        lines.push(plant(&channel, n).await);
    }
    let sets: Vec<_> = lines.iter().map(requests).collect();
    let kinds = sets[0].len();
    let mut samples = vec![vec![Vec::with_capacity(ROUNDS); kinds]; LENGTHS.len()];
    for round in 0..ROUNDS + 10 {
        for (i, set) in sets.iter().enumerate() {
            for (k, (_, request)) in set.iter().enumerate() {
                let took = time(&mut kv, request).await;
                if round >= 10 {
                    samples[i][k].push(took);
                }
            }
        }
    }
    println!(
        "etcd {} — medians of {ROUNDS} interleaved rounds, µs (× the 1-key txn of the same line length)",
        etcd.member(0).addr()
    );
    print!("{:<32}", "request");
    for n in LENGTHS {
        print!("{:>20}", format!("{n} places"));
    }
    println!();
    let medians: Vec<Vec<Duration>> = samples
        .into_iter()
        .map(|per_kind| per_kind.into_iter().map(median).collect())
        .collect();
    for k in 0..kinds {
        print!("{:<32}", sets[0][k].0);
        for m in &medians {
            let us = m[k].as_secs_f64() * 1e6;
            let ratio = m[k].as_secs_f64() / m[0].as_secs_f64();
            print!("{:>20}", format!("{us:.0} ({ratio:.2}×)"));
        }
        println!();
    }
}
