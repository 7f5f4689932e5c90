//! The connection to an etcd cluster: one gRPC channel balanced over the
//! endpoints, a time budget on every call, and etcd's errors mapped onto tenure's.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

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
    pub async fn connect(url: &EtcdUrl, options: &EtcdOptions) -> Result<Self> {
        let display = url.display();
        let mut connect = client_options(url, options);
        // Connecting authenticates when a user is set: one round trip, bounded
        // by the connect and call budgets together.
        let budget = capped(options.connect_timeout) + capped(options.timeout);
        let scheme = if url.tls {
            connect = connect.with_tls(tls_options(&display, options)?);
            "https"
        } else {
            if options.ca_file.is_some() || options.client_cert.is_some() {
                return Err(Error::Config {
                    url: display,
                    reason: "certificates were given for a plain etcd:// URL; use etcds:// for \
                             TLS"
                    .into(),
                });
            }
            "http"
        };
        let endpoints: Vec<String> = url
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
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
            timeout: capped(options.timeout),
        };
        // A linearizable read of one key under our prefix: answers only when
        // the cluster has a leader and a majority, and when the user may read.
        let probe = options.prefix.clone();
        conn.call("connect", "", |mut c| {
            let probe = probe.clone();
            async move {
                let only_keys = GetOptions::new().with_keys_only().with_limit(1);
                c.get(probe, Some(only_keys)).await
            }
        })
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
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
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
fn tls_options(display: &str, options: &EtcdOptions) -> Result<TlsOptions> {
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| Error::Config {
            url: display.to_string(),
            reason: format!("cannot read the {what} {}: {e}", path.display()),
        })
    };
    let mut tls = TlsOptions::new();
    tls = match &options.ca_file {
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

/// etcd's errors as tenure's: transport failures and the gRPC codes
/// `Unavailable` (no leader, leader changed, member stopping) and
/// `DeadlineExceeded` (a proposal that timed out on the server) are
/// [`Error::Unreachable`], so transient; the rest (bad credentials, permission
/// denied, bad request) is a non-transient [`Error::Backend`]. The etcd error
/// stays reachable as the cause's `source()`.
pub(crate) fn map_error(
    backend: &str,
    op: &'static str,
    key: &str,
    e: etcd_client::Error,
) -> Error {
    use tonic::Code;
    let (message, transient) = match &e {
        etcd_client::Error::TransportError(t) => (chain(t), true),
        etcd_client::Error::IoError(io) => (io.to_string(), true),
        etcd_client::Error::GRpcStatus(status) => {
            let message = if status.message().is_empty() {
                format!("{:?}", status.code())
            } else {
                status.message().to_string()
            };
            let transient = matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded);
            (message, transient)
        }
        other => (other.to_string(), false),
    };
    let cause = Box::new(EtcdCause { message, source: e });
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

/// An etcd client error with a readable message: tonic's transport errors say
/// only "transport error", and a status prints its metadata.
#[derive(Debug)]
struct EtcdCause {
    message: String,
    source: etcd_client::Error,
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

/// An error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether `e` is a failure to connect: the request never reached etcd, so
/// sending it again cannot apply it twice.
fn never_sent(e: &etcd_client::Error) -> bool {
    // etcd-client's error exposes no `source()`: start below it.
    let mut source: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::TransportError(t) => Some(t),
        etcd_client::Error::GRpcStatus(status) => {
            if status.message().contains("tcp connect error") {
                return true;
            }
            std::error::Error::source(status)
        }
        _ => None,
    };
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

/// The client's channel options: budgets, keep-alive pings, leader required,
/// and the user (the URL's over [`EtcdOptions::user`]).
fn client_options(url: &EtcdUrl, options: &EtcdOptions) -> ConnectOptions {
    let mut connect = ConnectOptions::new()
        // No per-request timeout in the channel: `call` bounds every call
        // with its own budget and reports it as a timeout.
        .with_connect_timeout(capped(options.connect_timeout))
        // HTTP/2 pings notice a dead member (kill -9, a cut cable) while
        // idle, so the channel fails over instead of waiting on a socket
        // that will never answer.
        .with_keep_alive(Duration::from_secs(1), capped(options.timeout))
        .with_keep_alive_while_idle(true)
        // Calls fail fast on a member cut off from the leader rather than
        // waiting on it ("etcdserver: no leader").
        .with_require_leader(true);
    if let Some((name, password)) = url.user.as_ref().or(options.user.as_ref()) {
        connect = connect.with_user(name.clone(), password.clone());
    }
    connect
}
