//! Gates (semaphores, read-write leases) on one Redis master or a Redis
//! Cluster: the state of a gate is one JSON string `{prefix}{key}:permits`
//! (semaphore) or `{prefix}{key}:rw` (read-write lease), its fence counter
//! `…:fence` beside it, both in the lease's hash slot; each operation is one
//! script (`scripts/gate_*.lua`, the rules of `gate/step.rs` on the server's
//! clock, fences floored by its `TIME` as lease fences are). Grants to
//! waiters are published on `…:released` with the waiter's token, releases
//! with `1`, so waiters are woken without polling. With
//! [`RedisOptions::require_replicas`](super::RedisOptions::require_replicas)
//! looks and extends wait for the replicas as lease writes do: a grant they
//! did not acknowledge is given back and reported, an extend is reported and
//! the grant kept.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::RedisStore;
use crate::error::{Error, Result};
use crate::gate::store::HolderRecord;
use crate::gate::{self, GateAsk, GateKind, GateStatus, GateStore, Mode, Request, State};
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStore, QueuePlace, ReleaseOutcome, ReleaseWatch,
};
use crate::token::OwnerToken;

/// A gate script: the lease scripts' fence floor (`fence_floor`), the
/// gates' shared prelude, then the script's own part.
macro_rules! gate_script {
    ($part:literal) => {
        concat!(
            include_str!("scripts/lease_settings.lua"),
            include_str!("scripts/lease_fence.lua"),
            include_str!("scripts/gate_prelude.lua"),
            include_str!(concat!("scripts/", $part)),
        )
    };
}

const LOOK_LUA: &str = gate_script!("gate_look.lua");
const EXTEND_LUA: &str = gate_script!("gate_extend.lua");
const RELEASE_LUA: &str = gate_script!("gate_release.lua");
const STATUS_LUA: &str = gate_script!("gate_status.lua");
static LOOK: LazyLock<Script> = LazyLock::new(|| Script::new(LOOK_LUA));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(STATUS_LUA));

/// A mode as the scripts take it: `r`, `w` or the permit count.
fn mode_arg(mode: Mode) -> String {
    match mode {
        Mode::Read => "r".into(),
        Mode::Write => "w".into(),
        Mode::Permit(n) => n.to_string(),
    }
}

/// The holder to record, as the look script takes it (`''` for none).
fn holder_arg(ask: &GateAsk<'_>) -> Result<String> {
    ask.holder.map_or(Ok(String::new()), |info| {
        serde_json::to_string(&HolderRecord::from(info))
            .map_err(|e| Error::invalid("holder", format!("cannot be recorded: {e}")))
    })
}

impl RedisStore {
    /// Gives back what a look may have granted when it cannot be kept (the
    /// replicas did not acknowledge it); no guard exists yet.
    async fn undo(&self, key: &str, ask: &GateAsk<'_>) {
        if let Err(e) = GateStore::release(self, ask.mode, key, ask.token).await {
            tracing::warn!(key, error = %e, "giving back an unacknowledged grant failed; its TTL will free it");
        }
    }

    /// A look's reply; on an error with acknowledgements required, the
    /// failure may have come after the script granted (the pipeline's
    /// `WAIT`), so the grant is given back first.
    async fn undo_on_error<T>(
        &self,
        written: Result<T>,
        key: &str,
        ask: &GateAsk<'_>,
    ) -> Result<T> {
        if written.is_err() && self.acknowledges_writes() {
            self.undo(key, ask).await;
        }
        written
    }

    /// The Redis key holding the state of a semaphore or read-write lease.
    pub fn gate_key(&self, kind: GateKind, key: &str) -> String {
        self.keys().gate(kind, key)
    }

    fn bad_reply(&self, kind: GateKind, key: &str, detail: String) -> Error {
        Error::WrongType {
            key: self.keys().gate(kind, key),
            detail,
        }
    }
}

#[async_trait]
impl GateStore for RedisStore {
    async fn look(
        &self,
        key: &str,
        ask: GateAsk<'_>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let request = Request::look(&ask);
        let kind = request.kind;
        let keys = self.keys().gate_and_fence(kind, key);
        let holder = holder_arg(&ask)?;
        let args = [
            ask.token.as_str(),
            &mode_arg(ask.mode),
            &request.ttl_ms.to_string(),
            if ask.stand { "1" } else { "0" },
            &self.keys().gate_channel(kind, key),
            &holder,
        ];
        let written = self
            .run_write("look", (&LOOK, LOOK_LUA), &keys, &args)
            .await;
        let ((won, value, place), acks): ((i64, String, String), _) =
            self.undo_on_error(written, key, &ask).await?;
        let number = value
            .parse::<i64>()
            .map_err(|_| self.bad_reply(kind, key, format!("a look answered {value:?}")))?;
        if won == 1 {
            let fence = u64::try_from(number)
                .ok()
                .filter(|f| *f > 0)
                .ok_or_else(|| self.bad_reply(kind, key, format!("fence {number}")))?;
            if let Some(acks) = acks.filter(|a| !a.enough()) {
                self.undo(key, &ask).await;
                return Err(self.unacknowledged("acquire", key, acks));
            }
            return Ok((request.granted(fence), None));
        }
        let ttl_left = u64::try_from(number).ok().map(Duration::from_millis);
        let place = (!place.is_empty()).then(|| QueuePlace::new(place));
        Ok((AcquireReply::Held { ttl_left }, place))
    }

