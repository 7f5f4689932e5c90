//! The release subscriber: one RESP3 connection per store, subscribed to the
//! release channels of the keys being waited on, fanning messages out to
//! [`ReleaseWatch`](crate::lease::store::ReleaseWatch)es so a contended lease
//! changes hands without polling.
//!
//! A message naming a waiter's owner token is a hand-off: it wakes only the
//! watcher of that token, if it is in this process, and carries the fence and
//! the place in line it was handed over from (`<token> <fence> <place>`), so
//! the waiter can take the lease without a claim. Any other message (`1` for
//! a release, `record` for a new record) wakes the channel's plain watchers. A
//! lost connection wakes everyone.
//!
//! A channel whose subscription the server has confirmed (and that no
//! disconnection has broken since) hears every message published after that:
//! a waiter can register on it without a round trip before its first look
//! ([`Subscriber::ready_turn`]).
//!
//! On a Redis Cluster the subscriber is a RESP3 cluster connection. On Redis 7
//! or later the lease scripts publish sharded (`SPUBLISH`, see `publish.rs`):
//! the subscriber subscribes each channel sharded (`SSUBSCRIBE`, on the
//! master of the channel's slot) and plainly (for what is still published
//! with `PUBLISH`, which a cluster forwards to every node, so a subscription
//! on any node hears it: gates, records, older clients). The client moves
//! subscriptions to another node when one fails, and a disconnection wakes
//! every waiter (it may have missed a release).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo, PushKind};
use tokio::sync::watch;

use super::conn::{Link, NodeCertificates, Origin, RedisConn};
use super::keeper::Stand;
use super::publish::Publish;
use crate::fence::Fence;
use crate::lease::{Handoff, QueuePlace, TurnReceiver, TurnSender};
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

/// One waiter's watch: what wakes it, how often it was woken, and where its
/// last look (or the keeper) left it in line.
pub(super) struct Turn {
    tx: TurnSender,
    wakes: u64,
    /// Where the waiter stands, while its last look may stand for its next
    /// ones (see `keeper.rs`).
    pub(super) stand: Option<Stand>,
}

impl Turn {
    fn new() -> Self {
        Turn {
            tx: TurnSender::default(),
            wakes: 0,
            stand: None,
        }
    }

    /// Wakes the waiter with `handoff` (`None`: to look again).
    fn send(&mut self, handoff: Option<Handoff>) {
        self.wakes = self.wakes.wrapping_add(1);
        self.tx.send(handoff);
    }

    /// Wakes the waiter to look again (a hand-off it was told of and has
    /// not taken yet is then claimed by that look).
    pub(super) fn nudge(&mut self) {
        self.send(None);
    }

    /// How often the waiter was woken: a message that concerned it since a
    /// look began changed this.
    pub(super) fn wakes(&self) -> u64 {
        self.wakes
    }

    fn is_live(&self) -> bool {
        self.tx.is_live()
    }
}

/// A map keyed by channel names or owner tokens, hashed with foldhash (seeded
/// at random per map): a hand-off looks tokens and channels up about a dozen
/// times, which with SipHash was about a twentieth of the client's
/// instructions per hand-off.
/// The keys are the channels and tokens of this process's own waits.
type Map<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// The local watchers of one channel.
#[derive(Default)]
pub(super) struct Watchers {
    /// Woken by every release.
    all: Option<watch::Sender<u64>>,
    /// Woken when the lease is handed to their token.
    turns: Map<Turn>,
    /// Whether the server has confirmed the subscription since the last
    /// disconnection: then every message published from now on reaches
    /// this process.
    confirmed: bool,
}

