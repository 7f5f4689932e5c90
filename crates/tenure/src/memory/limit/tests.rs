//! The in-process limit store's own tests: the clock read before the lock,
//! the bound on keys over shards, and held keys stepped in place.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::limit::Mode;

/// Admissions of one-unit requests on one key of a fresh store (1000/s,
/// burst 2, GCRA), decided in the order given, each at its clock reading
/// (µs after an origin).
fn admitted(readings_us: &[u64]) -> Vec<bool> {
    let quota = Quota::per_second(NonZeroU32::new(1000).expect("1000"))
        .burst(NonZeroU32::new(2).expect("2"));
    let policies = [Policy::new(quota, Algorithm::Gcra).expect("policy")];
    let store = MemoryLimits::new();
    let request = LimitRequest::new("k", &policies, 1, Mode::Consume);
    readings_us
        .iter()
        .map(|us| {
            let read = Read::Own(Timestamp::from_micros(1_000_000_000 + us));
            store.decide_read(&request, read).expect("decision").allowed
        })
        .collect()
}

#[test]
fn a_decision_overtaken_between_its_clock_reading_and_the_lock_is_not_refused_for_it() {
    // Requests that read the clock at 0, 0.5 ms and 1 ms: the quota admits
    // all three when each is decided in the order of its reading.
    assert_eq!(admitted(&[0, 500, 1_000]), [true, true, true]);
    // The one that read 0.5 ms takes the lock after the one that read
    // 1 ms: it is decided as if it came right after it, not charged for
    // the other's later arrival.
    assert_eq!(admitted(&[0, 1_000, 500]), [true, true, true]);
}

/// An instant of the tests' own time line, µs after which they count.
const T0: u64 = 1_700_000_000_000_000;

/// 5 a second, sliding log: a key used at `t` is fresh again at `t` + 1 s.
fn five_a_second() -> [Policy; 1] {
    let quota = Quota::per_second(NonZeroU32::new(5).expect("5"));
    [Policy::new(quota, Algorithm::SlidingLog).expect("policy")]
}

/// A store of `shards` shards bounded to `max_keys` keys.
fn sharded(shards: usize, max_keys: usize) -> MemoryLimits {
    MemoryLimits::with_shards(Shards::with(shards)).max_keys(max_keys)
}

/// A decision on `key`, `at` µs after [`T0`].
fn decide(store: &MemoryLimits, key: &str, mode: Mode, at: u64) -> Decision {
    let policies = five_a_second();
    let request = LimitRequest::new(key, &policies, 1, mode);
    let read = Read::Given(Timestamp::from_micros(T0 + at));
    store.decide_read(&request, read).expect("decision")
}

fn take(store: &MemoryLimits, key: &str, at: u64) -> Decision {
    decide(store, key, Mode::Consume, at)
}

fn shard_of(store: &MemoryLimits, key: &str) -> usize {
    store.inner.shards.index(store.hash(key))
}

/// A key named `prefix…` whose shard is `shard`.
fn key_in(store: &MemoryLimits, shard: usize, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|key| shard_of(store, key) == shard)
        .expect("every shard is picked by some key")
}

#[test]
fn the_bound_on_keys_holds_over_all_shards() {
    let store = sharded(16, 4);
    assert_eq!(store.inner.shards.count(), 16);
    // Four keys in four shards: 0 (used at 0 ms), 1 (1 ms), 2 (2 ms), 3 (3 ms).
    let held: Vec<String> = (0..4).map(|s| key_in(&store, s, "held:")).collect();
    for (at, key) in (0..).step_by(1_000).zip(&held) {
        assert!(take(&store, key, at).allowed, "{key}");
    }
    assert_eq!(store.len(), 4);
    // A new key in a fifth shard: the store is full of live keys, so it waits
    // until the first of them (in shard 0) is fresh again, at 1 s.
    let new = key_in(&store, 4, "new:");
    let refused = take(&store, &new, 500_000);
    assert!(!refused.allowed, "{refused:?}");
    assert_eq!(refused.remaining, 0);
    assert_eq!(refused.retry_after, Some(Duration::from_micros(500_000)));
    // Peeks and keys already held are never refused for room.
    assert!(decide(&store, &new, Mode::Peek, 500_000).allowed);
    assert!(take(&store, &held[3], 500_000).allowed);
    assert_eq!(store.len(), 4);
    // Once the key in shard 0 is fresh, dropping it forgets nothing: the new
    // key gets its room, in its own shard.
    assert!(take(&store, &new, 1_000_000).allowed);
    assert_eq!(store.len(), 4);
    // Full again: the next key waits for the key in shard 1 (fresh at 1.001 s).
    let newer = key_in(&store, 5, "newer:");
    let refused = take(&store, &newer, 1_000_500);
    assert_eq!(refused.retry_after, Some(Duration::from_micros(500)));
    assert_eq!(store.len(), 4);
}

