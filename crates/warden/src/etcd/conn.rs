//! The connection to an etcd cluster: one gRPC channel balanced over the
//! endpoints, a time budget on every call, and etcd's errors mapped onto warden's.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use super::options::{EtcdOptions, EtcdUrl};
use crate::error::{Error, Result};

/// A connected client plus what error messages need.
#[derive(Clone)]
pub(crate) struct EtcdConn {
    client: Client,
    display: String,
    timeout: Duration,
}

impl EtcdConn {
    /// Connects to `url`'s endpoints and checks that the cluster answers (a
    /// `Status` call) within the time budgets, so a dead or wrong endpoint list
    /// fails here with a clear error rather than on the first lease.
    pub async fn connect(url: &EtcdUrl, options: &EtcdOptions) -> Result<Self> {
        let display = url.display();
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.timeout)
            // HTTP/2 pings notice a dead member (kill -9, a cut cable) while
            // idle, so the channel fails over instead of waiting on a socket
            // that will never answer.
            .with_keep_alive(Duration::from_secs(1), options.timeout)
            .with_keep_alive_while_idle(true)
            // Calls fail fast on a member cut off from the leader rather than
            // waiting on it ("etcdserver: no leader").
            .with_require_leader(true);
        if let Some((name, password)) = &options.user {
            connect = connect.with_user(name.clone(), password.clone());
        }
        if let Some((name, password)) = &url.user {
            connect = connect.with_user(name.clone(), password.clone());
        }
        // Connecting authenticates when a user is set: one round trip, bounded
        // by the connect and call budgets together.
        let budget = options.connect_timeout + options.timeout;
        let endpoints: Vec<String> = url
            .endpoints
            .iter()
            .map(|e| format!("http://{e}"))
            .collect();
        let client =
            match tokio::time::timeout(budget, Client::connect(endpoints, Some(connect))).await {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => return Err(map_error(&display, "connect", "", e)),
                Err(_) => {
                    return Err(Error::Timeout {
                        backend: display,
                        op: "connect",
                        key: String::new(),
                        after: budget,
                    });
                }
            };
        let conn = EtcdConn {
            client,
            display,
            timeout: options.timeout,
        };
        conn.call("connect", "", |mut c| async move { c.status().await })
            .await?;
        Ok(conn)
    }

    /// The endpoints, for messages (never a password).
    pub fn display(&self) -> &str {
        &self.display
    }

    /// Runs `f` with a client within the call budget and maps its error.
    pub async fn call<T, F, Fut>(&self, op: &'static str, key: &str, f: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        match tokio::time::timeout(self.timeout, f(self.client.clone())).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_error(&self.display, op, key, e)),
            Err(_) => Err(Error::Timeout {
                backend: self.display.clone(),
                op,
                key: key.to_string(),
                after: self.timeout,
            }),
        }
    }
}

/// etcd's errors as warden's: transport failures and `Unavailable` (no leader,
/// leader changed, member stopping) are [`Error::Unreachable`] and so
/// transient; `DeadlineExceeded` is a [`Error::Timeout`]; the rest (bad
/// credentials, permission denied, bad request) is a non-transient
/// [`Error::Backend`].
pub(crate) fn map_error(
    backend: &str,
    op: &'static str,
    key: &str,
    e: etcd_client::Error,
) -> Error {
    use tonic::Code;
    let unreachable = |cause: String| Error::Unreachable {
        backend: backend.to_string(),
        op,
        key: key.to_string(),
        cause,
    };
    match e {
        etcd_client::Error::TransportError(t) => unreachable(transport_cause(&t)),
        etcd_client::Error::IoError(io) => unreachable(io.to_string()),
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            Code::Unavailable => unreachable(status_cause(&status)),
            Code::DeadlineExceeded => Error::Timeout {
                backend: backend.to_string(),
                op,
                key: key.to_string(),
                after: Duration::ZERO,
            },
            _ => Error::Backend {
                backend: backend.to_string(),
                op,
                key: key.to_string(),
                cause: status_cause(&status),
            },
        },
        other => Error::Backend {
            backend: backend.to_string(),
            op,
            key: key.to_string(),
            cause: other.to_string(),
        },
    }
}

/// The status message, or its code when empty; a connection refused by every
/// endpoint surfaces as `Unavailable` with the transport's words.
fn status_cause(status: &tonic::Status) -> String {
    let message = status.message();
    if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        message.to_string()
    }
}

fn transport_cause(e: &dyn std::error::Error) -> String {
    // tonic's transport errors say only "transport error": the cause is below.
    let mut cause = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        cause.push_str(": ");
        cause.push_str(&s.to_string());
        source = s.source();
    }
    cause
}
