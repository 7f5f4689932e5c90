//! Lua run as a Redis 7 function library (`FUNCTION LOAD` once, then `FCALL`),
//! with `EVALSHA` of the same code as a script where functions are not
//! available.
//!
//! Why: a script's whole text runs on every `EVALSHA`, so every helper it
//! defines is defined again per call; a library's top level runs once, at
//! load, and a call runs only the registered function.
//!
//! The library's name (and its one function's) carries a hash of its code,
//! so two tenure versions on one server never replace each other's library
//! during a rolling upgrade. Recovery mirrors `NOSCRIPT`: an `FCALL` answered
//! "Function not found" (a restart without persistence, `FUNCTION FLUSH`, a
//! new cluster master) loads the library — on every master of a cluster,
//! where redis-rs routes `FUNCTION LOAD` to all of them — and calls again. A
//! server without functions (Redis < 7: `FCALL` is an unknown command) or one
//! whose ACL denies them (`NOPERM`) is remembered per store handle, and the
//! handle then uses `EVALSHA` only.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::{Cmd, RedisError, RedisResult, Script, ScriptInvocation, ToRedisArgs, Value};

use super::conn::Link;

/// A function library: its name and the text `FUNCTION LOAD` takes.
#[derive(Debug)]
pub(super) struct Library {
    name: String,
    source: String,
}

impl Library {
    /// The library of `body` (Lua that defines the local function `entry`):
    /// named `{prefix}_{hash}`, registering `entry` under the same name.
    pub(super) fn new(prefix: &str, body: &str, entry: &str) -> Self {
        let hash = Script::new(body).get_hash().to_string();
        let name = format!("{prefix}_{}", &hash[..hash.len().min(16)]);
        let source =
            format!("#!lua name={name}\n{body}\nredis.register_function('{name}', {entry})\n");
        Library { name, source }
    }

    /// The name of the library and of its function.
    pub(super) fn name(&self) -> &str {
        &self.name
    }
}

/// Whether a store handle still uses functions: cleared for good once the
/// server shows it has none (or may not use them). Cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct FunctionUse(Arc<AtomicBool>);

impl Default for FunctionUse {
    fn default() -> Self {
        FunctionUse(Arc::new(AtomicBool::new(true)))
    }
}

/// Argument lists that both an `FCALL` command and a script invocation take,
/// so one function writes a call's arguments for either.
pub(super) trait Args {
    /// Appends one argument.
    fn push<T: ToRedisArgs>(&mut self, arg: T);
}

impl Args for Cmd {
    fn push<T: ToRedisArgs>(&mut self, arg: T) {
        self.arg(arg);
    }
}

impl Args for ScriptInvocation<'_> {
    fn push<T: ToRedisArgs>(&mut self, arg: T) {
        self.arg(arg);
    }
}

impl FunctionUse {
    /// Runs the `FCALL` of `library`'s function that `fcall` builds, loading
    /// the library first when the server has lost it; where functions are
    /// unavailable (then the `FCALL` is not even built), runs the script
    /// `fallback` builds instead (the same code, the same
    /// keys and arguments). Runs whole inside one
    /// [`RedisConn::call`](super::conn::RedisConn::call), under its budget.
    pub(super) async fn call<'s>(
        &self,
        mut link: Link,
        library: &Library,
        fcall: impl FnOnce() -> Cmd,
        fallback: impl FnOnce() -> ScriptInvocation<'s>,
    ) -> RedisResult<Value> {
        if self.0.load(Ordering::Relaxed) {
            let fcall = fcall();
            let answer = match fcall.query_async(&mut link).await {
                Err(e) if is_missing(&e) => match load(&mut link, library).await {
                    Ok(()) => fcall.query_async(&mut link).await,
                    Err(e) => Err(e),
                },
                answer => answer,
            };
            match answer {
                Err(e) if is_unsupported(&e) => {
                    tracing::debug!(error = %e, "no Redis functions here; using EVALSHA scripts");
                    self.0.store(false, Ordering::Relaxed);
                }
                answer => return answer,
            }
        }
        fallback().invoke_async(&mut link).await
    }
}

/// `FUNCTION LOAD REPLACE` of `library` (on every master of a cluster).
async fn load(link: &mut Link, library: &Library) -> RedisResult<()> {
    let _name: Value = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&library.source)
        .query_async(link)
        .await?;
    Ok(())
}

/// Whether `e` says the function is not loaded (restart, `FUNCTION FLUSH`).
fn is_missing(e: &RedisError) -> bool {
    e.detail()
        .is_some_and(|d| d.starts_with("Function not found"))
}

/// Whether `e` says this server has no functions or may not use them.
fn is_unsupported(e: &RedisError) -> bool {
    e.code() == Some("NOPERM")
        || e.detail()
            .is_some_and(|d| d.to_ascii_lowercase().starts_with("unknown command"))
}