#[test]
fn expired_keys_of_another_shard_make_room_even_before_a_periodic_sweep() {
    // Every shard but one filled with keys used at 0; the new key's own
    // shard holds nothing to sweep.
    let store = sharded(4, 30);
    let empty = 3;
    let mut added = 0;
    for i in 0.. {
        let key = format!("old:{i}");
        if shard_of(&store, &key) != empty {
            assert!(take(&store, &key, 0).allowed);
            added += 1;
        }
        if added == 30 {
            break;
        }
    }
    let new = key_in(&store, empty, "new:");
    assert!(!take(&store, &new, 999_999).allowed);
    assert!(take(&store, &new, 1_000_000).allowed);
    assert_eq!(store.len(), 1, "every expired key was swept to make room");
}

#[tokio::test]
async fn a_reset_key_gives_back_its_room() {
    let store = sharded(16, 2);
    let policies = five_a_second();
    let (a, b) = (key_in(&store, 0, "a:"), key_in(&store, 1, "b:"));
    let c = key_in(&store, 2, "c:");
    assert!(take(&store, &a, 0).allowed && take(&store, &b, 0).allowed);
    assert!(!take(&store, &c, 0).allowed);
    store.reset(&a, &policies).await.expect("reset");
    assert_eq!(store.len(), 1);
    assert!(take(&store, &c, 0).allowed);
    assert_eq!(store.len(), 2);
}

