//! The protected resources a read-modify-write touches: a fenced value in
//! Redis ([`RedisFencedStore`]), a row in PostgreSQL updated with the fence
//! pattern (`UPDATE … WHERE fence <= $f`), and an unfenced control value.

use std::time::Duration;

use tenure::Fence;
use tenure::fence::FencedWrite;
use tenure::redis::RedisFencedStore;

/// How long one resource operation may take before its outcome is unknown.
pub const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// The outcome of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Applied.
    Applied,
    /// Refused: a newer fence was stored.
    Refused,
}

/// One resource kind, connected.
pub enum Resource {
    /// `RedisFencedStore`: the fence is checked by the store's script.
    RedisFenced(RedisFencedStore),
    /// A plain Redis hash written without any check (the control, or a fenced
    /// resource with its check switched off).
    RedisPlain(redis::aio::MultiplexedConnection),
    /// A PostgreSQL row; `check` adds `AND fence <= $f` to the update.
    Postgres {
        /// The connection, re-made after an error.
        client: Option<tokio_postgres::Client>,
        /// `postgres://…`.
        url: String,
        /// Whether the update carries the fence condition.
        check: bool,
    },
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::RedisFenced(_) => "RedisFenced",
            Resource::RedisPlain(_) => "RedisPlain",
            Resource::Postgres { .. } => "Postgres",
        })
    }
}

/// Creates the PostgreSQL table and one row per resource name.
///
/// # Errors
/// When PostgreSQL cannot be reached.
pub async fn pg_setup(url: &str, names: &[String]) -> Result<(), String> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS chaos_res \
             (id text PRIMARY KEY, fence bigint NOT NULL, value bigint NOT NULL)",
        )
        .await
        .map_err(|e| e.to_string())?;
    for n in names {
        client
            .execute(
                "INSERT INTO chaos_res (id, fence, value) VALUES ($1, 0, 0) ON CONFLICT DO NOTHING",
                &[n],
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn plain_key(name: &str) -> String {
    format!("chaos:plain:{name}")
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Resource {
    /// Connects a resource of the fenced Redis kind (`check`: through the
    /// fenced store; without: plain writes).
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn redis(url: &str, check: bool) -> Result<Self, String> {
        if check {
            let store = RedisFencedStore::connect(url)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Resource::RedisFenced(store))
        } else {
            let client = redis::Client::open(url).map_err(|e| e.to_string())?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            Ok(Resource::RedisPlain(conn))
        }
    }

    /// A PostgreSQL resource (connected lazily).
    pub fn postgres(url: &str, check: bool) -> Self {
        Resource::Postgres {
            client: None,
            url: url.to_string(),
            check,
        }
    }

    async fn pg<'a>(
        client: &'a mut Option<tokio_postgres::Client>,
        url: &str,
    ) -> Result<&'a tokio_postgres::Client, String> {
        if client
            .as_ref()
            .is_none_or(tokio_postgres::Client::is_closed)
        {
            let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            *client = Some(c);
        }
        client.as_ref().ok_or_else(|| "no connection".to_string())
    }

    /// Reads the value (0 when never written).
    ///
    /// # Errors
    /// On any failure or timeout: the read is unknown.
    pub async fn read(&mut self, name: &str) -> Result<u64, String> {
        let fut = async {
            match self {
                Resource::RedisFenced(s) => {
                    Ok(match s.read(name).await.map_err(|e| e.to_string())? {
                        Some((_, v)) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
                        None => 0,
                    })
                }
                Resource::RedisPlain(c) => {
                    let v: Option<u64> = redis::cmd("HGET")
                        .arg(plain_key(name))
                        .arg("value")
                        .query_async(c)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(v.unwrap_or(0))
                }
                Resource::Postgres { client, url, .. } => {
                    let c = Self::pg(client, url).await?;
                    let row = c
                        .query_one("SELECT value FROM chaos_res WHERE id = $1", &[&name])
                        .await
                        .map_err(|e| e.to_string())?;
                    let v: i64 = row.get(0);
                    Ok(u64::try_from(v).unwrap_or(0))
                }
            }
        };
        tokio::time::timeout(OP_TIMEOUT, fut)
            .await
            .map_err(|_| "timeout".to_string())?
    }

    /// Writes `value` with `fence`.
    ///
    /// # Errors
    /// On any failure or timeout: the write's fate is unknown.
    pub async fn write(&mut self, name: &str, fence: u64, value: u64) -> Result<Outcome, String> {
        let fut = async {
            match self {
                Resource::RedisFenced(s) => {
                    match s
                        .write(name, Fence::new(fence), value.to_string())
                        .await
                        .map_err(|e| e.to_string())?
                    {
                        FencedWrite::Applied => Ok(Outcome::Applied),
                        _ => Ok(Outcome::Refused),
                    }
                }
                Resource::RedisPlain(c) => {
                    let _: () = redis::cmd("HSET")
                        .arg(plain_key(name))
                        .arg("fence")
                        .arg(fence)
                        .arg("value")
                        .arg(value)
                        .query_async(c)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(Outcome::Applied)
                }
                Resource::Postgres { client, url, check } => {
                    let c = Self::pg(client, url).await?;
                    let sql = if *check {
                        "UPDATE chaos_res SET value = $2, fence = $3 WHERE id = $1 AND fence <= $3"
                    } else {
                        "UPDATE chaos_res SET value = $2, fence = $3 WHERE id = $1"
                    };
                    let n = c
                        .execute(sql, &[&name, &to_i64(value), &to_i64(fence)])
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(if n == 1 {
                        Outcome::Applied
                    } else {
                        Outcome::Refused
                    })
                }
            }
        };
        tokio::time::timeout(OP_TIMEOUT, fut)
            .await
            .map_err(|_| "timeout".to_string())?
    }
}
