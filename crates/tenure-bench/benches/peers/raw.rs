//! The hand-written client: redis-rs and two minimal scripts, what a careful
//! engineer writes without a library. Acquire is `SET NX PX` and, when won,
//! `INCR` of a fence counter; release is compare-and-delete. Its *same work*
//! variant sends the commands tenure's scripts send on the uncontended path,
//! so tenure's ratio to it is the client's cost alone.

use std::sync::LazyLock;

use redis::Script;
use redis::aio::MultiplexedConnection;

/// KEYS[1] lease, KEYS[2] fence counter; ARGV[1] token, ARGV[2] TTL ms.
pub const ACQUIRE_SOURCE: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
       return redis.call('INCR', KEYS[2]) \
     end \
     return 0";

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SOURCE));

static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
         return redis.call('DEL', KEYS[1])",
    )
});

/// The hand-written client doing tenure's server work (*same work*):
/// acquire is `SET NX PX`, then the fence counter written with the server's
/// clock in microseconds by `SET PX GET` (one above the old counter when that
/// was not below the clock); release is compare-and-delete that first pops
/// the key's waiting line (`LPOP`), as a FIFO hand-off must look for a waiter.
const SAME_ACQUIRE_SOURCE: &str = "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
       return 0 \
     end \
     local now = redis.call('TIME') \
     local floor = tonumber(now[1]) * 1000000 + tonumber(now[2]) \
     local old = redis.call('SET', KEYS[2], string.format('%.0f', floor), 'PX', 86400000, 'GET') \
     if old and tonumber(old) >= floor then \
       floor = tonumber(old) + 1 \
       redis.call('SET', KEYS[2], string.format('%.0f', floor), 'PX', 86400000) \
     end \
     return floor";

static SAME_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(SAME_ACQUIRE_SOURCE));

static SAME_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
         if redis.call('LPOP', KEYS[2]) then return redis.error_reply('a waiter') end \
         return redis.call('DEL', KEYS[1])",
    )
});

/// Lease TTL of the raw client, ms.
const TTL_MS: u64 = 10_000;

/// A client of `url` speaking `protocol`, whose connections set
/// `TCP_NODELAY`, as tenure's do (redis-rs leaves it off).
pub fn client(url: &str, protocol: redis::ProtocolVersion) -> redis::Client {
    let nodelay = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    let mut info = redis::IntoConnectionInfo::into_connection_info(url).unwrap();
    let settings = info.redis_settings().clone().set_protocol(protocol);
    info = info.set_redis_settings(settings).set_tcp_settings(nodelay);
    redis::Client::open(info).unwrap()
}

/// One multiplexed connection, as the other Rust peers use; with
/// [`same_work`](Raw::same_work), the scripts that send tenure's server work.
#[derive(Clone)]
pub struct Raw {
    conn: MultiplexedConnection,
    same_work: bool,
}

impl Raw {
    /// Connects with `TCP_NODELAY`, as tenure does (redis-rs leaves it off).
    pub async fn connect(url: &str) -> Self {
        let client = client(url, redis::ProtocolVersion::RESP2);
        Raw {
            conn: client.get_multiplexed_async_connection().await.unwrap(),
            same_work: false,
        }
    }

    /// This client on the same connection, sending tenure's server work:
    /// the fence floored by the server's clock, and the key's waiting line
    /// looked at (popped) before the delete.
    pub fn same_work(&self) -> Raw {
        Raw {
            conn: self.conn.clone(),
            same_work: true,
        }
    }

    /// Tries to take `key` with `token`; true when taken.
    pub async fn acquire(&self, key: &str, token: &str) -> bool {
        let mut c = self.conn.clone();
        let script = if self.same_work {
            &SAME_ACQUIRE
        } else {
            &ACQUIRE
        };
        let fence: i64 = script
            .key(key)
            .key(format!("{key}:fence"))
            .arg(token)
            .arg(TTL_MS)
            .invoke_async(&mut c)
            .await
            .unwrap();
        fence > 0
    }

    /// Deletes `key` when it still holds `token`.
    pub async fn release(&self, key: &str, token: &str) {
        let mut c = self.conn.clone();
        let mut call = if self.same_work {
            SAME_RELEASE.prepare_invoke()
        } else {
            RELEASE.prepare_invoke()
        };
        call.key(key);
        if self.same_work {
            call.key(format!("{key}:line"));
        }
        let _: i64 = call.arg(token).invoke_async(&mut c).await.unwrap();
    }
}
