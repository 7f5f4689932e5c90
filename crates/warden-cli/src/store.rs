//! Which store to use: `--backend` / `WARDEN_BACKEND`, else the embedded SQLite
//! default.

use std::path::PathBuf;

use std::time::Duration;

use warden::Warden;
use warden::quorum::{QuorumBackend, QuorumOptions};

use crate::cli::Global;
use crate::exit::{Failure, UNAVAILABLE};

/// Time budget of one quorum node's answer, connecting included.
const QUORUM_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// Connects to the configured store.
pub async fn connect(global: &Global) -> Result<Warden, Failure> {
    let urls: Vec<&str> = global
        .backends
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .collect();
    match urls.as_slice() {
        [] => {
            let path = default_path()?;
            tracing::info!(path = %path.display(), "using the embedded SQLite default");
            Ok(Warden::sqlite(path).await?)
        }
        [url] => Ok(Warden::connect(url).await?),
        several => {
            if let Some(other) = several
                .iter()
                .find(|u| !(u.starts_with("redis://") || u.starts_with("rediss://")))
            {
                return Err(Failure::usage(format!(
                    "several backends form a quorum of Redis masters; {other:?} is not a \
                     redis:// or rediss:// URL"
                )));
            }
            // A one-shot process connects cold to every node; Redlock's usual
            // 100 ms per node is too tight for that on a busy host.
            let options = QuorumOptions::default().node_timeout(QUORUM_NODE_TIMEOUT);
            let backend = QuorumBackend::connect(several, options).await?;
            Ok(Warden::with_backend(backend))
        }
    }
}

/// `$WARDEN_DB`, else `$XDG_STATE_HOME/warden/warden.db`, else
/// `$HOME/.local/state/warden/warden.db`; the directory is created.
pub fn default_path() -> Result<PathBuf, Failure> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let path = if let Some(db) = non_empty("WARDEN_DB") {
        PathBuf::from(db)
    } else if let Some(state) = non_empty("XDG_STATE_HOME") {
        PathBuf::from(state).join("warden").join("warden.db")
    } else if let Some(home) = non_empty("HOME") {
        PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("warden")
            .join("warden.db")
    } else {
        return Err(Failure::usage(
            "no place for the default database: HOME is not set; set WARDEN_DB or give --backend",
        ));
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::new(
                UNAVAILABLE,
                format!(
                    "cannot create the directory of the default database {}: {e}",
                    dir.display()
                ),
            )
        })?;
    }
    Ok(path)
}
