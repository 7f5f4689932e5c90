//! Fenced records in this process's memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::{Clock, Moment, SystemClock};
use crate::error::Result;
use crate::fence::Fence;
use crate::record::{PutOutcome, PutRule, Record, RecordStore};

/// Records by key, each with its expiry (`None`: kept).
type Records = HashMap<String, (Record, Option<Moment>)>;

/// [`RecordStore`] in this process's memory: the records of a
/// [`Coordinator::memory`](crate::Coordinator::memory) handle's elections and run-once
/// operations.
#[derive(Debug, Clone, Default)]
pub struct MemoryRecords {
    records: Arc<Mutex<Records>>,
}

impl MemoryRecords {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        // Every update is a single insert or remove: poisoning cannot leave
        // the map half-updated.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn live(map: &mut Records, key: &str) -> Option<Record> {
        let now = SystemClock.now();
        if map
            .get(key)
            .is_some_and(|(_, expires)| expires.is_some_and(|e| e <= now))
        {
            map.remove(key);
        }
        map.get(key).map(|(r, _)| r.clone())
    }
}

#[async_trait]
impl RecordStore for MemoryRecords {
    async fn get_record(&self, key: &str) -> Result<Option<Record>> {
        Ok(Self::live(&mut self.lock(), key))
    }

    async fn put_record(
        &self,
        key: &str,
        record: &Record,
        ttl: Option<Duration>,
        rule: PutRule,
    ) -> Result<PutOutcome> {
        let mut map = self.lock();
        if let Some(current) = Self::live(&mut map, key) {
            let keep = match rule {
                PutRule::IfAbsent => true,
                PutRule::IfNotOlder => current.fence > record.fence,
            };
            if keep {
                return Ok(PutOutcome::Kept(current));
            }
        }
        let expires = ttl.map(|t| SystemClock.now() + t);
        map.insert(key.to_string(), (record.clone(), expires));
        Ok(PutOutcome::Written)
    }

    async fn delete_record(&self, key: &str, fence: Fence) -> Result<bool> {
        let mut map = self.lock();
        match Self::live(&mut map, key) {
            Some(r) if r.fence == fence => {
                map.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
