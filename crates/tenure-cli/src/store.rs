//! Which store to use: `--backend` / `TENURE_BACKEND`, else the embedded SQLite
//! default (one file per user).

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure::Coordinator;
use tenure::sqlite::{SqliteOptions, SqliteStore};

use crate::cli::Global;
use crate::exit::{Failure, UNAVAILABLE};

/// Time budget of one quorum node's answer, connecting included.
#[cfg(feature = "redis")]
const QUORUM_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// The longest [`close_all`] waits for the stores' background clean-up.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Every store this process connected to, for [`close_all`]. They stay
/// here until the process exits, which is never dropped: what dropping a
/// store would still do the kernel does at exit (a SQLite connection's
/// close only frees memory, unmaps its shared-memory index and closes its
/// files, releasing their locks; the log is not checkpointed on close, see
/// the store's `prepare`), so a one-shot run does not pay for it.
static OPENED: std::sync::Mutex<Vec<Coordinator>> = std::sync::Mutex::new(Vec::new());

/// Lets the clean-up the stores still run in the background (a quorum's
/// undos and repeated releases) finish before the process exits — for at
/// most [`CLOSE_TIMEOUT`]: exiting drops it, and what it was to delete would
/// hold the lease for a TTL.
pub async fn close_all() {
    let opened = OPENED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let all = async {
        for tenure in &opened {
            tenure.close().await;
        }
    };
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, all).await;
}

/// Schemes that start a new URL in a comma-separated list. A comma followed by
/// anything else belongs to the URL before it (a password may contain one).
const SCHEMES: [&str; 10] = [
    "redis://",
    "rediss://",
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
    "sqlite:",
    "memory:",
    "etcd://",
    "etcds://",
];

/// Splits a `--backend` / `TENURE_BACKEND` value into URLs: only at a comma that
/// starts another URL, never inside a password. The library's
/// `tenure::redis::split_redis_urls` follows the same rule for Redis lists; this
/// one also cuts before `sqlite:`, `memory:`, `etcd://` and
/// `redis+cluster://`/`redis+sentinel://` (whose own lists of members are one URL,
/// `etcd://h1:2379,h2:2379`) so that a mixed list is refused
/// by name rather than read as one odd Redis URL.
pub fn split_urls(value: &str) -> Vec<&str> {
    let mut urls = Vec::new();
    let mut start = 0;
    for (i, _) in value.match_indices(',') {
        let rest = value[i + 1..].trim_start();
        if SCHEMES.iter().any(|scheme| starts_with_ci(rest, scheme)) {
            urls.push(&value[start..i]);
            start = i + 1;
        }
    }
    urls.push(&value[start..]);
    urls.into_iter()
        .map(|u| u.trim().trim_end_matches(',').trim())
        .filter(|u| !u.is_empty())
        .collect()
}

/// Every URL of `--backend` (each value may hold several, see [`split_urls`]).
fn backend_urls(global: &Global) -> Vec<&str> {
    global.backends.iter().flat_map(|v| split_urls(v)).collect()
}

/// Whether the configured store is a SQLite file (the default, or `sqlite:`).
///
/// Its calls run on this process's one thread (see [`sqlite_options`]), and
/// the few that go to tokio's blocking pool run one at a time (they share
/// one connection), so one pool thread serves them all: with more, a call
/// issued as the previous one returns finds no idle thread yet and starts
/// another.
pub fn is_sqlite(global: &Global) -> bool {
    let urls = backend_urls(global);
    urls.is_empty() || urls.iter().all(|u| starts_with_ci(u, "sqlite:"))
}

/// Connects to the configured store (closed by [`close_all`] at exit).
pub async fn connect(global: &Global) -> Result<Coordinator, Failure> {
    let tenure = open(global).await?;
    OPENED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(tenure.clone());
    Ok(tenure)
}

