//! A Redis connection with tenure's conventions: reconnection, a timeout on every
//! call, scripts run by EVALSHA with NOSCRIPT recovery, and errors mapped to
//! [`Error`] with the backend, operation and key named. The same calls run on
//! one server or a Redis Cluster ([`Link`]).

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, ToRedisArgs, Value};

use super::cluster::ClusterSeeds;
use super::options::{RedisOptions, RedisTls};
use super::sentinel::SentinelLink;
use crate::error::{Error, Result};
use crate::url::redact;

/// Default time budget of one Redis call, connection included.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default time budget of establishing a TCP connection.
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What a call runs on: one server (reconnecting by itself) or a Redis Cluster
/// (each command sent to the master of its key's slot, `MOVED`/`ASK` and
/// failovers followed by the client). Both are [`ConnectionLike`], so every
/// script and pipeline runs unchanged on either.
#[derive(Clone)]
pub(crate) enum Link {
    /// One server.
    Node(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The master that Redis Sentinel names, found again after a failover.
    Sentinel(SentinelLink),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Node(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
            Link::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
            Link::Sentinel(c) => c.get_db(),
        }
    }
}

impl Link {
    /// Subscribes to `channel` (a RESP3 link with a push sender; a subscriber
    /// is never a sentinel link, see the subscriber).
    pub(super) async fn subscribe(&mut self, channel: impl ToRedisArgs) -> redis::RedisResult<()> {
        match self {
            Link::Node(c) => c.subscribe(channel).await,
            Link::Cluster(c) => c.subscribe(channel).await,
            Link::Sentinel(_) => Err(not_a_subscriber()),
        }
    }

    /// Unsubscribes from `channel`.
    pub(super) async fn unsubscribe(
        &mut self,
        channel: impl ToRedisArgs,
    ) -> redis::RedisResult<()> {
        match self {
            Link::Node(c) => c.unsubscribe(channel).await,
            Link::Cluster(c) => c.unsubscribe(channel).await,
            Link::Sentinel(_) => Err(not_a_subscriber()),
        }
    }
}

impl Link {
    /// Subscribes to the sharded channel `channel` (a RESP3 cluster link;
    /// only a cluster shards its channels, see `publish.rs`).
    pub(super) async fn ssubscribe(&mut self, channel: impl ToRedisArgs) -> redis::RedisResult<()> {
        match self {
            Link::Cluster(c) => c.ssubscribe(channel).await,
            Link::Node(_) | Link::Sentinel(_) => Err(not_sharded()),
        }
    }

    /// Unsubscribes from the sharded channel `channel`.
    pub(super) async fn sunsubscribe(
        &mut self,
        channel: impl ToRedisArgs,
    ) -> redis::RedisResult<()> {
        match self {
            Link::Cluster(c) => c.sunsubscribe(channel).await,
            Link::Node(_) | Link::Sentinel(_) => Err(not_sharded()),
        }
    }
}

fn not_sharded() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "sharded channels are subscribed on a cluster only",
    ))
}

fn not_a_subscriber() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "subscriptions go through a link to the discovered master",
    ))
}

