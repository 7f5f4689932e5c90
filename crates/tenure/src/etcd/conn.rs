//! The connection to an etcd cluster: one gRPC channel balanced over the
//! endpoints, a time budget on every call, and etcd's errors mapped onto tenure's.

use std::future::Future;
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic::{Code, Status};

use super::api::etcdserverpb::RangeRequest;
use super::client::{Client, Connect};
use super::options::{EtcdOptions, EtcdUrl};
use crate::duration::capped;
use crate::error::{Error, Result};

/// How often one call is sent again after a refused connection (a dead
/// endpoint among live ones), within its time budget.
const MAX_REFUSED: u32 = 16;

/// A connected client plus what error messages need.
#[derive(Clone)]
pub(crate) struct EtcdConn {
    client: Client,
    display: String,
    timeout: Duration,
}

impl EtcdConn {
    /// Connects to `url`'s endpoints and checks that the cluster answers a read
    /// within the time budgets, so a dead or wrong endpoint list, a cluster
    /// without a majority or missing permissions fail here with a clear error
    /// rather than on the first lease.
    pub(super) async fn connect(url: &EtcdUrl, options: &EtcdOptions) -> Result<Self> {
        let display = url.display();
        let tls = if url.tls {
            Some(tls_config(&display, options)?)
        } else {
            if options.ca_file.is_some() || options.client_cert.is_some() {
                return Err(Error::Config {
                    url: display,
                    reason: "certificates were given for a plain etcd:// URL; use etcds:// for \
                             TLS"
                    .into(),
                });
            }
            None
        };
        let client = Client::new(Connect {
            endpoints: &url.endpoints,
            tls,
            connect_timeout: capped(options.connect_timeout),
            keep_alive_timeout: capped(options.timeout),
            user: url.user.clone().or_else(|| options.user.clone()),
        })
        .map_err(|reason| Error::Config {
            url: display.clone(),
            reason,
        })?;
        let conn = EtcdConn {
            client,
            display,
            timeout: capped(options.timeout),
        };
        // Authenticating a user is one round trip, bounded by the connect and
        // call budgets together.
        let budget = capped(options.connect_timeout) + capped(options.timeout);
        let authenticated = EtcdConn {
            timeout: budget,
            ..conn.clone()
        };
        authenticated
            .call("connect", "", |c| async move { c.authenticate().await })
            .await?;
        // A linearizable read of one key under our prefix: answers only when
        // the cluster has a leader and a majority, and when the user may read.
        let probe = RangeRequest::new(options.prefix.as_str())
            .with_keys_only()
            .with_limit(1);
        conn.call("connect", "", |c| {
            let probe = probe.clone();
            async move { c.range(probe).await }
        })
        .await?;
        Ok(conn)
    }

    /// How long one call may take.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The endpoints, for messages (never a password).
    pub(super) fn display(&self) -> &str {
        &self.display
    }

