//! The Redis scripts of gates (`redis/scripts/gate_*.lua`) and the pure steps
//! the memory, SQLite and etcd stores share (`gate/step.rs`) agree: the same
//! random sequences of looks and releases, on the memory store and on a real
//! redis-server, give the same answers, fences and places (TTLs long enough
//! that nothing expires during a run).

#![allow(clippy::unwrap_used, missing_docs)]

use std::num::NonZeroU32;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tenure::gate::{GateAsk, GateKind, GateStore, Mode};
use tenure::lease::store::{AcquireReply, OwnerToken};
use tenure::memory::MemoryGates;
use tenure::redis::{RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(120);

/// What a reply says, without the local deadline.
fn shape(reply: &(AcquireReply, Option<tenure::lease::store::QueuePlace>)) -> String {
    match &reply.0 {
        AcquireReply::Acquired { fence, .. } => format!("granted {fence}"),
        AcquireReply::Held { .. } => format!("refused, in line: {}", reply.1.is_some()),
        other => format!("{other:?}"),
    }
}

async fn run(seed: u64, kind: GateKind, redis: &RedisStore) {
    let memory = MemoryGates::new();
    let key = format!("diff:{seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tokens: Vec<(OwnerToken, Mode)> = (0..6)
        .map(|i| {
            let mode = match kind {
                GateKind::ReadWrite if i % 3 == 0 => Mode::Write,
                GateKind::ReadWrite => Mode::Read,
                _ => Mode::Permit(NonZeroU32::new(2).unwrap()),
            };
            (OwnerToken::generate().unwrap(), mode)
        })
        .collect();
    for step in 0..60 {
        let (token, mode) = &tokens[rng.random_range(0..tokens.len())];
        if rng.random_bool(0.6) {
            let mut ask = GateAsk::new(token, *mode, TTL);
            ask.stand = rng.random_bool(0.7);
            let a = memory.look(&key, ask).await.unwrap();
            let b = redis.look(&key, ask).await.unwrap();
            assert_eq!(shape(&a), shape(&b), "seed {seed} step {step}: look");
        } else {
            let a = memory.release(*mode, &key, token).await.unwrap();
            let b = redis.release(*mode, &key, token).await.unwrap();
            assert_eq!(a, b, "seed {seed} step {step}: release");
        }
        let a = memory.status(kind, &key).await.unwrap();
        let b = redis.status(kind, &key).await.unwrap();
        let holders = |s: &tenure::gate::GateStatus| {
            s.holders
                .iter()
                .map(|h| (h.mode, h.fence))
                .collect::<Vec<_>>()
        };
        assert_eq!(holders(&a), holders(&b), "seed {seed} step {step}: holders");
        assert_eq!(a.waiting, b.waiting, "seed {seed} step {step}: line");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_scripts_and_pure_steps_agree() {
    let server = tenure_test::RedisServer::start();
    let redis = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    for seed in 0..20 {
        run(seed, GateKind::ReadWrite, &redis).await;
        run(seed, GateKind::Semaphore, &redis).await;
    }
}
