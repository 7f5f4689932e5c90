//! Fenced records on one Redis master: a hash `{prefix}{key}:record` with the
//! fields `fence` and `value`, written by one script.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::RedisStore;
use super::keys::millis;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::record::{PutOutcome, PutRule, Record, RecordStore};

const PUT_LUA: &str = include_str!("scripts/record_put.lua");
const DELETE_LUA: &str = include_str!("scripts/record_delete.lua");
static PUT: LazyLock<Script> = LazyLock::new(|| Script::new(PUT_LUA));
static DELETE: LazyLock<Script> = LazyLock::new(|| Script::new(DELETE_LUA));

impl RedisStore {
    /// The Redis key of the record next to the lease `key` (same hash slot).
    pub fn record_key(&self, key: &str) -> String {
        self.keys().record(key)
    }
}

fn parse_fence(key: &str, raw: &[u8]) -> Result<Fence> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Fence::new)
        .ok_or_else(|| Error::WrongType {
            key: key.to_string(),
            detail: "the record's fence is not an integer".into(),
        })
}

#[async_trait]
impl RecordStore for RedisStore {
    async fn get_record(&self, key: &str) -> Result<Option<Record>> {
        let record_key = self.record_key(key);
        let (fence, value): (Option<Vec<u8>>, Option<Vec<u8>>) = self
            .conn()
            .call("read record", &record_key, |mut c| {
                let record_key = &record_key;
                async move {
                    redis::cmd("HMGET")
                        .arg(record_key)
                        .arg("fence")
                        .arg("value")
                        .query_async(&mut c)
                        .await
                }
            })
            .await?;
        match fence {
            None => Ok(None),
            Some(raw) => Ok(Some(Record {
                fence: parse_fence(&record_key, &raw)?,
                value: value.unwrap_or_default(),
            })),
        }
    }

    async fn put_record(
        &self,
        key: &str,
        record: &Record,
        ttl: Option<Duration>,
        rule: PutRule,
    ) -> Result<PutOutcome> {
        let record_key = self.record_key(key);
        let ttl_ms = ttl.map_or(0, |t| millis(t).max(1));
        // A new leader's record is announced on the lease's release channel,
        // so that observers (who wait there for a release) learn of the new
        // leader without polling.
        let (rule, channel) = match rule {
            PutRule::IfAbsent => ("absent", String::new()),
            PutRule::IfNotOlder => ("not-older", self.keys().released(key)),
        };
        let mut invocation = PUT.key(&record_key);
        invocation
            .arg(record.fence.get())
            .arg(&record.value)
            .arg(ttl_ms)
            .arg(rule)
            .arg(channel);
        let reply: (i64, Option<Vec<u8>>, Option<Vec<u8>>) = self
            .conn()
            .script("write record", &record_key, &invocation)
            .await?;
        match reply {
            (1, _, _) => Ok(PutOutcome::Written),
            (_, Some(fence), value) => Ok(PutOutcome::Kept(Record {
                fence: parse_fence(&record_key, &fence)?,
                value: value.unwrap_or_default(),
            })),
            _ => Err(Error::WrongType {
                key: record_key,
                detail: "unexpected reply of the record script".into(),
            }),
        }
    }

    async fn delete_record(&self, key: &str, fence: Fence) -> Result<bool> {
        let record_key = self.record_key(key);
        let mut invocation = DELETE.key(&record_key);
        invocation.arg(fence.get());
        let deleted: i64 = self
            .conn()
            .script("delete record", &record_key, &invocation)
            .await?;
        Ok(deleted == 1)
    }
}
