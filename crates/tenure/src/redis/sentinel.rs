//! Redis Sentinel: the `redis+sentinel://` URL, master discovery through the
//! sentinels, and re-discovery after a failover.
//!
//! `redis+sentinel://[user:password@]host1:26379,host2:26379/MASTER[/DB][?query]`
//! (`rediss+sentinel://` for TLS, to the sentinels and the master alike) is the
//! convention of the `redis-sentinel-url` Python package and of Celery/Kombu
//! users: the hosts are sentinels, `MASTER` is the name they monitor, the
//! credentials, database and query apply to the master (the sentinels are
//! asked without credentials). The sentinels are asked in order
//! (`SENTINEL get-master-addr-by-name`); the first address answered is the
//! master. A call that fails the way a demoted or dead master fails (the
//! connection is refused, dropped or times out; `READONLY`) makes the next call
//! ask the sentinels again, so tenure follows a failover one failed call after
//! it happened; the failed call itself is a transient error the caller retries.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::conn::{Certificates, node_manager, open_client};

/// The URL schemes of a master found through Redis Sentinel, plain and TLS.
pub(crate) const SENTINEL_SCHEMES: [&str; 2] = ["redis+sentinel", "rediss+sentinel"];

/// What a `redis+sentinel://` URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    /// `redis` or `rediss`.
    scheme: String,
    /// `user:password@` or empty.
    userinfo: String,
    sentinels: Vec<String>,
    master: String,
    /// `/DB` or empty.
    db: String,
    /// `?query` or empty.
    query: String,
}

impl Spec {
    fn parse(url: &str) -> Option<Result<Spec, String>> {
        let (scheme, rest) = url.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if !SENTINEL_SCHEMES.contains(&scheme.as_str()) {
            return None;
        }
        let scheme = scheme.trim_end_matches("+sentinel").to_string();
        // Credentials end at the last `@` (a password may contain `,` or `@`).
        let (userinfo, after) = match rest.rfind('@') {
            Some(at) => rest.split_at(at + 1),
            None => ("", rest),
        };
        let (hosts_path, query) = match after.split_once('?') {
            Some((h, q)) => (h, format!("?{q}")),
            None => (after, String::new()),
        };
        let (hosts, path) = hosts_path.split_once('/').unwrap_or((hosts_path, ""));
        let mut segments = path.split('/');
        let master = segments.next().unwrap_or_default().to_string();
        let db = segments.next().unwrap_or_default();
        if master.is_empty() || segments.next().is_some() {
            return Some(Err(
                "name the master the sentinels monitor: redis+sentinel://host:26379/MASTER[/DB]"
                    .into(),
            ));
        }
        if !db.is_empty() && db.parse::<u32>().is_err() {
            return Some(Err(format!("the database must be a number, not {db:?}")));
        }
        let sentinels: Vec<String> = hosts.split(',').map(|h| h.trim().to_string()).collect();
        if sentinels.iter().any(String::is_empty) {
            return Some(Err(
                "the sentinel list has an empty entry; write host1:26379,host2:26379".into(),
            ));
        }
        Some(Ok(Spec {
            scheme,
            userinfo: userinfo.to_string(),
            sentinels,
            master,
            db: if db.is_empty() {
                String::new()
            } else {
                format!("/{db}")
            },
            query,
        }))
    }

    /// The URL of the master at `addr` (`host:port`), with its credentials.
    fn master_url(&self, addr: &str) -> String {
        format!(
            "{}://{}{addr}{}{}",
            self.scheme, self.userinfo, self.db, self.query
        )
    }

    /// The URL of one sentinel, without the master's credentials.
    fn sentinel_url(&self, sentinel: &str) -> String {
        format!("{}://{sentinel}", self.scheme)
    }
}

/// The master as the sentinels last named it.
struct Current {
    addr: String,
    client: redis::Client,
    manager: ConnectionManager,
    /// Bumped on every discovery, so a failure seen on an older master does
    /// not throw away a newer one.
    generation: u64,
}

struct Inner {
    spec: Spec,
    certs: Option<Certificates>,
    timeout: Duration,
    connect_timeout: Duration,
    current: Mutex<Option<Arc<Current>>>,
    /// One discovery at a time; callers waiting on it use its result.
    discovering: tokio::sync::Mutex<()>,
}

/// A connection to the master the sentinels name, re-discovered after a
/// failed call. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SentinelLink {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SentinelLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelLink")
            .field("master", &self.inner.spec.master)
            .field("sentinels", &self.inner.spec.sentinels)
            .finish_non_exhaustive()
    }
}