    async fn extend(
        &self,
        mode: Mode,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let request = Request::new(mode, ttl);
        let keys = [self.keys().gate(request.kind, key)];
        let ms = request.ttl_ms.to_string();
        let (renewed, acks): (i64, _) = self
            .run_write(
                "extend",
                (&EXTEND, EXTEND_LUA),
                &keys,
                &[token.as_str(), &ms],
            )
            .await?;
        if let Some(acks) = acks.filter(|a| renewed == 1 && !a.enough()) {
            // The grant is kept: its guard counts on its last confirmed
            // deadline (as for leases).
            return Err(self.unacknowledged("extend", key, acks));
        }
        Ok(request.extended(renewed == 1))
    }

    async fn release(&self, mode: Mode, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let kind = mode.kind();
        let keys = self.keys().gate_and_fence(kind, key);
        let channel = self.keys().gate_channel(kind, key);
        let released: i64 = self
            .run_script(
                "release",
                (&RELEASE, RELEASE_LUA),
                &keys,
                &[token.as_str(), &channel],
            )
            .await?;
        Ok(gate::release_outcome(released == 1))
    }

    async fn status(&self, kind: GateKind, key: &str) -> Result<GateStatus> {
        let keys = self.keys().gate_and_fence(kind, key);
        let (text, now, fence): (String, i64, String) = self
            .run_script("status", (&STATUS, STATUS_LUA), &keys, &[])
            .await?;
        let mut state: State = if text.is_empty() {
            State::default()
        } else {
            serde_json::from_str(&text).map_err(|e| self.bad_reply(kind, key, e.to_string()))?
        };
        state.fence = fence.parse().unwrap_or(0);
        Ok(gate::status_of(&state, now, keys[0].clone()))
    }

    async fn watch(&self, kind: GateKind, key: &str, token: Option<&OwnerToken>) -> ReleaseWatch {
        self.watch_gate(&self.keys().gate_channel(kind, key), token)
            .await
    }

    async fn list(&self, kind: GateKind, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        self.list_gates(kind, prefix).await
    }

    fn describe_gates(&self) -> String {
        LeaseStore::describe(self)
    }
}

impl RedisStore {
    /// A watch on a gate's channel: for grants to `token`, or (`None`) for
    /// every release. Without a subscriber the watch polls.
    async fn watch_gate(&self, channel: &str, token: Option<&OwnerToken>) -> ReleaseWatch {
        let Some(sub) = self.subscriber().await else {
            return ReleaseWatch::polling();
        };
        let channel = channel.to_string();
        let watch = match token {
            Some(token) => sub.watch_turn(channel, token.as_str()).await.map(|turn| {
                ReleaseWatch::for_signal(turn.receiver, false).keeping(Box::new(turn.unwatch))
            }),
            None => sub
                .watch_all(channel)
                .await
                .map(|rx| ReleaseWatch::from_channel(rx, None)),
        };
        watch.unwrap_or_else(ReleaseWatch::polling)
    }
}

impl RedisStore {
    /// The gates of `kind` held now whose user key starts with `prefix`: a
    /// `SCAN` for `PREFIX{TAG*}:rw` (or `:permits`), each read with its
    /// status. Refused on a cluster (`SCAN` walks one node).
    async fn list_gates(&self, kind: GateKind, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        if matches!(self.conn().origin(), super::conn::Origin::Cluster(_)) {
            return Err(Error::Config {
                url: LeaseStore::describe(self),
                reason: "a Redis Cluster cannot list (SCAN walks one node); ask each master \
                         with a redis:// URL"
                    .into(),
            });
        }
        let keys = self
            .scan_user_keys(prefix, &format!(":{}", kind.name()))
            .await?;
        let mut held = Vec::new();
        for key in keys {
            match GateStore::status(self, kind, &key).await {
                Ok(status) if !status.holders.is_empty() => held.push((key, status)),
                Ok(_) | Err(Error::WrongType { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use crate::lease::{CLAIM_WINDOW, PLACE_LIFETIME};

    /// The scripts' place and claim timings are the lease line's.
    #[test]
    fn the_gate_scripts_use_the_lease_lines_timings() {
        let ms = crate::duration::millis;
        let place = format!("local PLACE_MS = {}\n", ms(PLACE_LIFETIME));
        let claim = format!("local CLAIM_MS = {}\n", ms(CLAIM_WINDOW));
        for script in [super::LOOK_LUA, super::RELEASE_LUA] {
            assert!(script.contains(&place), "{place}");
            assert!(script.contains(&claim), "{claim}");
        }
    }

    /// Gate fences are floored in microseconds, as a single master's leases.
    #[test]
    fn the_gate_scripts_floor_fences_by_the_microsecond() {
        for script in [super::LOOK_LUA, super::RELEASE_LUA] {
            assert!(script.contains("local fence_floor_unit = 'us'\n"));
        }
    }
}
