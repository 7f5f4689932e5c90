//! Rate limits are not kept in etcd.

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::limit::store::{LimitRequest, LimitStore};
use crate::limit::{Decision, Timestamp};

/// The limit store of a [`Coordinator`](crate::Coordinator) connected to etcd: it refuses
/// every request with an [`Error::Config`] that says where limits belong.
///
/// A rate limiter writes on every request it admits; etcd commits every write
/// through its Raft log to a majority and fsyncs it, and is built for small,
/// rarely changing coordination data. Limits belong in Redis (`redis://`) or,
/// on one host, SQLite (`sqlite:PATH`): give one with
/// [`Coordinator::with_limits`](crate::Coordinator::with_limits) next to etcd leases.
#[derive(Debug, Clone)]
pub struct EtcdLimits {
    pub(crate) endpoints: String,
}

impl EtcdLimits {
    fn refusal(&self) -> Error {
        Error::Config {
            url: self.endpoints.clone(),
            reason: "rate limits are not kept in etcd (a Raft commit and an fsync per \
                     request); keep them in Redis (redis://) or SQLite (sqlite:PATH), e.g. \
                     Coordinator::connect(etcd_url).await?.with_limits(RedisLimits::…)"
                .into(),
        }
    }
}

#[async_trait]
impl LimitStore for EtcdLimits {
    async fn apply(&self, _request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        Err(self.refusal())
    }

    async fn now(&self) -> Result<Timestamp> {
        Err(self.refusal())
    }

    fn describe(&self) -> String {
        self.endpoints.clone()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        crate::telemetry::store_kind(&self.endpoints)
    }
}
