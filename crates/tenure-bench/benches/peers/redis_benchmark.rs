//! `redis-benchmark`, the server's own load generator: what one redis-server
//! on this machine does at most.

use std::process::Command;

/// Requests per second of `redis-benchmark` with `clients` connections and
/// `pipeline` requests in flight on each, `requests` in all, sending `args`
/// (`__rand_int__` is replaced by a random number below `keyspace`).
pub fn requests_per_sec(
    port: u16,
    clients: usize,
    pipeline: usize,
    requests: usize,
    keyspace: usize,
    args: &[&str],
) -> f64 {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-P", &pipeline.to_string()])
        .args(["-n", &requests.to_string(), "-r", &keyspace.to_string()])
        .arg("--csv")
        .args(args)
        .output()
        .expect("redis-benchmark (Debian's redis-tools) is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    // `"test","rps",...` then one row: `"EVALSHA ...","123456.78",...`.
    text.lines()
        .last()
        .and_then(|row| row.split("\",\"").nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())
        .unwrap_or_else(|| {
            let err = String::from_utf8_lossy(&out.stderr);
            panic!("no rate in redis-benchmark's output: {text} {err}")
        })
}