impl Watchers {
    fn wake(tx: &watch::Sender<u64>) {
        tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn wake_everyone(&mut self) {
        self.all.iter().for_each(Self::wake);
        for turn in self.turns.values_mut() {
            turn.send(None);
        }
    }

    /// Wakes the watchers a message on their channel is for: a hand-off
    /// (`<token> <fence> <place>`, or a bare token when the hand-off failed)
    /// wakes the watcher of that token; anything else (`1` for a release,
    /// `record` for a new record) the plain watchers.
    /// A place the keeper wrote carries the moment its call was sent.
    fn wake_for(&mut self, message: &str) {
        let mut parts = message.splitn(3, ' ');
        let token = parts.next().unwrap_or_default();
        if !OwnerToken::looks_like(token) {
            self.all.iter().for_each(Self::wake);
            return;
        }
        let Some(turn) = self.turns.get_mut(token) else {
            return;
        };
        let fence = parts.next().and_then(|f| f.parse::<u64>().ok());
        let handoff = match (fence, parts.next()) {
            (Some(fence), Some(place)) if fence > 0 => Some(Handoff {
                fence: Fence::new(fence),
                place: turn
                    .stand
                    .as_ref()
                    .map_or_else(|| QueuePlace::new(place), |stand| stand.dated(place)),
            }),
            _ => None,
        };
        turn.send(handoff);
    }

    /// Drops the senders nobody listens to; whether none is left.
    fn prune(&mut self) -> bool {
        self.turns.retain(|_, turn| turn.is_live());
        if self.all.as_ref().is_some_and(|tx| tx.receiver_count() == 0) {
            self.all = None;
        }
        self.all.is_none() && self.turns.is_empty()
    }
}

/// The local watchers, by channel.
#[derive(Default)]
struct Channels {
    watchers: Map<Watchers>,
    /// Disconnections seen so far: a subscription confirmed across one is not.
    disconnections: u64,
}

impl Watchers {
    /// The live watch of the waiter `token`.
    pub(super) fn live_turn(&mut self, token: &str) -> Option<&mut Turn> {
        self.turns.get_mut(token).filter(|turn| turn.is_live())
    }

    /// Whether a waiter of this process other than `token` watches for its
    /// turn: then it has (most likely) a place in line.
    pub(super) fn others_wait(&self, token: &str) -> bool {
        self.turns
            .iter()
            .any(|(t, turn)| t != token && turn.is_live())
    }

    /// A receiver woken by every release.
    fn watch_all(&mut self) -> watch::Receiver<u64> {
        self.all
            .get_or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// A receiver woken by hand-offs to `token`.
    fn watch_turn(&mut self, token: &str) -> TurnReceiver {
        self.turns
            .entry(token.to_string())
            .or_insert_with(Turn::new)
            .tx
            .subscribe()
    }
}

/// A watch for hand-offs to one token: the receiver, and what takes the
/// token's watcher away when the watch is dropped.
pub(super) struct TurnWatch {
    pub(super) receiver: TurnReceiver,
    pub(super) unwatch: Unwatch,
}

/// Removes a token's watcher from its channel when dropped (after the
/// watch's receiver), so that waits that end leave nothing behind. The
/// channel stays subscribed until a later watch prunes it.
pub(super) struct Unwatch {
    channels: Weak<Mutex<Channels>>,
    channel: String,
    token: String,
}

impl Drop for Unwatch {
    fn drop(&mut self) {
        let Some(channels) = self.channels.upgrade() else {
            return;
        };
        let mut channels = channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = channels.watchers.get_mut(&self.channel)
            && w.turns.get(&self.token).is_some_and(|turn| !turn.is_live())
        {
            w.turns.remove(&self.token);
        }
    }
}

/// One RESP3 connection subscribed to the release channels of the keys being
/// waited on; messages are fanned out to the watchers of their channel.
pub(super) struct Subscriber {
    link: Link,
    channels: Arc<Mutex<Channels>>,
    // Serialises SUBSCRIBE/UNSUBSCRIBE so an unsubscribe of an idle channel can
    // never overtake a new subscribe of the same channel.
    changes: tokio::sync::Mutex<()>,
    timeout: Duration,
    /// Whether channels are subscribed sharded too.
    publish: Publish,
}

impl Subscriber {
    pub(super) async fn open(conn: &RedisConn, publish: Publish) -> Option<Subscriber> {
        let channels: Arc<Mutex<Channels>> = Arc::default();
        let on_push = dispatcher(Arc::clone(&channels));
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
            channels,
            changes: tokio::sync::Mutex::new(()),
            timeout: conn.timeout(),
            publish,
        })
    }

