//! Expiring semaphores on one Redis master: a sorted set
//! `{prefix}{key}:permits` (owner token → expiry on the server's clock) and a
//! fence counter `{prefix}{key}:permits:fence`, in the lease's hash slot. Each
//! operation is one script. Releases are published on the lease's release
//! channel `{prefix}{key}:released`, so waiters are woken without polling.

use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::RedisStore;
use super::keys::{from_millis, millis};
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStore, ReleaseOutcome, ReleaseWatch, valid_until,
};
use crate::semaphore::SemaphoreStore;
use crate::token::OwnerToken;

/// A semaphore script: the shared prelude (type checks, the server's clock),
/// then the script's own part.
macro_rules! script {
    ($part:literal) => {
        Script::new(concat!(
            include_str!("scripts/semaphore_prelude.lua"),
            include_str!(concat!("scripts/", $part)),
        ))
    };
}

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| script!("semaphore_acquire.lua"));
static EXTEND: LazyLock<Script> = LazyLock::new(|| script!("semaphore_extend.lua"));
static RELEASE: LazyLock<Script> = LazyLock::new(|| script!("semaphore_release.lua"));
static COUNT: LazyLock<Script> = LazyLock::new(|| script!("semaphore_count.lua"));

/// A permit's TTL in whole milliseconds, at least 1 (a sub-millisecond TTL
/// must not round to a permit that is expired when taken).
fn ttl_ms(d: Duration) -> u64 {
    millis(d).max(1)
}

impl RedisStore {
    /// The sorted set holding the permits of semaphore `key`.
    pub fn permits_key(&self, key: &str) -> String {
        self.keys().permits(key)
    }

    fn permits_fence_key(&self, key: &str) -> String {
        self.keys().permits_fence(key)
    }
}

#[async_trait]
impl SemaphoreStore for RedisStore {
    async fn acquire_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        permits: NonZeroU32,
    ) -> Result<AcquireReply> {
        let sent = crate::clock::now();
        let set = self.permits_key(key);
        let mut call = ACQUIRE.key(&set);
        call.key(self.permits_fence_key(key))
            .arg(token.as_str())
            .arg(ttl_ms(ttl))
            .arg(permits.get());
        let (won, value): (i64, i64) = self.conn().script("acquire permit", &set, &call).await?;
        if won != 1 {
            return Ok(AcquireReply::Held {
                ttl_left: from_millis(value),
            });
        }
        let fence = u64::try_from(value).map_err(|_| Error::WrongType {
            key: self.permits_fence_key(key),
            detail: format!("fence counter is {value}"),
        })?;
        Ok(AcquireReply::Acquired {
            fence: Fence::new(fence),
            valid_until: valid_until(sent, ttl),
        })
    }

    async fn extend_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let sent = crate::clock::now();
        let set = self.permits_key(key);
        let mut call = EXTEND.key(&set);
        call.arg(token.as_str()).arg(ttl_ms(ttl));
        let renewed: i64 = self.conn().script("extend permit", &set, &call).await?;
        Ok(if renewed == 1 {
            ExtendReply::Extended {
                valid_until: valid_until(sent, ttl),
            }
        } else {
            ExtendReply::NotHeld
        })
    }

    async fn release_permit(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let set = self.permits_key(key);
        let mut call = RELEASE.key(&set);
        call.arg(token.as_str()).arg(self.keys().released(key));
        let released: i64 = self.conn().script("release permit", &set, &call).await?;
        Ok(if released == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn permits_held(&self, key: &str) -> Result<(u32, Option<Fence>)> {
        let set = self.permits_key(key);
        let mut call = COUNT.key(&set);
        call.key(self.permits_fence_key(key));
        let (held, fence): (i64, Option<u64>) =
            self.conn().script("count permits", &set, &call).await?;
        Ok((
            u32::try_from(held).unwrap_or(0),
            fence.filter(|f| *f > 0).map(Fence::new),
        ))
    }

    async fn watch_permits(&self, key: &str) -> ReleaseWatch {
        // The permits' releases are published on the lease's channel.
        self.watch_releases(key).await
    }

    fn describe_semaphores(&self) -> String {
        self.describe()
    }
}
