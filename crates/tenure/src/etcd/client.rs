//! A small etcd client over the generated gRPC code: one channel balanced
//! over the endpoints, HTTP/2 keep-alive within etcd's ping policy, "leader
//! required" on every call, and the authentication token of a user sent as
//! metadata and renewed when etcd says it is no longer valid.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_stream::{Stream, StreamExt};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status, Streaming};

use super::api::etcdserverpb::auth_client::AuthClient;
use super::api::etcdserverpb::kv_client::KvClient;
use super::api::etcdserverpb::lease_client::LeaseClient;
use super::api::etcdserverpb::watch_client::WatchClient;
use super::api::etcdserverpb::{
    AuthenticateRequest, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest,
    LeaseRevokeRequest, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse, RangeRequest,
    RangeResponse, TxnRequest, TxnResponse, WatchCreateRequest, WatchRequest, WatchResponse,
    watch_request::RequestUnion,
};
use super::lock;

/// How long a connection may go without hearing from etcd before a ping is
/// sent, while calls or watches are open on it. etcd closes a connection
/// (GOAWAY `too_many_pings`) that pings more often than its
/// `--grpc-keepalive-min-time` (5 s by default), or at all while no call is
/// open; gRPC's own clients never ping more often than every 10 s.
pub(crate) const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// The metadata that makes a member refuse a call when it has no leader
/// ("etcdserver: no leader") instead of waiting on it.
const REQUIRE_LEADER: (&str, &str) = ("hasleader", "true");

/// The metadata that carries the authentication token.
const TOKEN: &str = "token";

/// An open watch on etcd; dropping it ends the watch.
#[derive(Debug)]
pub(crate) struct Watch {
    replies: Streaming<WatchResponse>,
    /// Keeps the request stream open; dropped, it ends it.
    _open: oneshot::Sender<()>,
}

impl Watch {
    /// The next reply; `None` when etcd ended the stream.
    pub(crate) async fn message(&mut self) -> Result<Option<WatchResponse>, Status> {
        self.replies.message().await
    }
}

/// The rest of a watch's request stream: nothing, until the watch is
/// dropped; then it ends.
struct UntilDropped(oneshot::Receiver<()>);

impl Stream for UntilDropped {
    type Item = WatchRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchRequest>> {
        Pin::new(&mut self.0).poll(cx).map(|_| None)
    }
}

/// A client of one etcd cluster; cheap to clone.
#[derive(Clone)]
pub(crate) struct Client {
    channel: Channel,
    auth: Option<Arc<Auth>>,
}

/// A user's credentials and its current token.
struct Auth {
    name: String,
    password: String,
    token: Mutex<Option<MetadataValue<Ascii>>>,
    /// Held while a refused token is renewed: calls refused together
    /// authenticate once (etcd checks a password with bcrypt, slow on purpose).
    renewing: tokio::sync::Mutex<()>,
}

/// How to reach the cluster.
pub(crate) struct Connect<'a> {
    /// `host:port` of each member.
    pub endpoints: &'a [String],
    /// TLS to every member, or plain HTTP/2.
    pub tls: Option<ClientTlsConfig>,
    /// The budget of one connection attempt.
    pub connect_timeout: Duration,
    /// How long to wait for a ping's answer before the connection is dead.
    pub keep_alive_timeout: Duration,
    /// A user and password, authenticated on the first call.
    pub user: Option<(String, String)>,
}

impl Client {
    /// A client of `to`'s endpoints. Nothing is sent yet: connections open
    /// on the first call, and a user authenticates with [`Client::authenticate`].
    pub(crate) fn new(to: Connect<'_>) -> Result<Client, String> {
        let scheme = if to.tls.is_some() { "https" } else { "http" };
        let mut endpoints = Vec::with_capacity(to.endpoints.len());
        for e in to.endpoints {
            let url = format!("{scheme}://{e}");
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(|err| format!("bad endpoint {url}: {err}"))?
                .connect_timeout(to.connect_timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
                .keep_alive_timeout(to.keep_alive_timeout)
                // No pings on a connection without open calls: etcd counts
                // them against the client and closes the connection.
                .keep_alive_while_idle(false);
            if let Some(tls) = &to.tls {
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(|err| format!("TLS settings for {url}: {err}"))?;
            }
            endpoints.push(endpoint);
        }
        let auth = to.user.map(|(name, password)| {
            Arc::new(Auth {
                name,
                password,
                token: Mutex::new(None),
                renewing: tokio::sync::Mutex::new(()),
            })
        });
        Ok(Client {
            channel: Channel::balance_list(endpoints.into_iter()),
            auth,
        })
    }

    /// Authenticates the user, if any, and keeps its token for later calls.
    pub(crate) async fn authenticate(&self) -> Result<(), Status> {
        let Some(auth) = &self.auth else {
            return Ok(());
        };
        let request = AuthenticateRequest {
            name: auth.name.clone(),
            password: auth.password.clone(),
        };
        let reply = AuthClient::new(self.channel.clone())
            .authenticate(request)
            .await?
            .into_inner();
        let token = MetadataValue::try_from(reply.token.as_str()).map_err(|_| {
            Status::internal("etcd answered an authentication token that is not ASCII")
        })?;
        *lock(&auth.token) = Some(token);
        Ok(())
    }

    /// Reads a key or a range.
    pub(crate) async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Status> {
        self.call(request, |channel, request| async move {
            Ok(KvClient::new(channel).range(request).await?.into_inner())
        })
        .await
    }

    /// Runs a transaction.
    pub(crate) async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        self.call(request, |channel, request| async move {
            Ok(KvClient::new(channel).txn(request).await?.into_inner())
        })
        .await
    }