    /// Watches `channel` for every release.
    /// `None` when the channel cannot be subscribed (the watcher polls then).
    pub(super) async fn watch_all(&self, channel: String) -> Option<watch::Receiver<u64>> {
        self.watch(channel, Watchers::watch_all).await
    }

    /// Watches `channel` for hand-offs to `token`.
    /// `None` when the channel cannot be subscribed (the watcher polls then).
    pub(super) async fn watch_turn(&self, channel: String, token: &str) -> Option<TurnWatch> {
        let rx = self.watch(channel.clone(), |w| w.watch_turn(token)).await?;
        Some(self.turn_watch(rx, channel, token))
    }

    /// A watch for hand-offs to `token` on `channel` when the channel's
    /// subscription is confirmed already: then every hand-off published
    /// from now on reaches it. `None` otherwise (nothing is sent to Redis).
    pub(super) fn ready_turn(&self, channel: String, token: &str) -> Option<TurnWatch> {
        let rx = {
            let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            let watchers = channels
                .watchers
                .get_mut(&channel)
                .filter(|w| w.confirmed)?;
            watchers.watch_turn(token)
        };
        Some(self.turn_watch(rx, channel, token))
    }

    /// Runs `f` on the local watchers of `channel`, if it has any.
    pub(super) fn with_watchers<R>(
        &self,
        channel: &str,
        f: impl FnOnce(&mut Watchers) -> R,
    ) -> Option<R> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.watchers.get_mut(channel).map(f)
    }

    /// Runs `f` on the live watch of the waiter `token` on `channel`.
    pub(super) fn with_turn<R>(
        &self,
        channel: &str,
        token: &str,
        f: impl FnOnce(&mut Turn) -> R,
    ) -> Option<R> {
        self.with_watchers(channel, |w| w.live_turn(token).map(f))
            .flatten()
    }

    /// Runs `f` on every live waiter's watch: its channel, its token and the
    /// watch.
    pub(super) fn each_turn(&self, mut f: impl FnMut(&str, &str, &mut Turn)) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        for (channel, watchers) in &mut channels.watchers {
            for (token, turn) in &mut watchers.turns {
                if turn.is_live() {
                    f(channel, token, turn);
                }
            }
        }
    }

    fn turn_watch(&self, receiver: TurnReceiver, channel: String, token: &str) -> TurnWatch {
        TurnWatch {
            receiver,
            unwatch: Unwatch {
                channels: Arc::downgrade(&self.channels),
                channel,
                token: token.to_string(),
            },
        }
    }

    /// Registers a watcher on `channel` (`register`), subscribing first
    /// unless the subscription is confirmed; unsubscribes channels nobody
    /// watches.
    async fn watch<R>(
        &self,
        channel: String,
        register: impl FnOnce(&mut Watchers) -> R,
    ) -> Option<R> {
        let _serial = self.changes.lock().await;
        let (rx, subscribe, idle, epoch) = {
            let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            let mut idle: Vec<String> = Vec::new();
            channels.watchers.retain(|c, w| {
                let gone = *c != channel && w.prune();
                if gone {
                    idle.push(c.clone());
                }
                !gone
            });
            let epoch = channels.disconnections;
            let watchers = channels.watchers.entry(channel.clone()).or_default();
            (register(watchers), !watchers.confirmed, idle, epoch)
        };
        if !idle.is_empty() {
            self.unsubscribe(&idle).await;
        }
        if subscribe {
            let ok = self.subscribe(&channel).await;
            let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            if !ok {
                channels.watchers.remove(&channel);
                return None;
            }
            // A disconnection since the subscribe was sent may have undone it.
            let unbroken = channels.disconnections == epoch;
            if let Some(w) = channels.watchers.get_mut(&channel) {
                w.confirmed = unbroken;
            }
        }
        Some(rx)
    }
}

