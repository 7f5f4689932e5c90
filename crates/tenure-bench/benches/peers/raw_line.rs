//! The hand-written clients of a FIFO hand-off: the least code that waits
//! the way tenure does under contention. A waiter that finds the key held
//! stands at the end of a list, and a release hands the key to the first in
//! line and publishes its token; waiters hear it on a RESP3 connection of
//! their own and hold the key from that message.
//!
//! Two variants ([`Work`]): the *least* line sends no fences, place expiries,
//! claims or checks: tenure's ratio to it is what the rest costs, and its
//! rate what the machine allows a hand-off through Redis. The *same work*
//! line sends the commands tenure's scripts send per contended cycle (ten:
//! the release's `GET`, `LPOP`, `TIME`, `SET … GET` of the fence counter,
//! `SET`, `PUBLISH`; the stand's `TIME`, `RPUSH` of a place with an expiry;
//! each side one `EVALSHA`): its rate is what tenure's protocol allows with
//! the least client, so tenure's ratio to it is the client's cost alone.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, Script};
use tokio::sync::oneshot;

/// What a line sends per cycle.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// The least any client of this hand-off sends.
    Least,
    /// The commands tenure's protocol sends.
    Same,
}

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

/// The fence of a grant at the server's clock `t` (a `TIME` reply), written
/// to KEYS[3] with a day's retention: `floor`, the clock in µs, or one above a
/// counter that is not below it. Written out where it is used, as tenure's
/// fast paths write theirs: a function defined per call would cost a closure.
const FENCE_LUA: &str = "local floor = tonumber(t[1]) * 1000000 + tonumber(t[2]) \
     local old = redis.call('SET', KEYS[3], string.format('%.0f', floor), 'PX', 86400000, 'GET') \
     if old and tonumber(old) >= floor then \
       floor = tonumber(old) + 1 \
       redis.call('SET', KEYS[3], string.format('%.0f', floor), 'PX', 86400000) \
     end ";

/// *Same work* ask. KEYS[1] lease, KEYS[2] line, KEYS[3] fence counter;
/// ARGV[1] token, ARGV[2] TTL ms. Stands in line with a place that expires a
/// second from the server's clock; only a line that was empty looks at the
/// key, and takes it with a fence. 1 when taken, else 0.
static SAME_ASK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "local t = redis.call('TIME') \
         local place = string.format('%d %s %s', \
           tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 1000, ARGV[2], ARGV[1]) \
         if redis.call('RPUSH', KEYS[2], place) > 1 then return 0 end \
         redis.call('DEL', KEYS[2]) \
         if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
           {FENCE_LUA} \
           return 1 \
         end \
         redis.call('RPUSH', KEYS[2], place) \
         return 0"
    ))
});

/// *Same work* release. KEYS[1] lease, KEYS[2] line, KEYS[3] fence counter;
/// ARGV[1] token, ARGV[2] channel. Hands the key to the first in line with a
/// fence for its TTL and publishes `token fence place`, or deletes it.
static SAME_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
         local first = redis.call('LPOP', KEYS[2]) \
         if not first then return redis.call('DEL', KEYS[1]) end \
         local _, ttl, token = string.match(first, '^(%d+) (%d+) (.+)$') \
         local t = redis.call('TIME') \
         {FENCE_LUA} \
         redis.call('SET', KEYS[1], token, 'PX', ttl) \
         redis.call('PUBLISH', ARGV[2], string.format('%s %d %s', token, floor, first)) \
         return 1"
    ))
});

/// Lease TTL, ms.
const TTL_MS: u64 = 10_000;

/// Who waits for which token's turn.
type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>;

/// A calls connection and a RESP3 connection subscribed to one key's
/// channel.
#[derive(Clone)]
pub struct RawLine {
    work: Work,
    calls: MultiplexedConnection,
    waiters: Waiters,
    /// The lease key and its line, and on the *same work* line its fence
    /// counter: the keys of both scripts.
    keys: Vec<String>,
    channel: String,
    _pushes: MultiplexedConnection,
}

impl RawLine {
    /// Connects to `url` for turns on `key`, sending `work`.
    pub async fn connect(url: &str, key: &str, work: Work) -> Self {
        let waiters = Waiters::default();
        let woken = Arc::clone(&waiters);
        let config = AsyncConnectionConfig::new().set_push_sender(move |push: PushInfo| {
            if let Some(redis::Value::BulkString(message)) = push.data.get(1) {
                // The token, first word of a *same work* message.
                let token = message.split(|b| *b == b' ').next().unwrap_or_default();
                let token = String::from_utf8_lossy(token);
                if let Some(turn) = woken.lock().unwrap().remove(token.as_ref()) {
                    let _ = turn.send(());
                }
            }
            Ok::<(), redis::aio::SendError>(())
        });
        let channel = format!("{key}:released");
        let mut pushes = super::raw::client(url, ProtocolVersion::RESP3)
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        pushes.subscribe(&channel).await.unwrap();
        let calls = super::raw::client(url, ProtocolVersion::RESP2)
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut keys = vec![key.to_string(), format!("{key}:line")];
        if work == Work::Same {
            keys.push(format!("{key}:fence"));
        }
        RawLine {
            work,
            calls,
            waiters,
            keys,
            channel,
            _pushes: pushes,
        }
    }

    /// Waits for the key's turn with `token` (unique per turn, no spaces).
    pub async fn acquire(&self, token: &str) {
        let (turn, woken) = oneshot::channel();
        self.waiters.lock().unwrap().insert(token.to_string(), turn);
        let script = match self.work {
            Work::Least => &ASK,
            Work::Same => &SAME_ASK,
        };
        let taken: i64 = script
            .key(&self.keys)
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
        let mut release = match self.work {
            Work::Least => RELEASE.key(&self.keys),
            Work::Same => SAME_RELEASE.key(&self.keys),
        };
        release.arg(token);
        if self.work == Work::Least {
            release.arg(TTL_MS);
        }
        let _: i64 = release
            .arg(&self.channel)
            .invoke_async(&mut self.calls.clone())
            .await
            .unwrap();
    }
}
