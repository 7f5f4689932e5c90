//! The release subscriber: one RESP3 connection per store, subscribed to the
//! release channels of the keys being waited on, fanning messages out to
//! [`ReleaseWatch`](crate::lease::ReleaseWatch)es so a contended lease
//! changes hands without polling.
//!
//! A message naming a waiter's owner token is a hand-off: it wakes only the
//! watcher of that token, if it is in this process. Any other message (`1` for
//! a release, `record` for a new record) wakes the channel's plain watchers. A
//! lost connection wakes everyone.
//!
//! On a Redis Cluster the subscriber is a RESP3 cluster connection. The release
//! scripts `PUBLISH`, which a cluster forwards to every node, so a subscription
//! on any node hears it; the client moves subscriptions to another node when
//! one fails, and a disconnection wakes every waiter (it may have missed a
//! release).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo, PushKind};
use tokio::sync::watch;

use super::conn::{Link, NodeCertificates, Origin, RedisConn};
use crate::token::OwnerToken;

/// A pushed value as text, when it is one.
fn text(value: Option<&redis::Value>) -> Option<&str> {
    match value {
        Some(redis::Value::BulkString(c)) => std::str::from_utf8(c).ok(),
        _ => None,
    }
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").finish_non_exhaustive()
    }
}

/// The local watchers of one channel.
#[derive(Default)]
struct Watchers {
    /// Woken by every release.
    all: Option<watch::Sender<u64>>,
    /// Woken when the lease is handed to their token.
    turns: HashMap<String, watch::Sender<u64>>,
}

impl Watchers {
    fn wake(tx: &watch::Sender<u64>) {
        tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn wake_everyone(&self) {
        self.all
            .iter()
            .chain(self.turns.values())
            .for_each(Self::wake);
    }

    /// Wakes the watchers a message on their channel is for.
    fn wake_for(&self, message: &str) {
        if OwnerToken::looks_like(message) {
            self.turns.get(message).into_iter().for_each(Self::wake);
        } else {
            self.all.iter().for_each(Self::wake);
        }
    }

    /// Drops the senders nobody listens to; whether none is left.
    fn prune(&mut self) -> bool {
        self.turns.retain(|_, tx| tx.receiver_count() > 0);
        if self.all.as_ref().is_some_and(|tx| tx.receiver_count() == 0) {
            self.all = None;
        }
        self.all.is_none() && self.turns.is_empty()
    }
}

/// One RESP3 connection subscribed to the release channels of the keys being
/// waited on; messages are fanned out to `watch` channels.
pub(super) struct Subscriber {
    link: Link,
    senders: Arc<Mutex<HashMap<String, Watchers>>>,
    // Serialises SUBSCRIBE/UNSUBSCRIBE so an unsubscribe of an idle channel can
    // never overtake a new subscribe of the same channel.
    changes: tokio::sync::Mutex<()>,
    timeout: Duration,
}

impl Subscriber {
    pub(super) async fn open(conn: &RedisConn) -> Option<Subscriber> {
        let senders: Arc<Mutex<HashMap<String, Watchers>>> = Arc::default();
        let dispatch = Arc::clone(&senders);
        let on_push = move |push: PushInfo| {
            let senders = dispatch.lock().unwrap_or_else(|e| e.into_inner());
            match push.kind {
                PushKind::Message => {
                    let watchers = text(push.data.first()).and_then(|c| senders.get(c));
                    if let (Some(w), Some(message)) = (watchers, text(push.data.get(1))) {
                        w.wake_for(message);
                    }
                }
                // A release may have been missed while disconnected: wake
                // every waiter so it tries again.
                PushKind::Disconnection => {
                    senders.values().for_each(Watchers::wake_everyone);
                }
                _ => {}
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let opened = tokio::time::timeout(conn.timeout(), async {
            match conn.origin() {
                Origin::Node(client, certs) => {
                    node_subscriber(conn, client, certs.as_ref(), on_push).await
                }
                // The master found now: after a failover this subscriber's
                // connection fails, which wakes every waiter (they then
                // retry on their own).
                Origin::Sentinel(link) => {
                    let client = link.master_client().await?;
                    node_subscriber(conn, &client, None, on_push).await
                }
                Origin::Cluster(seeds) => {
                    let client = seeds.client(
                        ProtocolVersion::RESP3,
                        conn.timeout(),
                        conn.connect_timeout(),
                    )?;
                    let config = redis::cluster::ClusterConfig::new()
                        .set_connection_timeout(conn.connect_timeout())
                        .set_response_timeout(conn.timeout())
                        .set_push_sender(on_push);
                    client
                        .get_async_connection_with_config(config)
                        .await
                        .map(Link::Cluster)
                }
            }
        })
        .await
        .ok()?;
        let link = opened
            .map_err(|e| tracing::debug!(error = %e, "release notifications unavailable; polling"))
            .ok()?;
        Some(Subscriber {
            link,
            senders,
            changes: tokio::sync::Mutex::new(()),
            timeout: conn.timeout(),
        })
    }

    /// Watches `channel` for releases (`token` `None`) or for hand-offs to
    /// `token`.
    /// `None` when the channel cannot be subscribed (the watcher polls then).
    pub(super) async fn watch(
        &self,
        channel: String,
        token: Option<&str>,
    ) -> Option<watch::Receiver<u64>> {
        let _serial = self.changes.lock().await;
        let (rx, subscribe, idle) = {
            let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
            let mut idle: Vec<String> = Vec::new();
            senders.retain(|c, w| {
                let gone = *c != channel && w.prune();
                if gone {
                    idle.push(c.clone());
                }
                !gone
            });
            let subscribe = !senders.contains_key(&channel);
            let watchers = senders.entry(channel.clone()).or_default();
            let tx = match token {
                None => watchers.all.get_or_insert_with(|| watch::channel(0).0),
                Some(t) => watchers
                    .turns
                    .entry(t.to_string())
                    .or_insert_with(|| watch::channel(0).0),
            };
            (tx.subscribe(), subscribe, idle)
        };
        let mut link = self.link.clone();
        if !idle.is_empty() {
            let _ = tokio::time::timeout(self.timeout, link.unsubscribe(&idle)).await;
        }
        if subscribe {
            let ok = matches!(
                tokio::time::timeout(self.timeout, link.subscribe(&channel)).await,
                Ok(Ok(()))
            );
            if !ok {
                let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
                senders.remove(&channel);
                return None;
            }
        }
        Some(rx)
    }
}

/// A RESP3 connection to the server of `client` that sends its pushes to
/// `on_push` and subscribes again after reconnecting. `certs` are the ones
/// `client` was built with (a custom CA, a client certificate): a client
/// rebuilt from the connection info alone would not have them.
async fn node_subscriber(
    conn: &RedisConn,
    client: &redis::Client,
    certs: Option<&NodeCertificates>,
    on_push: impl redis::aio::AsyncPushSender,
) -> redis::RedisResult<Link> {
    let info = client.get_connection_info().clone();
    let redis_settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(redis_settings);
    let client = match certs {
        None => redis::Client::open(info)?,
        #[cfg(feature = "tls")]
        Some(NodeCertificates(certs)) => redis::Client::build_with_tls(info, certs.clone())?,
        #[cfg(not(feature = "tls"))]
        Some(NodeCertificates(never)) => match *never {},
    };
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(conn.connect_timeout()))
        .set_response_timeout(Some(conn.timeout()))
        .set_number_of_retries(1)
        .set_automatic_resubscription()
        .set_push_sender(on_push);
    ConnectionManager::new_with_config(client, config)
        .await
        .map(Link::Node)
}