async fn open(global: &Global) -> Result<Coordinator, Failure> {
    // `--backend "$REDIS_URL"` with the variable unset: falling back to this
    // user's SQLite file would quietly coordinate nothing across hosts.
    if global.backends.iter().any(|v| split_urls(v).is_empty()) {
        return Err(Failure::usage(
            "--backend (or TENURE_BACKEND) is empty — an unset variable? Give a URL, or \
             leave it out to use this user's SQLite file",
        ));
    }
    let urls = backend_urls(global);
    // In-process state coordinates nothing between two tenure invocations: each
    // would hold every lease and a full rate-limit budget alone.
    if urls.iter().any(|u| starts_with_ci(u, "memory:")) {
        return Err(Failure::usage(
            "memory: keeps leases and limits inside one tenure process, so separate \
             invocations would never coordinate; use sqlite:PATH or redis://",
        ));
    }
    match urls.as_slice() {
        [] => {
            let path = default_path()?;
            tracing::info!(path = %path.display(), "using the embedded SQLite default");
            let store = SqliteStore::open(path, sqlite_options()).await?;
            Ok(Coordinator::with_backend(store))
        }
        [url] if starts_with_ci(url, "sqlite:") => {
            let builder = Coordinator::builder(*url).sqlite_options(sqlite_options());
            Ok(builder.connect().await?)
        }
        // The library reads the URL (and redacts it in its errors, among
        // them the one for a store this build left out).
        [url] if tls_set(global) => connect_tls(url, global).await,
        [url] => Ok(Coordinator::connect(url).await?),
        several => {
            if several
                .iter()
                .any(|u| !(starts_with_ci(u, "redis://") || starts_with_ci(u, "rediss://")))
            {
                // The offending URL is not repeated: it may carry a password.
                return Err(Failure::usage(
                    "several backends form a quorum of Redis masters; each must be a \
                     redis:// or rediss:// URL",
                ));
            }
            connect_quorum(several).await
        }
    }
}

/// A quorum of Redis masters.
#[cfg(feature = "redis")]
async fn connect_quorum(urls: &[&str]) -> Result<Coordinator, Failure> {
    use tenure::quorum::{QuorumOptions, QuorumStore};
    // A one-shot process connects cold to every node; Redlock's usual
    // 100 ms per node is too tight for that on a busy host.
    let options = QuorumOptions::default().node_timeout(QUORUM_NODE_TIMEOUT);
    let backend = QuorumStore::connect(urls, options).await?;
    Ok(Coordinator::with_backend(backend))
}

/// A quorum of Redis masters, in a build without Redis.
#[cfg(not(feature = "redis"))]
async fn connect_quorum(_urls: &[&str]) -> Result<Coordinator, Failure> {
    Err(Failure::usage(
        "several backends form a quorum of Redis masters, and this build of tenure \
         has no Redis support; turn on its cargo feature `redis`",
    ))
}

/// How the command line uses a SQLite file: each operation on the calling
/// thread when the file is free, since the process does one thing at a time
/// (renewals, and waits for another process's lock, still go to the
/// blocking pool, so that the command's deadline is kept meanwhile).
fn sqlite_options() -> SqliteOptions {
    SqliteOptions::default().inline(true)
}

/// Whether --cacert, --tls-cert or --tls-key was given.
fn tls_set(global: &Global) -> bool {
    global.cacert.is_some() || global.tls_cert.is_some()
}

/// A store over TLS with the certificates of --cacert / --tls-cert /
/// --tls-key: an etcd cluster or a Redis server; any other store ignores them
/// (TENURE_CACERT may be set for the whole environment).
#[cfg_attr(not(any(feature = "etcd", feature = "tls")), allow(unused_variables))]
async fn connect_tls(url: &str, global: &Global) -> Result<Coordinator, Failure> {
    #[cfg(feature = "etcd")]
    if starts_with_ci(url, "etcds://") {
        return connect_etcd_tls(url, global).await;
    }
    let redis_tls = REDIS_TLS_SCHEMES
        .iter()
        .any(|scheme| starts_with_ci(url, scheme));
    #[cfg(feature = "tls")]
    if redis_tls {
        return connect_redis_tls(url, global).await;
    }
    if !(redis_tls || starts_with_ci(url, "etcds://")) {
        tracing::debug!(
            "--cacert/--tls-cert/--tls-key apply to rediss://, rediss+cluster://, \
             rediss+sentinel:// and etcds:// only; ignored"
        );
    }
    // A store this build left out gets the library's error, which names it.
    Ok(Coordinator::connect(url).await?)
}

/// The schemes of Redis over TLS.
const REDIS_TLS_SCHEMES: [&str; 3] = ["rediss://", "rediss+cluster://", "rediss+sentinel://"];

/// An etcd cluster over TLS (etcdctl's --cacert / --cert / --key).
#[cfg(feature = "etcd")]
async fn connect_etcd_tls(url: &str, global: &Global) -> Result<Coordinator, Failure> {
    let mut options = tenure::etcd::EtcdOptions::default();
    if let Some(ca) = &global.cacert {
        options = options.ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&global.tls_cert, &global.tls_key) {
        options = options.client_cert(cert, key);
    }
    Ok(Coordinator::connect_etcd(url, options).await?)
}

/// A Redis server over TLS.
#[cfg(feature = "tls")]
async fn connect_redis_tls(url: &str, global: &Global) -> Result<Coordinator, Failure> {
    let mut options = tenure::redis::RedisOptions::default();
    if let Some(ca) = &global.cacert {
        options = options.ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&global.tls_cert, &global.tls_key) {
        options = options.client_cert(cert, key);
    }
    // Every capability of the store, as `Coordinator::connect` gives: leases,
    // limits, records (`once`) and semaphores (`run --permits`).
    let builder = Coordinator::builder(url).redis_options(options);
    Ok(builder.connect().await?)
}

