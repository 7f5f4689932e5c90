//! The shards of the in-process limit store and what they share: the count of
//! states held over all of them (the bound on keys is the store's, not a
//! shard's) and, per shard, when its first state expires, readable without
//! its lock.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::shard::{Read, Shard};

/// Sweep a shard after at least this many writes to the whole store (each
/// shard after its share of them), and at least as many writes as states the
/// shard kept at its last sweep (see `Shard::wrote`).
const SWEEP_EVERY: u64 = 4096;

/// The fewest and the most shards a store makes for itself (see
/// [`Shards::new`]).
const SHARDS: (usize, usize) = (32, 64);

/// The most shards: the shard's bits stay clear of the bits the table inside
/// uses on a 64-bit machine.
const MOST_SHARDS: usize = 64;

/// Bits of a hash left to the table inside a shard: hashbrown takes a
/// bucket's index from the low bits and its tag from the top 7, so the shard
/// is picked by the bits just below the tag.
const TAG_BITS: u32 = 7;

/// A value alone on its cache lines (two of 64 bytes: CPUs fetch lines in
/// pairs), so threads working on neighbouring shards do not contend for one.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// One shard and what others read of it without its lock.
#[derive(Debug)]
struct Cell {
    shard: Mutex<Shard>,
    /// The shard's [`next_expiry`](Shard::next_expiry), published when its
    /// lock is released.
    next_expiry: AtomicU64,
}

/// The shards of a store.
#[derive(Debug)]
pub(super) struct Shards {
    cells: Box<[Padded<Cell>]>,
    /// `log2` of the number of shards.
    bits: u32,
    /// The number of (key, policy) states held over all shards, and the room
    /// reserved for states about to be added (see [`reserve`](Self::reserve)).
    held: Padded<AtomicUsize>,
    /// Writes to a shard between its periodic sweeps, at least.
    sweep_every: u64,
}

/// A shard under its lock. Releasing it publishes when the shard's first
/// state expires, and takes the states its sweeps dropped off the store's
/// count.
pub(super) struct Locked<'a> {
    shard: MutexGuard<'a, Shard>,
    cell: &'a Cell,
    shards: &'a Shards,
}

impl Shards {
    /// Shards for this machine: four per CPU (as `DashMap`), but at least 32
    /// and at most 64, so that threads rarely meet on one lock. 32 measured
    /// better than 8 with 4 threads on 2 CPUs, at the same memory per key; a
    /// shard costs 128 bytes when empty.
    pub(super) fn new() -> Shards {
        // Asked once per process: std reads the cgroup's CPU quota from
        // files each time (about 25 µs a store).
        static CPUS: OnceLock<usize> = OnceLock::new();
        let cpus =
            *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Shards::with(cpus.saturating_mul(4).clamp(SHARDS.0, SHARDS.1))
    }

    /// About `n` shards (rounded to a power of two between 2 and 64).
    pub(super) fn with(n: usize) -> Shards {
        let n = n.clamp(2, MOST_SHARDS).next_power_of_two();
        let cells = (0..n).map(|_| Padded(Cell::new())).collect();
        Shards {
            cells,
            bits: n.trailing_zeros(),
            held: Padded(AtomicUsize::new(0)),
            sweep_every: (SWEEP_EVERY >> n.trailing_zeros()).max(1),
        }
    }

    /// The number of shards.
    pub(super) fn count(&self) -> usize {
        self.cells.len()
    }

    /// The shard of a key hashing to `hash`.
    pub(super) fn index(&self, hash: u64) -> usize {
        let below_tag = hash << TAG_BITS;
        // Only `bits` (at most 6) bits are left: the cast cannot truncate.
        (below_tag >> (u64::BITS - self.bits)) as usize
    }

    /// Writes to a shard between its periodic sweeps, at least.
    pub(super) fn sweep_every(&self) -> u64 {
        self.sweep_every
    }

    /// Shard `index` under its lock.
    #[inline]
    pub(super) fn lock(&self, index: usize) -> Locked<'_> {
        let cell = &self.cells[index].0;
        // A shard is consistent between statements: a panic elsewhere while
        // holding its lock cannot leave half a write behind.
        let shard = cell.shard.lock().unwrap_or_else(|e| e.into_inner());
        Locked {
            shard,
            cell,
            shards: self,
        }
    }

    /// The number of states held (and reserved).
    pub(super) fn held(&self) -> usize {
        self.held.0.load(Ordering::Acquire)
    }

    /// Reserves room for `n` more states if the store holds at most
    /// `max - n`; `false` (nothing reserved) when it is full.
    pub(super) fn reserve(&self, n: usize, max: usize) -> bool {
        self.held
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|after| *after <= max)
            })
            .is_ok()
    }

    /// Gives back room for `n` states (dropped, or reserved and not used).
    pub(super) fn release(&self, n: usize) {
        if n > 0 {
            self.held.0.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Counts a state added without a reservation.
    pub(super) fn add_unreserved(&self) {
        self.held.0.fetch_add(1, Ordering::AcqRel);
    }

    /// Takes the states `shard`'s sweeps dropped off the count.
    pub(super) fn settle(&self, shard: &mut Shard) {
        self.release(std::mem::take(&mut shard.dropped));
    }

    /// When the first state of a shard other than `except` expires (µs), as
    /// published: a lower bound, exact after their sweeps.
    pub(super) fn next_expiry_except(&self, except: usize) -> u64 {
        self.cells
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != except)
            .map(|(_, cell)| cell.0.next_expiry.load(Ordering::Acquire))
            .fold(u64::MAX, u64::min)
    }

    /// Sweeps the states expired at `read` from every shard, one lock at a
    /// time (two are never held at once).
    pub(super) fn sweep_all(&self, read: Read) {
        for index in 0..self.count() {
            self.lock(index).sweep_at(read);
        }
    }
}

impl Cell {
    fn new() -> Cell {
        Cell {
            shard: Mutex::new(Shard::default()),
            next_expiry: AtomicU64::new(u64::MAX),
        }
    }
}

impl Drop for Locked<'_> {
    #[inline]
    fn drop(&mut self) {
        let next = self.shard.next_expiry;
        if self.cell.next_expiry.load(Ordering::Relaxed) != next {
            self.cell.next_expiry.store(next, Ordering::Release);
        }
        if self.shard.dropped > 0 {
            self.shards.settle(&mut self.shard);
        }
    }
}

impl Deref for Locked<'_> {
    type Target = Shard;

    fn deref(&self) -> &Shard {
        &self.shard
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.shard
    }
}