/// A reconnecting connection to one server with tenure's time budgets. A
/// plain server's needs no `response_timeout`: every call runs under
/// [`RedisConn::call_within`]'s budget (connection included), and a second
/// timer per request would only double the timer work.
pub(super) fn node_manager(
    client: &redis::Client,
    response_timeout: Option<Duration>,
    connect_timeout: Duration,
) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(response_timeout)
        .set_connection_timeout(Some(connect_timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    ConnectionManager::new_lazy_with_config(client.clone(), config)
}

/// Where a [`RedisConn`] connects: what the release subscriber needs to open
/// its own RESP3 connection to the same place.
#[derive(Clone, Debug)]
pub(super) enum Origin {
    /// One server, and the certificates its client was built with (the
    /// subscriber's own client needs them too). Boxed: a client with TLS
    /// support is ten times the size of the other variants.
    Node(Box<redis::Client>, Option<NodeCertificates>),
    /// The seed nodes of a cluster.
    Cluster(ClusterSeeds),
    /// The master the sentinels name.
    Sentinel(SentinelLink),
}

/// A cloneable, auto-reconnecting Redis connection.
#[derive(Clone)]
pub(crate) struct RedisConn {
    link: Link,
    origin: Origin,
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

/// Splits a comma-separated list of Redis URLs (a quorum) into its URLs.
///
/// A comma separates two URLs only when the next URL's scheme follows it
/// (`redis://` or `rediss://`, case-insensitive, after optional spaces), so a
/// password containing commas stays in one piece:
/// `redis://:a,b@h1,redis://h2` is two URLs. A password that itself contains
/// `,redis://` must percent-encode its comma (`%2C`). A string without such a
/// comma is one URL.
pub fn split_redis_urls(list: &str) -> Vec<&str> {
    let mut urls = Vec::new();
    let mut start = 0;
    for (i, _) in list.match_indices(',') {
        let next = list[i + 1..].trim_start().to_ascii_lowercase();
        if next.starts_with("redis://") || next.starts_with("rediss://") {
            urls.push(list[start..i].trim());
            start = i + 1;
        }
    }
    urls.push(list[start..].trim());
    urls
}

/// Query parameters that would carry a credential. redis-rs reads the password
/// only from the user-info part and ignores these, so a URL using them would
/// connect without authenticating: refuse it instead.
const CREDENTIAL_PARAMS: [&str; 5] = ["password", "pass", "passwd", "user", "username"];

fn refuse_query_credentials(url: &str, display: &str) -> Result<()> {
    let after_userinfo = url.rfind('@').map_or(url, |at| &url[at + 1..]);
    let Some((_, query)) = after_userinfo.split_once('?') else {
        return Ok(());
    };
    for pair in query.split('&') {
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        if CREDENTIAL_PARAMS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(Error::Config {
                url: display.to_string(),
                reason: format!(
                    "a `{name}` query parameter is not supported (it would be ignored and \
                     the connection made without authentication); put credentials in the \
                     URL as redis://user:password@host:port (percent-encode `@`, `/`, `?`, \
                     `#` and `%` in the password)"
                ),
            });
        }
    }
    Ok(())
}

/// Certificates read from the files of [`RedisTls`]: redis-rs's type with the
/// `tls` feature, an empty type without it (nothing can be read then).
#[cfg(feature = "tls")]
pub(super) type Certificates = redis::TlsCertificates;
/// Certificates read from the files of [`RedisTls`]: redis-rs's type with the
/// `tls` feature, an empty type without it (nothing can be read then).
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub(super) enum Certificates {}

/// [`Certificates`] kept for the release subscriber's client (redis-rs's
/// type prints nothing of itself; neither does this).
#[derive(Clone)]
pub(super) struct NodeCertificates(pub(super) std::sync::Arc<Certificates>);

impl std::fmt::Debug for NodeCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCertificates")
    }
}

/// The certificate files of `tls`, read (`None` when none is set).
fn read_certificates(tls: &RedisTls, display: &str) -> Result<Option<Certificates>> {
    let config = |reason: String| Error::Config {
        url: display.to_string(),
        reason,
    };
    if !tls.is_set() {
        return Ok(None);
    }
    #[cfg(feature = "tls")]
    {
        let read = |what: &str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| config(format!("cannot read the {what} {}: {e}", path.display())))
        };
        let root_cert = match &tls.ca_file {
            Some(path) => Some(read("CA file", path)?),
            None => None,
        };
        let client_tls = match &tls.client_cert {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read("client certificate", cert)?,
                client_key: read("client key", key)?,
            }),
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
    #[cfg(not(feature = "tls"))]
    Err(config(
        "TLS certificates are set but tenure was built without its `tls` feature".into(),
    ))
}

