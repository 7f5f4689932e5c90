//! Building etcd requests and reading their replies: short constructors on
//! the generated messages, so the store reads like etcd's own transactions
//! (`when … and_then … or_else`).

use super::api::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use super::api::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::api::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseOp,
    TxnRequest, TxnResponse, request_op, response_op,
};
use super::api::mvccpb::KeyValue;

impl TxnRequest {
    /// A transaction with no compare and no operation.
    pub(super) fn new() -> TxnRequest {
        TxnRequest::default()
    }

    /// Adds compares; the transaction succeeds when all of them hold.
    pub(super) fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> TxnRequest {
        self.compare.extend(compares);
        self
    }

    /// Adds operations run when the compares hold.
    pub(super) fn and_then(mut self, ops: impl IntoIterator<Item = RequestOp>) -> TxnRequest {
        self.success.extend(ops);
        self
    }

    /// Adds operations run when a compare fails.
    pub(super) fn or_else(mut self, ops: impl IntoIterator<Item = RequestOp>) -> TxnRequest {
        self.failure.extend(ops);
        self
    }
}

impl Compare {
    fn new(key: impl Into<Vec<u8>>, result: CompareResult, target: TargetUnion) -> Compare {
        let kind = match target {
            TargetUnion::Version(_) => CompareTarget::Version,
            TargetUnion::CreateRevision(_) => CompareTarget::Create,
            TargetUnion::ModRevision(_) => CompareTarget::Mod,
            TargetUnion::Value(_) => CompareTarget::Value,
            TargetUnion::Lease(_) => CompareTarget::Lease,
        };
        Compare {
            result: result.into(),
            target: kind.into(),
            key: key.into(),
            range_end: Vec::new(),
            target_union: Some(target),
        }
    }

    /// Compares the value of `key` (byte-wise).
    pub(super) fn value(
        key: impl Into<Vec<u8>>,
        result: CompareResult,
        value: impl Into<Vec<u8>>,
    ) -> Compare {
        Compare::new(key, result, TargetUnion::Value(value.into()))
    }

    /// Compares the etcd lease `key` is bound to (0: none).
    pub(super) fn lease(key: impl Into<Vec<u8>>, result: CompareResult, id: i64) -> Compare {
        Compare::new(key, result, TargetUnion::Lease(id))
    }

    /// Compares the create revision of `key` (0: it does not exist).
    pub(super) fn create_revision(
        key: impl Into<Vec<u8>>,
        result: CompareResult,
        revision: i64,
    ) -> Compare {
        Compare::new(key, result, TargetUnion::CreateRevision(revision))
    }

    /// Compares every key in `[key, end)` instead of `key` alone.
    pub(super) fn with_range(mut self, end: Vec<u8>) -> Compare {
        self.range_end = end;
        self
    }
}

impl RangeRequest {
    /// Reads `key`.
    pub(super) fn new(key: impl Into<Vec<u8>>) -> RangeRequest {
        RangeRequest {
            key: key.into(),
            ..RangeRequest::default()
        }
    }

    /// Reads every key in `[key, end)`.
    pub(super) fn with_range(mut self, end: Vec<u8>) -> RangeRequest {
        self.range_end = end;
        self
    }

    /// Sorts by `target`, in `order`.
    pub(super) fn with_sort(mut self, target: SortTarget, order: SortOrder) -> RangeRequest {
        self.sort_target = target.into();
        self.sort_order = order.into();
        self
    }

    /// Returns at most `limit` keys (the count is of all of them).
    pub(super) fn with_limit(mut self, limit: i64) -> RangeRequest {
        self.limit = limit;
        self
    }

    /// Returns keys without values.
    pub(super) fn with_keys_only(mut self) -> RangeRequest {
        self.keys_only = true;
        self
    }

    /// Returns only the count.
    pub(super) fn with_count_only(mut self) -> RangeRequest {
        self.count_only = true;
        self
    }

    /// Only keys created at `revision` or before.
    pub(super) fn with_max_create_revision(mut self, revision: i64) -> RangeRequest {
        self.max_create_revision = revision;
        self
    }
}

impl PutRequest {
    /// Writes `value` at `key`.
    pub(super) fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> PutRequest {
        PutRequest {
            key: key.into(),
            value: value.into(),
            ..PutRequest::default()
        }
    }

    /// Binds the key to etcd lease `id`.
    pub(super) fn with_lease(mut self, id: i64) -> PutRequest {
        self.lease = id;
        self
    }
}

impl RequestOp {
    fn of(request: request_op::Request) -> RequestOp {
        RequestOp {
            request: Some(request),
        }
    }

    /// A read in a transaction.
    pub(super) fn get(range: RangeRequest) -> RequestOp {
        RequestOp::of(request_op::Request::RequestRange(range))
    }

    /// A write in a transaction.
    pub(super) fn put(put: PutRequest) -> RequestOp {
        RequestOp::of(request_op::Request::RequestPut(put))
    }

    /// Deletes `key` in a transaction.
    pub(super) fn delete(key: impl Into<Vec<u8>>) -> RequestOp {
        let delete = DeleteRangeRequest {
            key: key.into(),
            ..DeleteRangeRequest::default()
        };
        RequestOp::of(request_op::Request::RequestDeleteRange(delete))
    }

    /// A transaction within a transaction.
    pub(super) fn txn(txn: TxnRequest) -> RequestOp {
        RequestOp::of(request_op::Request::RequestTxn(txn))
    }
}

impl ResponseOp {
    /// The answer of a read.
    pub(super) fn into_range(self) -> Option<RangeResponse> {
        match self.response? {
            response_op::Response::ResponseRange(range) => Some(range),
            _ => None,
        }
    }

    /// The answer of a nested transaction.
    pub(super) fn into_txn(self) -> Option<TxnResponse> {
        match self.response? {
            response_op::Response::ResponseTxn(txn) => Some(txn),
            _ => None,
        }
    }

    /// The answer of a nested transaction, borrowed.
    pub(super) fn as_txn(&self) -> Option<&TxnResponse> {
        match self.response.as_ref()? {
            response_op::Response::ResponseTxn(txn) => Some(txn),
            _ => None,
        }
    }
}

impl TxnResponse {
    /// The key-values of every read, in order.
    pub(super) fn reads(self) -> Vec<Vec<KeyValue>> {
        self.responses
            .into_iter()
            .filter_map(ResponseOp::into_range)
            .map(|r| r.kvs)
            .collect()
    }

    /// The revision the transaction was applied at.
    pub(super) fn revision(&self) -> i64 {
        self.header.as_ref().map_or(0, |h| h.revision)
    }
}
