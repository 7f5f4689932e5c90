//! Balances in PostgreSQL, written only with the fencing token of the account's
//! lease.
//!
//! A change is two statements, both fenced:
//!
//! 1. **claim**: `UPDATE accounts SET fence = $token WHERE id = $1 AND fence < $token
//!    RETURNING balance` — reads the balance *and* records our token, so from
//!    now on every holder with an older token is refused;
//! 2. **write**: `UPDATE accounts SET balance = $new WHERE id = $1 AND fence = $token`
//!    — lands only if no newer holder claimed the row in between.
//!
//! Fencing only the final write (`WHERE fence < $token`) is not enough for a
//! read-modify-write: a newer holder B could read the balance *before* a stale
//! holder A's late write lands and then overwrite it, losing A's change. Fencing
//! the read closes that gap: A's late write is refused as soon as B has claimed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tenure::Fence;
use tokio::sync::{Mutex, RwLock};
use tokio_postgres::{Client, NoTls};

use crate::config::SecretUrl;

/// The longest a (re)connection to PostgreSQL may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The table, created when missing.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS accounts (
    id      TEXT PRIMARY KEY,
    balance BIGINT NOT NULL DEFAULT 0 CHECK (balance >= 0),
    fence   BIGINT NOT NULL DEFAULT 0
)";

/// A PostgreSQL connection holding the accounts. Share it with an `Arc`;
/// concurrent statements are pipelined on the one connection, which is opened
/// again when PostgreSQL closed it (restart, `pg_terminate_backend`).
#[derive(Debug)]
pub struct Ledger {
    /// Redacted in `Debug`: the connection string may hold a password.
    url: SecretUrl,
    client: RwLock<Arc<Client>>,
    /// One reconnection at a time; the others wait for its result.
    reconnecting: Mutex<()>,
}

/// A database failure.
#[derive(Debug)]
pub struct DbError(pub String);

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "database: {}", self.0)
    }
}

impl std::error::Error for DbError {}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        DbError(e.to_string())
    }
}

/// The outcome of [`Ledger::claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The row is ours for this token; its balance.
    Claimed {
        /// The balance as of the claim.
        balance: i64,
    },
    /// A holder with this or a newer token claimed the row: our lease is stale.
    Stale {
        /// The token recorded in the row.
        current: u64,
    },
    /// No such account.
    Missing,
}

/// The outcome of [`Ledger::write`] and [`Ledger::change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Written; the new balance.
    Applied {
        /// The balance after the change.
        balance: i64,
    },
    /// A newer lease holder claimed the account: nothing was written.
    Stale,
    /// The withdrawal exceeds the balance: nothing was written.
    Insufficient {
        /// The balance that was too small.
        balance: i64,
    },
    /// The change would overflow the balance: nothing was written.
    Overflow,
    /// No such account.
    Missing,
}

async fn open_connection(url: &str) -> Result<Client, DbError> {
    let (client, connection) =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio_postgres::connect(url, NoTls))
            .await
            .map_err(|_| DbError(format!("no connection within {CONNECT_TIMEOUT:?}")))??;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::error!(error = %e, "PostgreSQL connection ended");
        }
    });
    Ok(client)
}

fn token(fence: Fence) -> Result<i64, DbError> {
    i64::try_from(fence.get()).map_err(|_| DbError(format!("fence {fence} exceeds BIGINT")))
}

impl Ledger {
    /// Connects and creates the table if needed.
    pub async fn connect(url: &str) -> Result<Self, DbError> {
        let client = open_connection(url).await?;
        client.batch_execute(SCHEMA).await?;
        Ok(Ledger {
            url: SecretUrl::new(url),
            client: RwLock::new(Arc::new(client)),
            reconnecting: Mutex::new(()),
        })
    }

    /// The connection, opened again if PostgreSQL closed it.
    async fn client(&self) -> Result<Arc<Client>, DbError> {
        let current = Arc::clone(&*self.client.read().await);
        if !current.is_closed() {
            return Ok(current);
        }
        let _one_at_a_time = self.reconnecting.lock().await;
        let current = Arc::clone(&*self.client.read().await);
        if !current.is_closed() {
            return Ok(current); // someone else reconnected meanwhile
        }
        tracing::warn!("PostgreSQL connection closed; reconnecting");
        let fresh = Arc::new(open_connection(self.url.expose()).await?);
        *self.client.write().await = Arc::clone(&fresh);
        Ok(fresh)
    }

    /// The balance of `id`, if the account exists.
    pub async fn balance(&self, id: &str) -> Result<Option<i64>, DbError> {
        let row = self
            .client()
            .await?
            .query_opt("SELECT balance FROM accounts WHERE id = $1", &[&id])
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Creates the account with balance 0 if it does not exist.
    pub async fn open(&self, id: &str) -> Result<(), DbError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO accounts (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
                &[&id],
            )
            .await?;
        Ok(())
    }

    /// Step 1: records `fence` in the row if it is newer than the one there,
    /// and reads the balance.
    pub async fn claim(&self, id: &str, fence: Fence) -> Result<Claim, DbError> {
        let t = token(fence)?;
        let row = self
            .client()
            .await?
            .query_opt(
                "UPDATE accounts SET fence = $2 WHERE id = $1 AND fence < $2 RETURNING balance",
                &[&id, &t],
            )
            .await?;
        if let Some(row) = row {
            return Ok(Claim::Claimed {
                balance: row.get(0),
            });
        }
        let current = self
            .client()
            .await?
            .query_opt("SELECT fence FROM accounts WHERE id = $1", &[&id])
            .await?;
        Ok(match current {
            Some(r) => Claim::Stale {
                current: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            },
            None => Claim::Missing,
        })
    }

    /// Step 2: writes `balance` if the row still carries `fence`.
    pub async fn write(&self, id: &str, fence: Fence, balance: i64) -> Result<Change, DbError> {
        let t = token(fence)?;
        let n = self
            .client()
            .await?
            .execute(
                "UPDATE accounts SET balance = $3 WHERE id = $1 AND fence = $2",
                &[&id, &t, &balance],
            )
            .await?;
        Ok(if n == 1 {
            Change::Applied { balance }
        } else {
            Change::Stale
        })
    }

    /// Claims, checks and writes: adds `delta` (negative to withdraw) to the
    /// balance of `id`, fenced by `fence`.
    pub async fn change(&self, id: &str, fence: Fence, delta: i64) -> Result<Change, DbError> {
        let balance = match self.claim(id, fence).await? {
            Claim::Claimed { balance } => balance,
            Claim::Stale { .. } => return Ok(Change::Stale),
            Claim::Missing => return Ok(Change::Missing),
        };
        let Some(new) = balance.checked_add(delta) else {
            return Ok(Change::Overflow);
        };
        if new < 0 {
            return Ok(Change::Insufficient { balance });
        }
        self.write(id, fence, new).await
    }
}
