//! A bare etcd client for the tests, to look at and plant keys behind
//! tenure's back: tonic over the generated gRPC code, nothing of tenure's own.

#![allow(dead_code)]

#[path = "../../src/etcd/api/mod.rs"]
mod api;

use api::etcdserverpb::kv_client::KvClient;
use api::etcdserverpb::lease_client::LeaseClient;
use api::etcdserverpb::{LeaseGrantRequest, PutRequest, RangeRequest};
use tonic::transport::Channel;

/// A connection to one etcd member.
#[derive(Clone)]
pub struct Admin {
    channel: Channel,
}

impl Admin {
    /// Connects to the member at `addr` (`host:port`).
    pub async fn connect(addr: &str) -> Admin {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Admin { channel }
    }

    /// How many keys start with `prefix`.
    pub async fn count_prefix(&self, prefix: &str) -> i64 {
        let mut end = prefix.as_bytes().to_vec();
        let last = end.pop().unwrap();
        end.push(last + 1);
        self.count(RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: end,
            count_only: true,
            ..RangeRequest::default()
        })
        .await
    }

    /// Whether `key` exists.
    pub async fn exists(&self, key: &str) -> bool {
        let one = RangeRequest {
            key: key.as_bytes().to_vec(),
            count_only: true,
            ..RangeRequest::default()
        };
        self.count(one).await == 1
    }

    async fn count(&self, request: RangeRequest) -> i64 {
        let mut kv = KvClient::new(self.channel.clone());
        kv.range(request).await.unwrap().into_inner().count
    }

    /// Grants an etcd lease of `ttl_secs` seconds; its id.
    pub async fn lease_grant(&self, ttl_secs: i64) -> i64 {
        let mut lease = LeaseClient::new(self.channel.clone());
        let grant = LeaseGrantRequest {
            ttl: ttl_secs,
            id: 0,
        };
        lease.lease_grant(grant).await.unwrap().into_inner().id
    }

    /// Writes `value` at `key`, bound to etcd lease `lease` (0: none).
    pub async fn put(&self, key: &str, value: &str, lease: i64) {
        let mut kv = KvClient::new(self.channel.clone());
        let put = PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            lease,
            ..PutRequest::default()
        };
        kv.put(put).await.unwrap();
    }
}
