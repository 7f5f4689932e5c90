//! The in-process store: leases ([`MemoryStore`]) and rate-limit state
//! ([`MemoryLimits`]) kept in this process's memory.
//!
//! Use it for unit tests, single-process programs and as the local fallback of a
//! limiter. It coordinates nothing across processes: two processes each have
//! their own store.

mod gate;
mod lease;
mod limit;
mod record;

pub use gate::MemoryGates;
pub use lease::MemoryStore;
pub use limit::{DEFAULT_MAX_KEYS, MemoryLimits};
pub use record::MemoryRecords;
