//! How clients reach the lease store: the only place that names tenure's
//! store types.

use std::num::NonZeroU32;
use std::time::Duration;

use tenure::Coordinator;

/// How long a replicated write waits for its replica's acknowledgement.
pub const REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(200);

/// The lease store of a scenario.
#[derive(Debug, Clone)]
pub enum StoreSpec {
    /// Anything `Coordinator::connect` takes (`redis://`, `sqlite:`).
    Url(String),
    /// One Redis master whose writes wait for one replica's acknowledgement.
    Replicated(String),
    /// A quorum of independent Redis masters.
    Quorum(Vec<String>),
}

impl StoreSpec {
    /// Connects a fresh handle (each client has its own connections).
    ///
    /// # Errors
    /// When the store cannot be reached.
    pub async fn connect(&self) -> tenure::Result<Coordinator> {
        match self {
            StoreSpec::Url(url) => Coordinator::connect(url).await,
            StoreSpec::Quorum(urls) => Coordinator::connect_quorum(urls).await,
            StoreSpec::Replicated(url) => {
                use tenure::redis::{RedisOptions, RedisStore};
                let options =
                    RedisOptions::default().require_replicas(NonZeroU32::MIN, REPLICA_ACK_TIMEOUT);
                let backend = RedisStore::connect(url, options).await?;
                Ok(Coordinator::with_backend(backend))
            }
        }
    }

    /// Whether rate limits live in the store itself (one Redis master), so
    /// that the limit holds across clients and the limiter can be checked.
    pub fn shared_limits(&self) -> bool {
        matches!(self, StoreSpec::Url(u) if u.starts_with("redis://"))
    }
}