    /// Runs `f` with a client within the call budget and maps its error.
    pub(super) async fn call<T, F, Fut>(&self, op: &'static str, key: &str, f: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        // The channel balances over every endpoint, a dead one included: a
        // call whose connection was refused never left this process, so it is
        // sent again (the balancer picks anew) while the budget lasts. Any
        // other failure may have reached etcd and is returned as it is.
        let attempts = async {
            let mut refused = 0;
            loop {
                match f(self.client.clone()).await {
                    Err(e) if never_sent(&e) && refused < MAX_REFUSED => refused += 1,
                    other => return other,
                }
            }
        };
        match tokio::time::timeout(self.timeout, attempts).await {
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

/// The TLS settings of an `etcds://` connection: the CA file's roots or the
/// system's, and the client certificate if one is given. An unreadable file
/// is an [`Error::Config`] naming it.
fn tls_config(display: &str, options: &EtcdOptions) -> Result<ClientTlsConfig> {
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| Error::Config {
            url: display.to_string(),
            reason: format!("cannot read the {what} {}: {e}", path.display()),
        })
    };
    let tls = ClientTlsConfig::new();
    let mut tls = match &options.ca_file {
        Some(ca) => tls.ca_certificate(Certificate::from_pem(read(ca, "CA file")?)),
        None => tls.with_native_roots(),
    };
    if let Some((cert, key)) = &options.client_cert {
        let identity =
            Identity::from_pem(read(cert, "client certificate")?, read(key, "client key")?);
        tls = tls.identity(identity);
    }
    Ok(tls)
}

/// etcd's errors as tenure's. Transient ([`Error::Unreachable`]): the gRPC
/// codes `Unavailable` (no leader, leader changed, member stopping, a refused
/// connection) and `DeadlineExceeded` (a proposal that timed out on the
/// server), and every failure of the connection itself — a reset, a closed
/// connection, an HTTP/2 `GOAWAY` from a member that stops or sheds clients —
/// which tonic reports with the transport error as the status's source, while
/// a status that etcd answered has none. The rest (bad credentials,
/// permission denied, bad request) is a non-transient [`Error::Backend`]. The
/// gRPC status stays reachable as the cause's `source()`.
pub(crate) fn map_error(backend: &str, op: &'static str, key: &str, e: Status) -> Error {
    let transient = is_transient(&e);
    let cause = Box::new(EtcdCause {
        message: describe(&e),
        source: e,
    });
    if transient {
        Error::Unreachable {
            backend: backend.to_string(),
            op,
            key: key.to_string(),
            cause,
        }
    } else {
        Error::Backend {
            backend: backend.to_string(),
            op,
            key: key.to_string(),
            cause,
        }
    }
}

/// Whether a failed call may succeed when tried again (see [`map_error`]).
fn is_transient(status: &Status) -> bool {
    let by_code = matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded);
    by_code || std::error::Error::source(status).is_some()
}

/// A status's message (its code when etcd gave none) and, for a failure of
/// the connection, its causes: tonic's own message often says only
/// "transport error".
fn describe(status: &Status) -> String {
    let mut text = if status.message().is_empty() {
        format!("{:?}", status.code())
    } else {
        status.message().to_string()
    };
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// An etcd call's failure with a readable message.
#[derive(Debug)]
struct EtcdCause {
    message: String,
    source: Status,
}

impl std::fmt::Display for EtcdCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EtcdCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Whether `e` is a failure to connect: the request never reached etcd, so
/// sending it again cannot apply it twice.
fn never_sent(e: &Status) -> bool {
    if e.code() != Code::Unavailable {
        return false;
    }
    if e.message().contains("tcp connect error") {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        if s.to_string().contains("tcp connect error") {
            return true;
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure of the connection as tonic reports it: an `Unknown` status
    /// (no code of etcd's) with the transport error as its source.
    fn broken(kind: std::io::ErrorKind, text: &str) -> Status {
        Status::from_error(Box::new(std::io::Error::new(kind, text.to_string())))
    }

    #[test]
    fn connection_failures_and_unavailable_are_transient_etcds_refusals_are_not() {
        let goaway = broken(
            std::io::ErrorKind::Other,
            "connection error received: GOAWAY too_many_pings",
        );
        assert_eq!(goaway.code(), Code::Unknown);
        let reset = broken(std::io::ErrorKind::ConnectionReset, "connection reset");
        let no_leader = Status::unavailable("etcdserver: no leader");
        let timed_out = Status::deadline_exceeded("etcdserver: request timed out");
        for status in [goaway, reset, no_leader, timed_out] {
            let text = describe(&status);
            let err = map_error("etcd://h:2379", "acquire", "k", status);
            assert!(err.is_transient(), "{err}");
            assert!(err.to_string().contains(&text), "{err} lacks {text}");
        }
        let refused = [
            Status::invalid_argument("etcdserver: authentication failed"),
            Status::permission_denied("etcdserver: permission denied"),
            Status::unknown("etcd answered with no known code"),
        ];
        for status in refused {
            let err = map_error("etcd://h:2379", "acquire", "k", status);
            assert!(!err.is_transient(), "{err}");
        }
    }
}
