//! The hand-written client of a FIFO hand-off, the least code that waits
//! the way tenure does under contention: a waiter that finds the key held
//! stands at the end of a list, and a release hands the key to the first in
//! line and publishes its token; waiters hear it on a RESP3 connection of
//! their own and hold the key from that message. No fences, TTLs of places,
//! claims or checks: what any client of this protocol must send, so that
//! tenure's ratio to it is what the rest costs, and its rate what the
//! machine allows a hand-off through Redis.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, Script};
use tokio::sync::oneshot;

/// KEYS[1] lease, KEYS[2] line; ARGV[1] token, ARGV[2] TTL ms. 1 when taken,
/// else 0 (standing in line).
static ASK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end \
         redis.call('RPUSH', KEYS[2], ARGV[1]) \
         return 0",
    )
});

/// KEYS[1] lease, KEYS[2] line; ARGV[1] token, ARGV[2] TTL ms, ARGV[3]
/// channel. Hands the key to the first in line, or deletes it.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
         local next = redis.call('LPOP', KEYS[2]) \
         if not next then return redis.call('DEL', KEYS[1]) end \
         redis.call('SET', KEYS[1], next, 'PX', ARGV[2]) \
         redis.call('PUBLISH', ARGV[3], next) \
         return 1",
    )
});

/// Lease TTL, ms.
const TTL_MS: u64 = 10_000;

/// Who waits for which token's turn.
type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>;

/// A calls connection and a RESP3 connection subscribed to one key's
/// channel.
#[derive(Clone)]
pub struct RawLine {
    calls: MultiplexedConnection,
    waiters: Waiters,
    key: String,
    _pushes: MultiplexedConnection,
}

impl RawLine {
    /// Connects to `url` for turns on `key`.
    pub async fn connect(url: &str, key: &str) -> Self {
        let waiters = Waiters::default();
        let woken = Arc::clone(&waiters);
        let config = AsyncConnectionConfig::new().set_push_sender(move |push: PushInfo| {
            if let Some(redis::Value::BulkString(token)) = push.data.get(1) {
                let token = String::from_utf8_lossy(token);
                if let Some(turn) = woken.lock().unwrap().remove(token.as_ref()) {
                    let _ = turn.send(());
                }
            }
            Ok::<(), redis::aio::SendError>(())
        });
        let mut pushes = super::raw::client(url, ProtocolVersion::RESP3)
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        pushes.subscribe(channel(key)).await.unwrap();
        let calls = super::raw::client(url, ProtocolVersion::RESP2)
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        RawLine {
            calls,
            waiters,
            key: key.to_string(),
            _pushes: pushes,
        }
    }

    /// Waits for the key's turn with `token` (unique per turn).
    pub async fn acquire(&self, token: &str) {
        let (turn, woken) = oneshot::channel();
        self.waiters.lock().unwrap().insert(token.to_string(), turn);
        let taken: i64 = ASK
            .key(&self.key)
            .key(format!("{}:line", self.key))
            .arg(token)
            .arg(TTL_MS)
            .invoke_async(&mut self.calls.clone())
            .await
            .unwrap();
        if taken == 1 {
            self.waiters.lock().unwrap().remove(token);
        } else {
            woken.await.unwrap();
        }
    }

    /// Hands the key on (or frees it), as the holder `token`.
    pub async fn release(&self, token: &str) {
        let _: i64 = RELEASE
            .key(&self.key)
            .key(format!("{}:line", self.key))
            .arg(token)
            .arg(TTL_MS)
            .arg(channel(&self.key))
            .invoke_async(&mut self.calls.clone())
            .await
            .unwrap();
    }
}

/// The release channel of `key`.
fn channel(key: &str) -> String {
    format!("{key}:released")
}
