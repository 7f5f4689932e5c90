//! Rate limits are not kept on a quorum of masters.

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::limit::store::{LimitRequest, LimitStore};
use crate::limit::{Decision, Timestamp};

/// The limit store of a [`Coordinator`](crate::Coordinator) on a quorum of
/// Redis masters: it refuses every request with [`Error::Unsupported`]
/// naming the alternatives.
///
/// Counting a limit on a majority would take a vote per request, and
/// counting it in this process would let every process admit the full rate
/// without a word. Keep limits on one Redis master
/// ([`RedisLimits`](crate::redis::RedisLimits)) or in SQLite with
/// [`Coordinator::with_limits`](crate::Coordinator::with_limits), or count
/// them in this process on purpose with
/// [`Limiter::new`](crate::limit::Limiter::new) and
/// [`MemoryLimits`](crate::memory::MemoryLimits).
#[derive(Debug, Clone)]
pub struct QuorumLimits {
    pub(crate) nodes: String,
}

impl QuorumLimits {
    fn refusal(&self) -> Error {
        Error::Unsupported {
            store: self.nodes.clone(),
            what: "shared rate limits",
            instead: "a quorum of masters does not count them; keep them on one Redis master \
                      or in SQLite (Coordinator::with_limits(RedisLimits::connect(..)) or \
                      SqliteStore), or count per process on purpose with \
                      Limiter::new(MemoryLimits::new(), ..)"
                .into(),
        }
    }
}

#[async_trait]
impl LimitStore for QuorumLimits {
    async fn apply(&self, _request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        Err(self.refusal())
    }

    async fn now(&self) -> Result<Timestamp> {
        Err(self.refusal())
    }

    fn describe(&self) -> String {
        self.nodes.clone()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        crate::telemetry::store_kind(&self.nodes)
    }

    /// No counts are kept anywhere, so none are shared: callers that ask
    /// (the command line) refuse before sending a request.
    fn is_shared(&self) -> bool {
        false
    }
}
