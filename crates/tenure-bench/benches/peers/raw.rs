//! The hand-written client: redis-rs and two minimal scripts, what a careful
//! engineer writes without a library. Acquire is `SET NX PX` and, when won,
//! `INCR` of a fence counter; release is compare-and-delete.

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

/// Lease TTL of the raw client, ms.
const TTL_MS: u64 = 10_000;

/// One multiplexed connection, as the other Rust peers use.
#[derive(Clone)]
pub struct Raw(MultiplexedConnection);

impl Raw {
    pub async fn connect(url: &str) -> Self {
        let client = redis::Client::open(url).unwrap();
        Raw(client.get_multiplexed_async_connection().await.unwrap())
    }

    /// Tries to take `key` with `token`; true when taken.
    pub async fn acquire(&self, key: &str, token: &str) -> bool {
        let mut c = self.0.clone();
        let fence: i64 = ACQUIRE
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
        let mut c = self.0.clone();
        let _: i64 = RELEASE
            .key(key)
            .arg(token)
            .invoke_async(&mut c)
            .await
            .unwrap();
    }
}
