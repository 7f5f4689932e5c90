//! A Redis connection with warden's conventions: reconnection, a timeout on every
//! call, scripts run by EVALSHA with NOSCRIPT recovery, and errors mapped to
//! [`Error`] with the backend, operation and key named.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, RedisError};

use crate::error::{Error, Result};

/// Default time budget of one Redis call, connection included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default time budget of establishing a TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A cloneable, auto-reconnecting Redis connection.
#[derive(Clone)]
pub struct RedisConn {
    manager: ConnectionManager,
    client: redis::Client,
    display: String,
    timeout: Duration,
    connect_timeout: Duration,
}

impl std::fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConn")
            .field("url", &self.display)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Strips credentials from a URL for messages and logs.
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_creds, host)) => format!("{scheme}://***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

impl RedisConn {
    /// Parses `url` and prepares a connection without any I/O; the first call
    /// connects. Use this where the server may be down at start (quorum nodes).
    pub fn lazy(url: &str, timeout: Duration, connect_timeout: Duration) -> Result<Self> {
        let display = redact(url);
        if timeout.is_zero() || connect_timeout.is_zero() {
            return Err(Error::invalid(
                "timeout",
                "Redis timeouts must be greater than zero",
            ));
        }
        let info = url.into_connection_info().map_err(|e| Error::Config {
            url: display.clone(),
            reason: e.to_string(),
        })?;
        let client = redis::Client::open(info).map_err(|e| Error::Config {
            url: display.clone(),
            reason: e.to_string(),
        })?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(connect_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let manager =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(|e| {
                Error::Config {
                    url: display.clone(),
                    reason: e.to_string(),
                }
            })?;
        Ok(RedisConn {
            manager,
            client,
            display,
            timeout,
            connect_timeout,
        })
    }

    /// Like [`lazy`](Self::lazy), then checks the server answers `PING`.
    pub async fn connect(url: &str, timeout: Duration, connect_timeout: Duration) -> Result<Self> {
        let conn = Self::lazy(url, timeout, connect_timeout)?;
        conn.call("connect", "", |mut c| async move {
            redis::cmd("PING").query_async::<()>(&mut c).await
        })
        .await?;
        Ok(conn)
    }

    /// The URL without credentials.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The per-call time budget.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The underlying client, e.g. to open a RESP3 subscriber.
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The connection-establishment budget.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Runs one Redis call under the time budget and maps its error.
    pub async fn call<T, F, Fut>(&self, op: &'static str, key: &str, f: F) -> Result<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.call_within(op, key, self.timeout, f).await
    }

    /// Like [`call`](Self::call) with another time budget, for commands that block
    /// on the server on purpose (`WAIT`).
    pub async fn call_within<T, F, Fut>(
        &self,
        op: &'static str,
        key: &str,
        budget: Duration,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match tokio::time::timeout(budget, f(self.manager.clone())).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.map_error(op, key, e)),
            Err(_) => Err(Error::Timeout {
                backend: self.display.clone(),
                op,
                key: key.to_string(),
                after: budget,
            }),
        }
    }

    /// Runs a prepared script (EVALSHA, with a load-and-retry on NOSCRIPT) under
    /// the time budget.
    pub async fn script<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        key: &str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T> {
        self.call(op, key, |mut c| async move {
            invocation.invoke_async(&mut c).await
        })
        .await
    }

    /// Maps a Redis error to warden's [`Error`].
    pub fn map_error(&self, op: &'static str, key: &str, e: RedisError) -> Error {
        if e.code() == Some("WRONGTYPE") {
            return Error::WrongType {
                key: key.to_string(),
                detail: e.detail().unwrap_or("wrong type").to_string(),
            };
        }
        if e.is_timeout() {
            return Error::Timeout {
                backend: self.display.clone(),
                op,
                key: key.to_string(),
                after: self.timeout,
            };
        }
        let cause = e.to_string();
        if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
            Error::Unreachable {
                backend: self.display.clone(),
                op,
                key: key.to_string(),
                cause,
            }
        } else {
            Error::Backend {
                backend: self.display.clone(),
                op,
                key: key.to_string(),
                cause,
            }
        }
    }
}
