//! Small fenced records next to a lease: who leads an election, what a run-once
//! operation produced.
//!
//! A record is a value tagged with the [`Fence`] of the lease under which it
//! was written. Stores keep it apart from the lease key (the lease key's value
//! stays the plain owner token other clients understand) and write it with one
//! atomic compare-and-set, so a late write of a deposed holder can never
//! replace the record of a newer one.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::fence::Fence;

/// The record key of run-once results for the lease `key`. An election on the
/// same key records its leader under `key` itself; the results go apart, so
/// neither reads the other's record as its own nor replaces it. The separator
/// is a control character, which no user key may contain, so no other key's
/// record can land there.
pub(crate) fn result_key(key: &str) -> String {
    format!("{key}\u{1f}once")
}

/// A value written under a lease, tagged with that lease's fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The fence of the lease the value was written under.
    pub fence: Fence,
    /// The value.
    pub value: Vec<u8>,
}

/// When [`RecordStore::put_record`] may replace a stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PutRule {
    /// Only when there is none: the first write wins for good (run-once
    /// results: at most one recorded completion).
    IfAbsent,
    /// When there is none or its fence is not newer than the one written (a
    /// leader's id: a deposed leader cannot overwrite its successor's).
    IfNotOlder,
}

/// What [`RecordStore::put_record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub enum PutOutcome {
    /// The record was written.
    Written,
    /// The stored record was kept; here it is.
    Kept(Record),
}

/// Fenced records: what a store needs for [`election`](crate::election) and
/// [`once`](crate::once). Each call is atomic on the store.
#[async_trait]
pub trait RecordStore: Debug + Send + Sync + 'static {
    /// Reads the record of `key`, if any.
    async fn get_record(&self, key: &str) -> Result<Option<Record>>;

    /// Writes `record` under `key` if `rule` allows it, to expire after `ttl`
    /// (`None`: kept until replaced or deleted).
    async fn put_record(
        &self,
        key: &str,
        record: &Record,
        ttl: Option<Duration>,
        rule: PutRule,
    ) -> Result<PutOutcome>;

    /// Deletes the record of `key` if it carries `fence`; returns whether it
    /// did.
    async fn delete_record(&self, key: &str, fence: Fence) -> Result<bool>;
}
