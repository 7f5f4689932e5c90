//! Rate-limit checks on Redis: tenure's limiter script against the minimal
//! script of the same algorithm (`minimal_scripts`) driven by
//! `redis-benchmark -c64 -P1`, both at 64 concurrent requests; and the
//! server's own time per call of each (tenure's `FCALL`, the minimal
//! script's `EVALSHA`).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tenure::limit::{Algorithm, Quota};

use crate::minimal_scripts;
use crate::peers::Peers;
use crate::redis_benchmark;
use crate::samples::Samples;
use crate::server_stats::ServerStats;
use crate::tasks::rate;

pub const TASKS: usize = 64;
/// Keys checked at random: a rate well under the limit on each.
const KEYS: usize = 10_000;
/// 100 per second; in µs the period and the interval between units.
const LIMIT: u32 = 100;
const PERIOD_US: u64 = 1_000_000;

/// Every algorithm, tenure then the minimal script, recorded as
/// `limit.<algorithm>.{tenure,minimal,tenure_us,minimal_us}`.
pub async fn run(p: &Peers, stats: &ServerStats, run_for: Duration, out: &mut Samples) {
    let quota = Quota::per_second(NonZeroU32::new(LIMIT).unwrap());
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|k| format!("lim:{k}")).collect());
    let port = url_port(&p.url);
    for alg in Algorithm::ALL {
        let limiter = p.tenure.limiter(quota, alg);
        // One warm-up check loads the script.
        let _ = limiter.check("lim:warm").await.unwrap();
        stats.reset().await;
        let keys = Arc::clone(&keys);
        let tenure = rate(TASKS, run_for, move |_| {
            let (limiter, keys) = (limiter.clone(), Arc::clone(&keys));
            async move {
                let k = rand::rng().random_range(0..keys.len());
                let _ = limiter.check(&keys[k]).await.unwrap();
            }
        })
        .await;
        out.add(format!("limit.{alg}.tenure"), tenure);
        out.add(
            format!("limit.{alg}.tenure_us"),
            stats.usec_per_script_call().await,
        );

        let sha = stats.load_script(&minimal_scripts::script(alg)).await;
        let (cap, period) = (LIMIT.to_string(), PERIOD_US.to_string());
        let key = format!("min:{alg}:__rand_int__");
        let interval = (PERIOD_US / u64::from(LIMIT)).to_string();
        let requests = (tenure * run_for.as_secs_f64()) as usize;
        stats.reset().await;
        let minimal = redis_benchmark::requests_per_sec(
            port,
            TASKS,
            1,
            requests.max(10_000),
            KEYS,
            &[
                "EVALSHA",
                &sha,
                "1",
                &key,
                &cap,
                &period,
                &interval,
                "__rand_int__",
            ],
        );
        out.add(format!("limit.{alg}.minimal"), minimal);
        out.add(
            format!("limit.{alg}.minimal_us"),
            stats.usec_per_script_call().await,
        );
    }
}

/// The port of a `redis://127.0.0.1:PORT` URL.
pub fn url_port(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap()
}
