//! Statements compiled once per connection: SQLite compiles a statement in
//! more instructions than most of its runs take (a lease's acquire and release
//! compiled seven, about 70 % of their cost), and the store runs the same few
//! statements over and over. rusqlite keeps them in an LRU cache per
//! connection, reset after each use; a statement compiled before a change of
//! the schema is compiled again by SQLite when next run.

use rusqlite::{Connection, Params, Row, TransactionBehavior};

/// Statements a store's connection keeps compiled: more than the store runs
/// (about 35 distinct), so none is evicted by another.
pub(super) const CAPACITY: usize = 64;

/// [`Connection::execute`] and [`Connection::query_row`] through the
/// connection's cache of compiled statements.
pub(super) trait CachedSql {
    /// Runs `sql` with `params`: the number of rows changed.
    fn execute_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;

    /// Runs `sql` with `params` and maps its first row with `f`
    /// ([`rusqlite::Error::QueryReturnedNoRows`] when there is none).
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>;
}

impl CachedSql for Connection {
    fn execute_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}

/// A transaction begun and committed by cached statements: rusqlite's
/// `Transaction` compiles `BEGIN` and `COMMIT` each time, about 4,000 of
/// the 75,000 instructions a lease's acquire and release cost with every
/// other statement cached. Dropped without [`commit`](Self::commit), or
/// after a commit that failed, it rolls back, as rusqlite's does (a panic
/// unwinding through it included).
pub(super) struct Tx<'c> {
    conn: &'c Connection,
}

impl<'c> Tx<'c> {
    /// Begins a transaction on `conn` (which must have none open).
    pub(super) fn begin(
        conn: &'c Connection,
        behavior: TransactionBehavior,
    ) -> rusqlite::Result<Self> {
        let begin = match behavior {
            TransactionBehavior::Deferred => "BEGIN DEFERRED",
            TransactionBehavior::Immediate => "BEGIN IMMEDIATE",
            // Exclusive, and any behaviour a later rusqlite adds: the
            // strictest.
            _ => "BEGIN EXCLUSIVE",
        };
        conn.execute_cached(begin, [])?;
        Ok(Tx { conn })
    }

    /// Commits. On an error the transaction is still open, and rolled back
    /// when `self` is dropped.
    pub(super) fn commit(self) -> rusqlite::Result<()> {
        self.conn.execute_cached("COMMIT", [])?;
        Ok(())
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            // Nothing more can be done about a failed rollback here: the
            // next `BEGIN` on this connection fails and reports it.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rusqlite::StatementStatus;

    use super::*;

    /// A connection as the store opens one, with a table of three rows.
    fn opened(dir: &tempfile::TempDir) -> Connection {
        let conn = super::super::schema::connect(&dir.path().join("t.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE t (k TEXT PRIMARY KEY NOT NULL);
             INSERT INTO t VALUES ('a'), ('b'), ('c');",
        )
        .unwrap();
        conn
    }

    #[test]
    fn a_cached_statement_is_not_compiled_again_when_its_limit_is_bound() {
        let dir = tempfile::tempdir().unwrap();
        let conn = opened(&dir);
        let sql = "SELECT k FROM t WHERE k > ?1 ORDER BY k LIMIT ?2";
        let mut found = Vec::new();
        for (after, limit) in [("", 2), ("a", 1), ("b", 5)] {
            let mut select = conn.prepare_cached(sql).unwrap();
            let keys: Vec<String> = select
                .query_map(rusqlite::params![after, limit], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            found.push(keys);
            assert_eq!(select.get_status(StatementStatus::RePrepare), 0);
        }
        assert_eq!(found, [vec!["a", "b"], vec!["b"], vec!["c"]]);
    }

    #[test]
    fn a_transaction_commits_or_rolls_back_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let conn = opened(&dir);
        let count = || -> i64 {
            conn.query_row_cached("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap()
        };

        let tx = Tx::begin(&conn, TransactionBehavior::Immediate).unwrap();
        tx.execute_cached("INSERT INTO t VALUES (?1)", ["d"])
            .unwrap();
        drop(tx);
        assert!(conn.is_autocommit());
        assert_eq!(count(), 3);

        let tx = Tx::begin(&conn, TransactionBehavior::Deferred).unwrap();
        tx.execute_cached("INSERT INTO t VALUES (?1)", ["d"])
            .unwrap();
        tx.commit().unwrap();
        assert!(conn.is_autocommit());
        assert_eq!(count(), 4);

        // A failed statement inside leaves the transaction to its drop.
        let tx = Tx::begin(&conn, TransactionBehavior::Exclusive).unwrap();
        tx.execute_cached("INSERT INTO t VALUES (?1)", ["e"])
            .unwrap();
        assert!(
            tx.execute_cached("INSERT INTO t VALUES (?1)", ["a"])
                .is_err()
        );
        drop(tx);
        assert_eq!(count(), 4);
    }

    #[test]
    fn a_commit_refused_by_another_connection_rolls_back_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let conn = opened(&dir);
        let other = super::super::schema::connect(&dir.path().join("t.db")).unwrap();
        // A journal that makes readers block a commit: WAL would not.
        assert_eq!(
            conn.query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))
                .unwrap(),
            "delete"
        );
        conn.busy_timeout(std::time::Duration::ZERO).unwrap();
        let tx = Tx::begin(&conn, TransactionBehavior::Immediate).unwrap();
        tx.execute_cached("INSERT INTO t VALUES (?1)", ["d"])
            .unwrap();
        // The other connection holds a shared lock: the commit is busy.
        let reader = Tx::begin(&other, TransactionBehavior::Deferred).unwrap();
        let _: i64 = reader
            .query_row_cached("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert!(tx.commit().is_err());
        assert!(conn.is_autocommit());
        drop(reader);
        let n: i64 = conn
            .query_row_cached("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
    }
}