/// Builds the client of one server; with certificate files, through
/// redis-rs's TLS builder.
/// `info` as tenure connects: with `TCP_NODELAY` ([`tcp_settings`]), and
/// without the `CLIENT SETINFO` redis-rs pipelines after connecting: without
/// a password or a database to select, that is the connection's only set-up,
/// a round trip of its own that tells the server only redis-rs's name and
/// version (and that servers before 7.2 answer with an error).
pub(super) fn tuned(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
        .set_tcp_settings(tcp_settings())
}

/// The TCP settings of every connection to a Redis server: `TCP_NODELAY`,
/// which redis-rs leaves off. Many tasks share one connection, so a request
/// is often written while an earlier one is unanswered; Nagle's algorithm
/// would hold it back until the server acknowledges the earlier one.
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

pub(super) fn open_client(
    info: redis::ConnectionInfo,
    certs: Option<Certificates>,
    display: &str,
) -> Result<redis::Client> {
    let info = tuned(info);
    let config = |e: RedisError| Error::Config {
        url: display.to_string(),
        reason: e.to_string(),
    };
    match certs {
        None => redis::Client::open(info).map_err(config),
        #[cfg(feature = "tls")]
        Some(certs) => redis::Client::build_with_tls(info, certs).map_err(config),
        #[cfg(not(feature = "tls"))]
        Some(never) => match never {},
    }
}

/// `EVALSHA` of `script` with `keys` and `args`, built in buffers of the
/// right size (a growing command buffer costs a reallocation per doubling).
pub(super) fn evalsha<K: AsRef<str>, A: AsRef<str>>(
    script: &redis::Script,
    keys: &[K],
    args: &[A],
) -> Cmd {
    script_call("EVALSHA", script.get_hash(), keys, args)
}

/// `EVAL` of a script's text with `keys` and `args`.
pub(super) fn eval<K: AsRef<str>, A: AsRef<str>>(source: &str, keys: &[K], args: &[A]) -> Cmd {
    script_call("EVAL", source, keys, args)
}

/// `name script numkeys keys… args…`, in buffers sized for its arguments.
fn script_call<K: AsRef<str>, A: AsRef<str>>(
    name: &str,
    script: &str,
    keys: &[K],
    args: &[A],
) -> Cmd {
    let bytes: usize = keys.iter().map(|k| k.as_ref().len()).sum::<usize>()
        + args.iter().map(|a| a.as_ref().len()).sum::<usize>();
    let mut cmd = Cmd::with_capacity(
        3 + keys.len() + args.len(),
        name.len() + script.len() + 4 + bytes,
    );
    cmd.arg(name).arg(script).arg(keys.len());
    for k in keys {
        cmd.arg(k.as_ref());
    }
    for a in args {
        cmd.arg(a.as_ref());
    }
    cmd
}

/// Loads `script` and sends `call` (its `EVALSHA`) again.
async fn load_and_retry<T: redis::FromRedisValue>(
    script: &redis::Script,
    call: &Cmd,
    mut c: Link,
) -> redis::RedisResult<T> {
    script.load_async(&mut c).await?;
    call.query_async(&mut c).await
}

