//! The Redis scripts of gates (`redis/scripts/gate_*.lua`) and the pure steps
//! the memory, SQLite and etcd stores share (`gate/step.rs`) agree: the same
//! random sequences of looks and releases, on the memory store and on a real
//! redis-server, give the same answers, fences and places (TTLs long enough
//! that nothing expires during a run). Fences are floored by each store's
//! clock (the host's wall clock, the server's `TIME`), so they are compared
//! by their order of appearance, and both are checked to be at the clock.

#![allow(clippy::unwrap_used, missing_docs)]

use std::num::NonZeroU32;
use std::time::Duration;

use std::time::{SystemTime, UNIX_EPOCH};

use rand::{Rng, SeedableRng};
use tenure::Fence;
use tenure::gate::{GateAsk, GateKind, GateStore, Mode};
use tenure::lease::store::{AcquireReply, OwnerToken};
use tenure::memory::MemoryGates;
use tenure::redis::{RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(120);

/// The fences one store handed out, in order of appearance: a fence is
/// named by its index there.
#[derive(Default)]
struct Fences(Vec<Fence>);

impl Fences {
    /// The index of `fence`; a new fence must be above every earlier one
    /// and at the clock (same host, a second's slack).
    fn name(&mut self, fence: Fence) -> usize {
        if let Some(at) = self.0.iter().position(|f| *f == fence) {
            return at;
        }
        assert!(self.0.last().is_none_or(|last| *last < fence), "{fence}");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let now = u64::try_from(now.as_micros()).unwrap();
        assert!(
            fence.get() + 1_000_000 >= now,
            "{fence} below the clock {now}"
        );
        self.0.push(fence);
        self.0.len() - 1
    }
}

/// What a reply says, without the local deadline; fences by name.
fn shape(
    reply: &(AcquireReply, Option<tenure::lease::store::QueuePlace>),
    fences: &mut Fences,
) -> String {
    match &reply.0 {
        AcquireReply::Acquired { fence, .. } => format!("granted #{}", fences.name(*fence)),
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
    let (mut fa, mut fb) = (Fences::default(), Fences::default());
    for step in 0..60 {
        let (token, mode) = &tokens[rng.random_range(0..tokens.len())];
        if rng.random_bool(0.6) {
            let mut ask = GateAsk::new(token, *mode, TTL);
            ask.stand = rng.random_bool(0.7);
            let a = memory.look(&key, ask).await.unwrap();
            let b = redis.look(&key, ask).await.unwrap();
            let (a, b) = (shape(&a, &mut fa), shape(&b, &mut fb));
            assert_eq!(a, b, "seed {seed} step {step}: look");
        } else {
            let a = memory.release(*mode, &key, token).await.unwrap();
            let b = redis.release(*mode, &key, token).await.unwrap();
            assert_eq!(a, b, "seed {seed} step {step}: release");
        }
        let a = memory.status(kind, &key).await.unwrap();
        let b = redis.status(kind, &key).await.unwrap();
        let holders = |s: &tenure::gate::GateStatus, fences: &mut Fences| {
            s.holders
                .iter()
                .map(|h| (h.mode, fences.name(h.fence)))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            holders(&a, &mut fa),
            holders(&b, &mut fb),
            "seed {seed} step {step}: holders"
        );
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
