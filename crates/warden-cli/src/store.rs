//! Which store to use: `--backend` / `WARDEN_BACKEND`, else the embedded SQLite
//! default.

use std::path::PathBuf;

use warden::Warden;

use crate::cli::Global;
use crate::exit::{Failure, UNAVAILABLE};

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
        several => Err(Failure::usage(format!(
            "{} backends given ({}): quorum leases over several Redis masters are not \
             supported by this warden yet; give one --backend",
            several.len(),
            several.join(", ")
        ))),
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