impl Subscriber {
    /// Subscribes to `channel` (sharded too, where notifications are):
    /// whether the server confirmed it in time.
    async fn subscribe(&self, channel: &str) -> bool {
        let mut link = self.link.clone();
        let plain = tokio::time::timeout(self.timeout, link.subscribe(channel));
        if !matches!(plain.await, Ok(Ok(()))) {
            return false;
        }
        if !self.publish.is_sharded() {
            return true;
        }
        let sharded = tokio::time::timeout(self.timeout, link.ssubscribe(channel));
        matches!(sharded.await, Ok(Ok(())))
    }

    /// Unsubscribes from `channels` (best effort).
    async fn unsubscribe(&self, channels: &[String]) {
        let mut link = self.link.clone();
        let _ = tokio::time::timeout(self.timeout, link.unsubscribe(channels)).await;
        if self.publish.is_sharded() {
            // One slot per call: a cluster refuses sharded channels of
            // several slots in one SUNSUBSCRIBE.
            for channel in channels {
                let _ = tokio::time::timeout(self.timeout, link.sunsubscribe(channel)).await;
            }
        }
    }
}

/// The handler of the subscriber connection's pushes: fans messages out to
/// the watchers of their channel.
fn dispatcher(
    channels: Arc<Mutex<Channels>>,
) -> impl Fn(PushInfo) -> Result<(), redis::aio::SendError> + Send + Sync + Clone + 'static {
    move |push: PushInfo| {
        let mut channels = channels.lock().unwrap_or_else(|e| e.into_inner());
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let watchers = text(push.data.first()).and_then(|c| channels.watchers.get_mut(c));
                if let (Some(w), Some(message)) = (watchers, text(push.data.get(1))) {
                    w.wake_for(message);
                }
            }
            // A release may have been missed while disconnected: wake every
            // waiter so it tries again; until a channel is subscribed again,
            // no watch on it is ready before a look.
            PushKind::Disconnection => {
                channels.disconnections += 1;
                for w in channels.watchers.values_mut() {
                    w.confirmed = false;
                    w.wake_everyone();
                }
            }
            _ => {}
        }
        Ok(())
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
        Some(NodeCertificates(certs)) => redis::Client::build_with_tls(info, (**certs).clone())?,
        #[cfg(not(feature = "tls"))]
        Some(NodeCertificates(never)) => match **never {},
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Coordinator;
    use crate::redis::{RedisOptions, RedisStore};

    /// How many token watchers the subscriber of `store` keeps on `channel`.
    fn turn_watchers(store: &RedisStore, channel: &str) -> usize {
        let sub = store.subscriber_if_open().expect("subscribed");
        let channels = sub.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.watchers.get(channel).map_or(0, |w| w.turns.len())
    }

    /// Every timed wait on a key whose channel is subscribed registers a
    /// token watcher; a wait that ends must take it away again, so the count
    /// stays flat however many waits there were.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_watchers_do_not_pile_up_over_timed_waits() {
        let server = tenure_test::RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .expect("connect");
        let tenure = Coordinator::with_backend(store.clone());
        let lease = tenure.lease("piled").ttl(Duration::from_secs(60));
        let held = lease.try_acquire().await.expect("acquire").expect("free");
        // A waiter that stays: the channel is subscribed and confirmed, so
        // every timed wait below registers its watcher without a round trip.
        let waiting = tokio::spawn({
            let lease = lease.clone();
            async move { lease.acquire().await }
        });
        let channel = store.keys().released("piled");
        let subscribed = tokio::time::Instant::now() + Duration::from_secs(10);
        while store
            .subscriber_if_open()
            .is_none_or(|s| s.ready_turn(channel.clone(), "probe").is_none())
        {
            assert!(tokio::time::Instant::now() < subscribed, "never subscribed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for _ in 0..20_000 {
            let refused = lease.attempt_within(Duration::ZERO).await.expect("wait");
            assert!(!refused.is_acquired());
        }
        let left = turn_watchers(&store, &channel);
        assert!(
            left <= 3,
            "{left} token watchers left after 20,000 timed waits"
        );
        waiting.abort();
        held.release().await.expect("release");
    }
}