/// Keys `thread:i` for i in `0..keys` taken on each of four threads at `at`:
/// how many were admitted.
fn on_four_threads(store: &MemoryLimits, keys: usize, at: u64) -> usize {
    let admitted = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let admitted = &admitted;
            scope.spawn(move || {
                for i in 0..keys {
                    if take(store, &format!("{thread}:{at}:{i}"), at).allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn threads_adding_distinct_keys_get_exactly_the_bound() {
    for shards in [4, 64] {
        let store = sharded(shards, 100);
        assert_eq!(on_four_threads(&store, 1_000, 0), 100, "{shards} shards");
        assert_eq!(store.len(), 100);
        // Two seconds later every key is fresh again: the next 100 get in,
        // each making room by sweeping whichever shards hold expired keys.
        assert_eq!(
            on_four_threads(&store, 50, 2_000_000),
            100,
            "{shards} shards"
        );
        assert_eq!(store.len(), 100);
    }
}

#[test]
fn the_count_of_keys_stays_exact_under_threads_that_add_expire_and_reset() {
    let store = sharded(8, 100);
    let policies = five_a_second();
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let (store, policies) = (&store, &policies);
            scope.spawn(move || {
                for i in 0..5_000u64 {
                    // 500 keys over 5 s of the tests' time line, each used
                    // key fresh again 1 s later; now and then one is reset.
                    let key = format!("k{}", (i * 7 + thread * 13) % 500);
                    if i % 50 == 0 {
                        store.forget(&key, policies);
                    } else {
                        let _ = take(store, &key, i * 1_000);
                    }
                    assert!(store.len() <= 100, "{} keys", store.len());
                }
            });
        }
    });
    let counted: usize = (0..store.inner.shards.count())
        .map(|index| store.inner.shards.lock(index).len)
        .sum();
    assert_eq!(store.len(), counted);
}

#[test]
fn a_held_key_is_stepped_in_place_as_the_pure_step_steps_it() {
    use crate::limit::store::{State, keep, step};
    let quota =
        Quota::per_second(NonZeroU32::new(4).expect("4")).burst(NonZeroU32::new(3).expect("3"));
    let modes = [
        Mode::Consume,
        Mode::Peek,
        Mode::Refund,
        Mode::Reserve(Duration::from_secs(1)),
    ];
    for algorithm in Algorithm::ALL {
        let policies = [Policy::new(quota, algorithm).expect("policy")];
        let store = MemoryLimits::new();
        let mut state: Option<State> = None;
        for i in 0..240u64 {
            let mode = modes[usize::try_from(i % 4).expect("small")];
            let cost = 1 + u32::try_from(i / 4 % 3).expect("small");
            let now = Timestamp::from_micros(T0 + i * 70_000);
            let request = LimitRequest::new("k", &policies, cost, mode);
            let got = store
                .decide_read(&request, Read::Given(now))
                .expect("decision");
            let stepped = step(&policies[0], "k", state.as_ref(), now, cost, mode).expect("step");
            let want = stepped.decision;
            let commit = want.allowed || mode == Mode::Refund;
            if let Some(next) = keep(stepped.next, &policies[0], commit) {
                state = Some(next.state);
            }
            assert_eq!(got, want, "{algorithm}, request {i}: {mode:?} of {cost}");
        }
    }
}

/// The default clock (the processor's counter, scaled) keeps pace with the
/// OS's: what it counts over a real sleep lies between the OS clock's
/// readings just inside and just outside its own two (a preemption between
/// two reads widens the bracket, never breaks it), give or take 1 %.
#[test]
fn the_counter_clock_keeps_pace_with_the_os_clock() {
    use std::time::Instant;
    let store = MemoryLimits::new();
    let (outer_start, start, inner_start) = (Instant::now(), store.now(), Instant::now());
    std::thread::sleep(Duration::from_millis(50));
    let (inner_end, end, outer_end) = (Instant::now(), store.now(), Instant::now());
    let counted = Duration::from_micros(end.as_micros() - start.as_micros());
    let (inner, outer) = (inner_end - inner_start, outer_end - outer_start);
    assert!(
        counted >= inner.mul_f64(0.99),
        "{counted:?} counted, {inner:?} inside"
    );
    assert!(
        counted <= outer.mul_f64(1.01) + Duration::from_micros(2),
        "{counted:?} counted, {outer:?} outside"
    );
}

/// A store made with `tokio_clock` decides on tokio's clock: a paused clock
/// advanced by an hour moves the store's time by exactly an hour.
#[tokio::test(start_paused = true)]
async fn a_tokio_clock_store_follows_the_paused_clock() {
    let store = MemoryLimits::new().tokio_clock();
    let before = store.now();
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(store.now().as_micros() - before.as_micros(), 3_600_000_000);
}

/// A store made with `new` keeps to the processor's counter: an hour of a
/// paused tokio clock's `advance` does not move it (the counter counts only
/// the real time the test takes).
#[tokio::test(start_paused = true)]
async fn a_default_store_does_not_follow_the_paused_clock() {
    let store = MemoryLimits::new();
    let before = store.now();
    tokio::time::advance(Duration::from_secs(3600)).await;
    let moved = store.now().as_micros() - before.as_micros();
    assert!(moved < 60_000_000, "{moved} µs after an hour's advance");
}

/// The periodic sweep keeps up with a shard to which every write adds a key.
/// Before, once a sweep had run the next one waited for as many writes as the
/// shard held states, which writes that each add a state never reach: the
/// shard kept its expired keys until the store was full.
#[test]
fn expired_keys_are_swept_while_every_write_adds_a_key() {
    // 64 shards: a periodic sweep after 64 writes to a shard at least.
    let store = sharded(64, DEFAULT_MAX_KEYS);
    let mut in_shard_0 = (0..)
        .map(|i| format!("key:{i}"))
        .filter(|key| shard_of(&store, key) == 0);
    let mut add = |keys: usize, at: u64| {
        for key in in_shard_0.by_ref().take(keys) {
            assert!(take(&store, &key, at).allowed, "{key} at {at} µs");
        }
    };
    // Keys used at 0 and at 0.9 s; at 1.6 s a sweep drops the first ones
    // (fresh again since 1 s) and keeps the others (live until 1.9 s), and
    // 200 new keys follow.
    add(50, 0);
    add(100, 900_000);
    add(200, 1_600_000);
    assert_eq!(store.len(), 300);
    // At 3.5 s every one of them has read as fresh for half a second (a
    // periodic sweep's grace): among 100 new keys a sweep drops them.
    add(100, 3_500_000);
    assert_eq!(store.len(), 100, "the expired keys were not swept");
}