fn starts_with_ci(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// `$TENURE_DB`, else `$XDG_STATE_HOME/tenure/tenure.db`, else
/// `$HOME/.local/state/tenure/tenure.db`.
///
/// The default is per user: the directory is created 0700 and the file 0600,
/// since it holds the holders' owner tokens. A `tenure` directory or file
/// under the state home that an older version left readable by others is
/// tightened. A database named by `$TENURE_DB` is created 0600 when missing
/// and otherwise left as its owner set it (it may be shared on purpose).
pub fn default_path() -> Result<PathBuf, Failure> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let (path, ours) = if let Some(db) = non_empty("TENURE_DB") {
        (PathBuf::from(db), false)
    } else if let Some(state) = non_empty("XDG_STATE_HOME") {
        (PathBuf::from(state).join("tenure").join("tenure.db"), true)
    } else if let Some(home) = non_empty("HOME") {
        let path = PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("tenure")
            .join("tenure.db");
        (path, true)
    } else {
        return Err(Failure::usage(
            "no place for the default database: HOME is not set; set TENURE_DB or give --backend",
        ));
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Looked at first: the directory is there on every run but the first.
        let found = std::fs::metadata(dir).ok().filter(|meta| meta.is_dir());
        if found.is_none() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| unusable("create the directory", dir, &e))?;
        }
        match found {
            Some(meta) if ours => narrow(dir, &meta, 0o700)?,
            None if ours => tighten(dir, 0o700)?,
            _ => {}
        }
    }
    // SQLite would create the file with the umask's mode; create it first
    // (an empty file is an empty database). Its -wal and -shm files copy the
    // database file's mode.
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if ours {
                tighten(&path, 0o600)?;
                for suffix in ["-wal", "-shm"] {
                    let mut side = path.clone().into_os_string();
                    side.push(suffix);
                    tighten_if_present(Path::new(&side), 0o600)?;
                }
            }
        }
        Err(e) => return Err(unusable("create", &path, &e)),
    }
    Ok(path)
}

/// Removes the group and other permission bits of `path` beyond `mode`.
fn tighten(path: &Path, mode: u32) -> Result<(), Failure> {
    let meta = std::fs::metadata(path).map_err(|e| unusable("inspect", path, &e))?;
    narrow(path, &meta, mode)
}

/// [`tighten`] where `path` may be missing (then there is nothing to do).
fn tighten_if_present(path: &Path, mode: u32) -> Result<(), Failure> {
    match std::fs::metadata(path) {
        Ok(meta) => narrow(path, &meta, mode),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(unusable("inspect", path, &e)),
    }
}

/// Removes the permission bits of `path` (whose metadata is `meta`) beyond
/// `mode`.
fn narrow(path: &Path, meta: &std::fs::Metadata, mode: u32) -> Result<(), Failure> {
    if meta.permissions().mode() & 0o777 & !mode != 0 {
        let narrowed = meta.permissions().mode() & 0o777 & mode;
        std::fs::set_permissions(path, Permissions::from_mode(narrowed))
            .map_err(|e| unusable("restrict the permissions of", path, &e))?;
    }
    Ok(())
}

fn unusable(what: &str, path: &Path, e: &std::io::Error) -> Failure {
    Failure::new(
        UNAVAILABLE,
        format!("cannot {what} the default database {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::split_urls;

    #[test]
    fn commas_split_only_before_another_url() {
        assert_eq!(
            split_urls("redis://a:1, redis://b:2,rediss://c:3"),
            ["redis://a:1", "redis://b:2", "rediss://c:3"]
        );
        assert_eq!(
            split_urls("redis://:p,w@ss,word@h:1"),
            ["redis://:p,w@ss,word@h:1"]
        );
        assert_eq!(
            split_urls("redis://:pw@h:1,sqlite:x.db"),
            ["redis://:pw@h:1", "sqlite:x.db"]
        );
        assert!(split_urls(" , ").is_empty());
        // An etcd URL lists its members after commas: one URL; another
        // scheme after a comma starts a second one (and is refused).
        assert_eq!(
            split_urls("etcd://u:p,w@h1:2379,h2:2379"),
            ["etcd://u:p,w@h1:2379,h2:2379"]
        );
        assert_eq!(
            split_urls("redis://h:1,etcd://h2"),
            ["redis://h:1", "etcd://h2"]
        );
        assert_eq!(
            split_urls("redis+cluster://:p,w@a:1,b:2"),
            ["redis+cluster://:p,w@a:1,b:2"]
        );
        assert_eq!(
            split_urls("redis://h:1,redis+cluster://a:1,b:2"),
            ["redis://h:1", "redis+cluster://a:1,b:2"]
        );
    }
}
