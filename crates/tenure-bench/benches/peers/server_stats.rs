//! What the server itself counted: `INFO commandstats` after `CONFIG RESETSTAT`.

use redis::aio::MultiplexedConnection;

/// A connection used only to read and reset the server's statistics.
#[derive(Clone)]
pub struct ServerStats(MultiplexedConnection);

impl ServerStats {
    pub async fn connect(url: &str) -> Self {
        let client = redis::Client::open(url).unwrap();
        ServerStats(client.get_multiplexed_async_connection().await.unwrap())
    }

    /// Zeroes the counters (`CONFIG RESETSTAT`).
    pub async fn reset(&self) {
        let mut c = self.0.clone();
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .unwrap();
    }

    /// `(command, calls, usec_per_call)` of every command counted.
    async fn commands(&self) -> Vec<(String, u64, f64)> {
        let info = self.info("commandstats").await;
        info.lines()
            .filter_map(|l| {
                let (name, fields) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |f: &str| {
                    fields
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
                };
                Some((
                    name.to_string(),
                    field("calls")?.parse().ok()?,
                    field("usec_per_call")?.parse().ok()?,
                ))
            })
            .collect()
    }

    /// Calls of every command since the last reset, but this reader's own
    /// (`INFO`, `CONFIG`).
    pub async fn calls(&self) -> u64 {
        self.commands()
            .await
            .iter()
            .filter(|(name, _, _)| name != "info" && name != "config")
            .map(|(_, calls, _)| calls)
            .sum()
    }

    /// Calls of each command since the last reset, but this reader's own
    /// (`INFO`, `CONFIG RESETSTAT`).
    pub async fn calls_by_command(&self) -> Vec<(String, u64)> {
        self.commands()
            .await
            .into_iter()
            .filter(|(name, _, _)| name != "info" && name != "config|resetstat")
            .map(|(name, calls, _)| (name, calls))
            .collect()
    }

    /// Script and function calls (`EVALSHA`, `EVAL`, `FCALL`) since the last
    /// reset: one per store call, whatever runs inside.
    pub async fn script_calls(&self) -> u64 {
        self.commands()
            .await
            .iter()
            .filter(|(name, _, _)| is_script(name))
            .map(|(_, calls, _)| calls)
            .sum()
    }

    /// Server time per script or function call (`EVALSHA`, `FCALL`, the
    /// one that ran most) since the last reset, in µs.
    pub async fn usec_per_script_call(&self) -> f64 {
        self.commands()
            .await
            .iter()
            .filter(|(name, _, _)| name == "evalsha" || name == "fcall")
            .max_by_key(|(_, calls, _)| *calls)
            .map_or(f64::NAN, |(_, _, usec)| *usec)
    }

    /// Server time in scripts and functions (`EVALSHA`, `EVAL`, `FCALL`,
    /// the commands inside them included) since the last reset, in µs.
    pub async fn script_usec(&self) -> f64 {
        self.commands()
            .await
            .iter()
            .filter(|(name, _, _)| is_script(name))
            .map(|(_, calls, usec)| *calls as f64 * usec)
            .sum()
    }

    /// The server's version (`INFO server`).
    pub async fn version(&self) -> String {
        let info = self.info("server").await;
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_string()
    }

    /// Keys matching `pattern` (`SCAN`), for what a run left behind.
    pub async fn keys(&self, pattern: &str) -> Vec<String> {
        let mut c = self.0.clone();
        let mut cursor = 0u64;
        let mut out = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut c)
                .await
                .unwrap();
            out.extend(batch);
            if next == 0 {
                return out;
            }
            cursor = next;
        }
    }

    /// `used_memory` of `INFO memory`, in bytes.
    pub async fn used_memory(&self) -> f64 {
        number(&self.info("memory").await, "used_memory")
    }

    /// CPU time the server spent, user and system (`INFO cpu`), in seconds.
    pub async fn cpu_secs(&self) -> f64 {
        let info = self.info("cpu").await;
        number(&info, "used_cpu_sys") + number(&info, "used_cpu_user")
    }

    /// One section of `INFO`.
    async fn info(&self, section: &str) -> String {
        let mut c = self.0.clone();
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut c)
            .await
            .unwrap()
    }

    /// Keys in the database (`DBSIZE`).
    pub async fn dbsize(&self) -> u64 {
        let mut c = self.0.clone();
        redis::cmd("DBSIZE").query_async(&mut c).await.unwrap()
    }

    /// `PTTL` of `key` in ms (-1: none, -2: no key).
    pub async fn pttl(&self, key: &str) -> i64 {
        let mut c = self.0.clone();
        redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut c)
            .await
            .unwrap()
    }

    /// `FLUSHALL`, between workloads.
    pub async fn flush(&self) {
        let mut c = self.0.clone();
        let () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    }

    /// Loads `source` (`SCRIPT LOAD`) and returns its SHA1.
    pub async fn load_script(&self, source: &str) -> String {
        let mut c = self.0.clone();
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query_async(&mut c)
            .await
            .unwrap()
    }
}

/// The number in the `name:value` line of an `INFO` reply, NaN without one.
fn number(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// Whether `command` runs a script or function (`EVAL`, `EVALSHA`, `FCALL`
/// and their read-only forms).
fn is_script(command: &str) -> bool {
    command.starts_with("eval") || command.starts_with("fcall")
}