impl SentinelLink {
    /// A link for a `redis+sentinel://` URL without any I/O; `None` for any
    /// other scheme. The error is a reason that never repeats the credentials.
    pub(super) fn parse(
        url: &str,
        certs: Option<Certificates>,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Option<Result<Self, String>> {
        Some(Spec::parse(url)?.map(|spec| SentinelLink {
            inner: Arc::new(Inner {
                spec,
                certs,
                timeout,
                connect_timeout,
                current: Mutex::new(None),
                discovering: tokio::sync::Mutex::new(()),
            }),
        }))
    }

    /// The client of the current master (discovering it if needed), e.g. to
    /// open a RESP3 subscriber there.
    pub(super) async fn master_client(&self) -> RedisResult<redis::Client> {
        Ok(self.master().await?.client.clone())
    }

    fn cached(&self) -> Option<Arc<Current>> {
        self.inner
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The current master, asking the sentinels when none is known.
    async fn master(&self) -> RedisResult<Arc<Current>> {
        if let Some(current) = self.cached() {
            return Ok(current);
        }
        let _one = self.inner.discovering.lock().await;
        if let Some(current) = self.cached() {
            return Ok(current);
        }
        let addr = self.ask_sentinels().await?;
        let info = self
            .inner
            .spec
            .master_url(&addr)
            .as_str()
            .into_connection_info()?;
        let client = open_client(info, self.inner.certs.clone(), &addr).map_err(|e| {
            RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "master",
                e.to_string(),
            ))
        })?;
        let manager = node_manager(
            &client,
            Some(self.inner.timeout),
            self.inner.connect_timeout,
        )?;
        let mut slot = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        let generation = slot.as_ref().map_or(0, |c| c.generation) + 1;
        tracing::debug!(master = %self.inner.spec.master, %addr, "master discovered through sentinel");
        let current = Arc::new(Current {
            addr,
            client,
            manager,
            generation,
        });
        *slot = Some(Arc::clone(&current));
        Ok(current)
    }

    /// The first master address a sentinel answers.
    async fn ask_sentinels(&self) -> RedisResult<String> {
        let spec = &self.inner.spec;
        let mut reasons = Vec::new();
        for sentinel in &spec.sentinels {
            let asked = tokio::time::timeout(self.inner.timeout, async {
                let client = redis::Client::open(spec.sentinel_url(sentinel))?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.inner.connect_timeout))
                    .set_response_timeout(Some(self.inner.timeout));
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&spec.master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            })
            .await;
            match asked {
                Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
                Ok(Ok(None)) => reasons.push(format!("{sentinel}: does not monitor it")),
                Ok(Err(e)) => reasons.push(format!("{sentinel}: {e}")),
                Err(_) => reasons.push(format!("{sentinel}: no answer")),
            }
        }
        // An I/O error: unreachable, so transient (the sentinels may be electing).
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!(
                "no sentinel named the master {:?} ({})",
                spec.master,
                reasons.join("; ")
            ),
        )))
    }

    /// After a failed call on `current`: forget that master if the failure
    /// says it may no longer be the master, so the next call asks again.
    fn note<T>(&self, current: &Current, reply: &RedisResult<T>) {
        let Err(e) = reply else { return };
        let demoted = e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.code() == Some("READONLY");
        if !demoted {
            return;
        }
        let mut slot = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        if slot
            .as_ref()
            .is_some_and(|c| c.generation == current.generation)
        {
            tracing::debug!(master = %self.inner.spec.master, addr = %current.addr, error = %e, "asking the sentinels again");
            *slot = None;
        }
    }
}

impl ConnectionLike for SentinelLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let current = self.master().await?;
            let reply = current.manager.clone().req_packed_command(cmd).await;
            self.note(&current, &reply);
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let current = self.master().await?;
            let reply = current
                .manager
                .clone()
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.note(&current, &reply);
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.inner
            .spec
            .db
            .trim_start_matches('/')
            .parse()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_sentinels_master_and_database() {
        let spec =
            Spec::parse("redis+sentinel://:p,w@d@s1:26379, s2:26380/mymaster/2?protocol=resp3")
                .unwrap()
                .unwrap();
        assert_eq!(spec.sentinels, ["s1:26379", "s2:26380"]);
        assert_eq!(spec.master, "mymaster");
        assert_eq!(
            spec.master_url("10.0.0.1:6379"),
            "redis://:p,w@d@10.0.0.1:6379/2?protocol=resp3"
        );
        assert_eq!(spec.sentinel_url("s1:26379"), "redis://s1:26379");
        let tls = Spec::parse("REDISS+SENTINEL://s:1/m").unwrap().unwrap();
        assert_eq!(tls.master_url("h:2"), "rediss://h:2");
    }

    #[test]
    fn a_sentinel_url_without_master_or_with_a_bad_database_is_refused() {
        assert!(Spec::parse("redis://h:1").is_none());
        assert!(Spec::parse("redis+cluster://h:1").is_none());
        for bad in [
            "redis+sentinel://:s3cret@s:1",
            "redis+sentinel://:s3cret@s:1/",
            "redis+sentinel://:s3cret@s:1/m/x",
            "redis+sentinel://:s3cret@s:1/m/0/extra",
            "redis+sentinel://:s3cret@s:1,,s:2/m",
        ] {
            let reason = Spec::parse(bad).unwrap().unwrap_err();
            assert!(!reason.contains("s3cret"), "{reason}");
        }
    }
}