/// Whether the server answered that it does not have the script asked for.
pub(super) fn is_noscript(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Memory policies under which Redis may delete keys that tenure must keep.
fn evicts(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

impl RedisConn {
    /// Parses `url` and prepares a connection without any I/O, with the time
    /// budgets and certificates of `options`; the first call connects. Use this
    /// where the server may be down at start (quorum nodes).
    pub(crate) fn lazy(url: &str, options: &RedisOptions) -> Result<Self> {
        let display = redact(url);
        let capped = crate::duration::capped;
        let (timeout, connect_timeout) = (capped(options.timeout), capped(options.connect_timeout));
        if timeout.is_zero() || connect_timeout.is_zero() {
            return Err(Error::invalid(
                "timeout",
                "Redis timeouts must be greater than zero",
            ));
        }
        refuse_query_credentials(url, &display)?;
        let config = |reason: String| Error::Config {
            url: display.clone(),
            reason,
        };
        let certs = read_certificates(&options.tls, &display)?;
        if let Some(seeds) = ClusterSeeds::parse(url, certs.clone()) {
            let seeds = seeds.map_err(config)?;
            let client = seeds
                .client(redis::ProtocolVersion::RESP2, timeout, connect_timeout)
                .map_err(|e| config(e.to_string()))?;
            let cluster = client.get_pending_async_connection_with_config(
                redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(connect_timeout)
                    .set_response_timeout(timeout),
            );
            return Ok(RedisConn {
                link: Link::Cluster(cluster),
                origin: Origin::Cluster(seeds),
                display,
                timeout,
                connect_timeout,
            });
        }
        if let Some(link) = SentinelLink::parse(url, certs.clone(), timeout, connect_timeout) {
            let link = link.map_err(config)?;
            return Ok(RedisConn {
                link: Link::Sentinel(link.clone()),
                origin: Origin::Sentinel(link),
                display,
                timeout,
                connect_timeout,
            });
        }
        let info = url
            .into_connection_info()
            .map_err(|e| config(e.to_string()))?;
        let client = open_client(info, certs.clone(), &display)?;
        let manager =
            node_manager(&client, None, connect_timeout).map_err(|e| config(e.to_string()))?;
        Ok(RedisConn {
            link: Link::Node(manager),
            origin: Origin::Node(Box::new(client), certs.map(|c| NodeCertificates(c.into()))),
            display,
            timeout,
            connect_timeout,
        })
    }

    /// Like [`lazy`](Self::lazy), then checks the server answers `PING`.
    pub(crate) async fn connect(url: &str, options: &RedisOptions) -> Result<Self> {
        let conn = Self::lazy(url, options)?;
        conn.ping().await?;
        Ok(conn)
    }

    async fn ping(&self) -> Result<()> {
        self.call("connect", "", |mut c| async move {
            redis::cmd("PING").query_async::<()>(&mut c).await
        })
        .await
    }

    /// Like [`connect`](Self::connect), and reads `maxmemory-policy`: refuses
    /// (or, with `allow`, warns about) a policy that may evict tenure's keys,
    /// since an evicted lease key lets a second holder in.
    ///
    /// One round trip where `CONFIG GET` may be read: its answer shows the
    /// server answers, so no `PING` goes before it (a one-shot process pays
    /// every round trip). Where `CONFIG` is disabled or denied (managed
    /// services), the policy cannot be read, the check is skipped and a `PING`
    /// checks the server, as `connect` does.
    pub(crate) async fn connect_checked(
        url: &str,
        options: &RedisOptions,
        allow: bool,
    ) -> Result<Self> {
        let conn = Self::lazy(url, options)?;
        match conn.read_policies().await {
            Ok(policies) => conn.judge_policies(policies, allow)?,
            // An error *answer* (unknown command, NOPERM): CONFIG is not ours to use.
            Err(Error::Backend { cause, .. }) => {
                tracing::debug!(backend = %conn.display, %cause, "cannot read maxmemory-policy; eviction check skipped");
                conn.ping().await?;
            }
            Err(e) => return Err(e),
        }
        Ok(conn)
    }

    /// Refuses (or, with `allow`, warns about) the first of `policies` that
    /// may evict keys.
    fn judge_policies(&self, policies: Vec<(Option<String>, String)>, allow: bool) -> Result<()> {
        let Some((node, policy)) = policies.into_iter().find(|(_, p)| evicts(p)) else {
            return Ok(());
        };
        let policy = match node {
            Some(node) => format!("{policy} on {node}"),
            None => policy,
        };
        if !evicts(&policy) {
            return Ok(());
        }
        if allow {
            tracing::warn!(
                backend = %self.display,
                policy = %policy,
                "maxmemory-policy may evict lease keys and fence counters: a full memory can let two holders in and restart fences at 1; use noeviction"
            );
            return Ok(());
        }
        Err(Error::Config {
            url: self.display.clone(),
            reason: format!(
                "maxmemory-policy is {policy}: when memory runs full Redis may evict a lease \
                 key (a second holder gets in); \
                 set maxmemory-policy noeviction, or accept the risk with \
                 RedisOptions::allow_eviction(true)"
            ),
        })
    }

    /// `maxmemory-policy` of the server, or of every master of a cluster
    /// (with the node's address); a cluster node that refuses `CONFIG` is
    /// left out, as a single server that refuses it is not checked.
    async fn read_policies(&self) -> Result<Vec<(Option<String>, String)>> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy");
        if let Link::Cluster(cluster) = &self.link {
            use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let mut cluster = cluster.clone();
            let reply = self
                .call("connect", "", |_| async move {
                    cluster.route_command(cmd, routing).await
                })
                .await?;
            let Value::Map(nodes) = reply else {
                return Ok(Vec::new());
            };
            return Ok(nodes
                .into_iter()
                .filter_map(|(node, answer)| {
                    let node: String = redis::from_redis_value(node).ok()?;
                    let pair: Vec<String> = redis::from_redis_value(answer).ok()?;
                    Some((Some(node), pair.into_iter().nth(1)?))
                })
                .collect());
        }
        let pair: Vec<String> = self
            .call("connect", "", |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await?;
        Ok(pair
            .into_iter()
            .nth(1)
            .map(|p| (None, p))
            .into_iter()
            .collect())
    }

    /// Whether the server (on a cluster: a random node) knows the command
    /// `name` (`COMMAND INFO`); `false` when it cannot be asked.
    pub(super) async fn knows_command(&self, name: &str) -> bool {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg(name);
        let reply = match &self.link {
            Link::Cluster(cluster) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
                let mut cluster = cluster.clone();
                self.call("connect", "", |_| async move {
                    cluster.route_command(cmd, routing).await
                })
                .await
            }
            _ => {
                self.call("connect", "", |mut c| async move {
                    cmd.query_async::<Value>(&mut c).await
                })
                .await
            }
        };
        match reply {
            Ok(Value::Array(infos)) => infos.first().is_some_and(|i| *i != Value::Nil),
            _ => false,
        }
    }

    /// The URL without credentials.
    pub(crate) fn display(&self) -> &str {
        &self.display
    }

    /// The per-call time budget.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Where this connection leads, e.g. to open a RESP3 subscriber there.
    pub(super) fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The connection-establishment budget.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Runs one Redis call under the time budget and maps its error.
    // Not an `async fn`: a layer of its own would only copy the future.
    pub(crate) fn call<'a, T, F, Fut>(
        &'a self,
        op: &'static str,
        key: &'a str,
        f: F,
    ) -> impl Future<Output = Result<T>> + 'a
    where
        F: FnOnce(Link) -> Fut + 'a,
        Fut: Future<Output = redis::RedisResult<T>> + 'a,
        T: 'a,
    {
        self.call_within(op, key, self.timeout, f)
    }

    /// Like [`call`](Self::call) with another time budget, for commands that block
    /// on the server on purpose (`WAIT`).
    pub(crate) async fn call_within<T, F, Fut>(
        &self,
        op: &'static str,
        key: &str,
        budget: Duration,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(Link) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match tokio::time::timeout(budget, f(self.link.clone())).await {
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
    pub(crate) async fn script<T: redis::FromRedisValue>(
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

    /// Runs `script` by `EVALSHA` with `keys` and `args` under the time budget;
    /// on `NOSCRIPT` loads it and sends the call again. The command is built
    /// at once, straight from the arguments. (Not an `async fn`, and the
    /// reload boxed: the futures of every caller up to an `async_trait` box
    /// hold this one, so its size is copied on every call.)
    pub(crate) fn eval_sha<'a, T, K, A>(
        &'a self,
        op: &'static str,
        key: &'a str,
        script: &'a redis::Script,
        keys: &[K],
        args: &[A],
    ) -> impl Future<Output = Result<T>> + 'a
    where
        T: redis::FromRedisValue + 'a,
        K: AsRef<str>,
        A: AsRef<str>,
    {
        let cmd = evalsha(script, keys, args);
        self.call(op, key, move |mut c| async move {
            match cmd.query_async(&mut c).await {
                Err(e) if is_noscript(&e) => Box::pin(load_and_retry(script, &cmd, c)).await,
                reply => reply,
            }
        })
    }

    /// Maps a Redis error to tenure's [`Error`].
    pub(crate) fn map_error(&self, op: &'static str, key: &str, e: RedisError) -> Error {
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
        // A cluster client with no connection to any node (none of its seeds
        // answered) is as unreachable as a refused connection.
        let no_node = e.kind() == redis::ErrorKind::ClusterConnectionNotFound;
        if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() || no_node {
            Error::Unreachable {
                backend: self.display.clone(),
                op,
                key: key.to_string(),
                cause: Box::new(e),
            }
        } else {
            Error::Backend {
                backend: self.display.clone(),
                op,
                key: key.to_string(),
                cause: Box::new(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_passwords_with_delimiters() {
        for (url, shown) in [
            ("redis://:p,w@d?x@h:1/0", "redis://***@h:1/0"),
            ("redis://u:a%2Cb@h:1", "redis://***@h:1"),
            ("rediss://user:pw@h", "rediss://***@h"),
            ("redis://h:1/0?password=s3cret", "redis://h:1/0?…"),
            ("redis://h:1", "redis://h:1"),
        ] {
            assert_eq!(redact(url), shown);
        }
    }

    #[tokio::test]
    async fn malformed_urls_never_echo_their_password() {
        for url in [
            "redis://:se,cret@h:notaport",
            "redis://:se,cret@",
            "redis://u:se%2Ccret@[::1",
            "redis://:se/cret@h:1",
            "rediss://:se,cret@h:1/notadb",
        ] {
            if let Err(e) = RedisConn::lazy(url, &RedisOptions::default()) {
                let msg = format!("{e} {e:?}");
                assert!(!msg.contains("se,cret") && !msg.contains("cret"), "{msg}");
            }
        }
    }

    #[test]
    fn splitting_keeps_commas_inside_passwords() {
        assert_eq!(split_redis_urls("redis://a"), ["redis://a"]);
        assert_eq!(
            split_redis_urls("redis://:p,w@a,redis://b, REDISS://c"),
            ["redis://:p,w@a", "redis://b", "REDISS://c"]
        );
        assert_eq!(
            split_redis_urls("redis://:a,b,c@h:1"),
            ["redis://:a,b,c@h:1"]
        );
    }

    #[tokio::test]
    async fn a_password_query_parameter_is_refused_without_echoing_it() {
        let err =
            RedisConn::lazy("redis://h:1/?password=s3cret", &RedisOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("redis://user:password@host"), "{msg}");
        assert!(!msg.contains("s3cret"), "{msg}");
        assert!(
            RedisConn::lazy(
                "redis://:p%3Fx@h:1/0?protocol=resp3",
                &RedisOptions::default()
            )
            .is_ok()
        );
    }
}

#[cfg(test)]
mod source_tests {
    use std::error::Error as _;

    use super::*;

    /// The Redis error a failure came from stays reachable through `source()`,
    /// so callers can downcast it (e.g. to read its error code).
    #[tokio::test]
    async fn mapped_errors_keep_the_redis_error_as_their_source() {
        let conn = RedisConn::lazy("redis://h:1", &RedisOptions::default()).unwrap();
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let answered =
            RedisError::from((redis::ErrorKind::Client, "bad reply", "detail".to_string()));
        for e in [refused, answered] {
            let mapped = conn.map_error("acquire", "k", e);
            let source = mapped.source().expect("a source");
            assert!(source.downcast_ref::<RedisError>().is_some(), "{mapped:?}");
        }
    }
}
