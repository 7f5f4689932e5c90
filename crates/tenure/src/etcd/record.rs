//! Fenced records on etcd: one key next to the lease key
//! (`{prefix}{key}\0record`), its value the fence in 20 zero-padded digits, a
//! space and the value. Fixed-width digits make etcd's byte-wise comparison
//! of values a comparison of fences, so every rule is one transaction.

use std::time::Duration;

use async_trait::async_trait;

use super::EtcdStore;
use super::api::etcdserverpb::compare::CompareResult;
use super::api::etcdserverpb::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use super::api::mvccpb::KeyValue;
use super::keys::{fence_digits, record_key};
use super::lease::first_kv;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::record::{PutOutcome, PutRule, Record, RecordStore};

impl EtcdStore {
    /// The etcd key of the record next to lease `key`.
    pub fn record_key(&self, key: &str) -> String {
        record_key(&self.lease_key(key))
    }
}

/// `record` as stored: `{fence:020} {value}`.
fn encode(record: &Record) -> Vec<u8> {
    let mut bytes = fence_digits(u128::from(record.fence.get())).into_bytes();
    bytes.push(b' ');
    bytes.extend_from_slice(&record.value);
    bytes
}

/// A stored record; anything else at its key is an [`Error::WrongType`].
fn decode(record_key: &str, kv: &KeyValue) -> Result<Record> {
    let value = kv.value.as_slice();
    let fence = value
        .get(..20)
        .filter(|_| value.get(20) == Some(&b' '))
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.parse::<u64>().ok())
        .ok_or_else(|| Error::WrongType {
            key: record_key.escape_default().to_string(),
            detail: "the value is not a tenure record (20-digit fence, a space, the value)".into(),
        })?;
    Ok(Record {
        fence: Fence::new(fence),
        value: value[21..].to_vec(),
    })
}

/// Compares a record's stored value with the first value of fence `fence`
/// and above: `Less` holds exactly for records of a lower fence.
fn below(record_key: &str, fence: u128) -> Compare {
    Compare::value(record_key, CompareResult::Less, fence_digits(fence))
}

#[async_trait]
impl RecordStore for EtcdStore {
    async fn get_record(&self, key: &str) -> Result<Option<Record>> {
        let record_key = self.record_key(key);
        self.get("read record", &record_key)
            .await?
            .map(|kv| decode(&record_key, &kv))
            .transpose()
    }

    async fn put_record(
        &self,
        key: &str,
        record: &Record,
        ttl: Option<Duration>,
        rule: PutRule,
    ) -> Result<PutOutcome> {
        let record_key = self.record_key(key);
        // A record that expires is bound to an etcd lease of its own.
        let lease = match ttl {
            Some(ttl) => Some(self.grant("write record", key, ttl).await?),
            None => None,
        };
        let mut put = PutRequest::new(record_key.as_str(), encode(record));
        if let Some(g) = lease {
            put = put.with_lease(g.id);
        }
        let put = RequestOp::put(put);
        let absent = Compare::create_revision(record_key.as_str(), CompareResult::Equal, 0);
        let read = RequestOp::get(RangeRequest::new(record_key.as_str()));
        // Written when absent; for `IfNotOlder` also over a record whose fence
        // is not above ours (a nested transaction: still one round trip).
        let otherwise = match rule {
            PutRule::IfAbsent => read,
            PutRule::IfNotOlder => RequestOp::txn(
                TxnRequest::new()
                    .when([below(&record_key, u128::from(record.fence.get()) + 1)])
                    .and_then([put.clone()])
                    .or_else([read]),
            ),
        };
        let txn = TxnRequest::new()
            .when([absent])
            .and_then([put])
            .or_else([otherwise]);
        let reply = self.txn("write record", key, txn).await?;
        let written = reply.succeeded
            || reply
                .responses
                .iter()
                .any(|r| r.as_txn().is_some_and(|inner| inner.succeeded));
        if written {
            return Ok(PutOutcome::Written);
        }
        if let Some(g) = lease {
            // The kept record has its own lease; ours holds nothing.
            self.revoke_in_background(g.id);
        }
        let responses = reply.responses.into_iter().flat_map(|r| {
            if r.as_txn().is_some() {
                r.into_txn()
                    .map(|inner| inner.responses)
                    .unwrap_or_default()
            } else {
                vec![r]
            }
        });
        match first_kv(responses.collect()) {
            Some(kv) => Ok(PutOutcome::Kept(decode(&record_key, &kv)?)),
            // Deleted between the compare and the read cannot happen within
            // one transaction.
            None => Err(Error::WrongType {
                key: record_key.escape_default().to_string(),
                detail: "the record vanished within its own transaction".into(),
            }),
        }
    }

    async fn delete_record(&self, key: &str, fence: Fence) -> Result<bool> {
        let record_key = self.record_key(key);
        let fence = u128::from(fence.get());
        // Carries `fence`: at least `{fence:020}` plus a space, below the next.
        let txn = TxnRequest::new()
            .when([
                Compare::value(
                    record_key.as_str(),
                    CompareResult::Greater,
                    fence_digits(fence),
                ),
                below(&record_key, fence + 1),
            ])
            .and_then([RequestOp::delete(record_key.as_str())]);
        let reply = self.txn("delete record", key, txn).await?;
        Ok(reply.succeeded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_encode_their_fence_in_fixed_width() {
        let record = Record {
            fence: Fence::new(42),
            value: b"node a".to_vec(),
        };
        assert_eq!(encode(&record), b"00000000000000000042 node a");
    }
}