    /// Grants an etcd lease of `ttl_secs` seconds.
    pub(crate) async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, Status> {
        let request = LeaseGrantRequest {
            ttl: ttl_secs,
            id: 0,
        };
        self.call(request, |channel, request| async move {
            Ok(LeaseClient::new(channel)
                .lease_grant(request)
                .await?
                .into_inner())
        })
        .await
    }

    /// Ends etcd lease `id` and deletes the keys bound to it.
    pub(crate) async fn lease_revoke(&self, id: i64) -> Result<(), Status> {
        self.call(LeaseRevokeRequest { id }, |channel, request| async move {
            LeaseClient::new(channel).lease_revoke(request).await?;
            Ok(())
        })
        .await
    }

    /// Refreshes etcd lease `id` once: `false` when etcd has ended it.
    pub(crate) async fn lease_keep_alive(&self, id: i64) -> Result<bool, Status> {
        self.call(
            LeaseKeepAliveRequest { id },
            |channel, request| async move {
                // A keep-alive is a stream both ways: send one request, read
                // its one answer (TTL 0 for a lease etcd no longer has).
                let mut replies = LeaseClient::new(channel)
                    .lease_keep_alive(request.map(tokio_stream::once))
                    .await?
                    .into_inner();
                match replies.message().await? {
                    Some(reply) => Ok(reply.ttl > 0),
                    None => Err(Status::unavailable(
                        "etcd closed a lease keep-alive without an answer",
                    )),
                }
            },
        )
        .await
    }

    /// The remaining and granted TTL of etcd lease `id`.
    pub(crate) async fn lease_time_to_live(
        &self,
        id: i64,
    ) -> Result<LeaseTimeToLiveResponse, Status> {
        let request = LeaseTimeToLiveRequest { id, keys: false };
        self.call(request, |channel, request| async move {
            Ok(LeaseClient::new(channel)
                .lease_time_to_live(request)
                .await?
                .into_inner())
        })
        .await
    }

    /// Opens a watch: its replies, the first of which confirms it. The
    /// watch lives until the returned [`Watch`] is dropped.
    pub(crate) async fn watch(&self, create: WatchCreateRequest) -> Result<Watch, Status> {
        self.call(create, |channel, request| async move {
            // The request stream stays open while the watch lives: the
            // create, then nothing (etcd keeps a watch whose client closed
            // its side). It ends when the watch is dropped: with the replies
            // dropped too, HTTP/2 resets the stream, which ends the watch on
            // etcd. (A request stream that never ends would keep the stream,
            // and etcd's watcher, open until the connection closes.)
            let (open, dropped) = oneshot::channel();
            let requests = request.map(|create| {
                let create = WatchRequest {
                    request_union: Some(RequestUnion::CreateRequest(create)),
                };
                tokio_stream::once(create).chain(UntilDropped(dropped))
            });
            let replies = WatchClient::new(channel)
                .watch(requests)
                .await?
                .into_inner();
            Ok(Watch {
                replies,
                _open: open,
            })
        })
        .await
    }

    /// Sends `message` through `send` with the call's metadata; when etcd
    /// refuses the token as expired or invalid, authenticates again and
    /// sends it once more.
    async fn call<M, T, F, Fut>(&self, message: M, send: F) -> Result<T, Status>
    where
        M: Clone,
        F: Fn(Channel, Request<M>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let token = self.token();
        let first = self.request(message.clone(), token.clone());
        match send(self.channel.clone(), first).await {
            Err(status) if self.auth.is_some() && token_refused(&status) => {
                self.renew(token).await?;
                send(self.channel.clone(), self.request(message, self.token())).await
            }
            other => other,
        }
    }

    /// The current token, if a user authenticated.
    fn token(&self) -> Option<MetadataValue<Ascii>> {
        self.auth.as_ref().and_then(|a| lock(&a.token).clone())
    }

    /// Authenticates again after etcd refused `refused`, unless another call
    /// has done so meanwhile.
    async fn renew(&self, refused: Option<MetadataValue<Ascii>>) -> Result<(), Status> {
        let Some(auth) = &self.auth else {
            return Ok(());
        };
        let _alone = auth.renewing.lock().await;
        if *lock(&auth.token) != refused {
            return Ok(());
        }
        self.authenticate().await
    }

    /// `message` with "leader required" and `token`, if any.
    fn request<M>(&self, message: M, token: Option<MetadataValue<Ascii>>) -> Request<M> {
        let mut request = Request::new(message);
        let metadata = request.metadata_mut();
        metadata.insert(
            REQUIRE_LEADER.0,
            MetadataValue::from_static(REQUIRE_LEADER.1),
        );
        if let Some(token) = token {
            metadata.insert(TOKEN, token);
        }
        request
    }
}

/// Whether etcd refused a call's token: it expired (simple tokens end after
/// `--auth-token-ttl` without use) or was never valid there.
fn token_refused(status: &Status) -> bool {
    status.code() == Code::Unauthenticated && status.message().contains("invalid auth token")
}
