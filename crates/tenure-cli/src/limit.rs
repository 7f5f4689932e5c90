//! `tenure limit`: take units from a rate limit, decide, exit 0 or 75; or look
//! (`--shadow`), book ahead (`--reserve`), give back (`--refund`), forget
//! (`--reset`).

use std::num::NonZeroU32;
use std::time::Duration;

use serde_json::{Value, json};
use tenure::limit::{Decision, Limiter, Quota};

use crate::cli::{Global, LimitArgs};
use crate::exit::{self, Failure};
use crate::{duration, output, store};

pub async fn limit(global: &Global, args: &LimitArgs) -> Result<u8, Failure> {
    let key = args.key.get();
    tenure::validate_key(key)?;
    let limiter = limiter(global, args).await?;
    if args.reset {
        limiter.reset(key).await?;
        report(
            global,
            args,
            json!({ "reset": true }),
            "reset: full budget again",
        );
        return Ok(0);
    }
    if let Some(n) = args.refund {
        let d = limiter.refund(key, n.get()).await?;
        let mut value = decision_json(&d);
        value["refunded"] = json!(n.get());
        report(
            global,
            args,
            value,
            &format!("refunded {n}: {}", summary(&d)),
        );
        return Ok(0);
    }
    if args.shadow {
        // A peek: nothing is consumed, whatever it says.
        let d = limiter.peek_n(key, args.cost.get()).await?;
        let mut value = decision_json(&d);
        value["shadow"] = json!(true);
        value["would_allow"] = json!(d.allowed);
        let verdict = if d.allowed {
            "would allow"
        } else {
            "would limit"
        };
        report(
            global,
            args,
            value,
            &format!("shadow: {verdict}; {}", summary(&d)),
        );
        return Ok(0);
    }
    if let Some(max_delay) = args.max_delay.filter(|_| args.reserve) {
        return reserve(global, args, &limiter, max_delay).await;
    }
    let d = limiter.check_n(key, args.cost.get()).await?;
    report(global, args, decision_json(&d), &verdict(&d));
    Ok(if d.allowed { 0 } else { exit::NOT_ACQUIRED })
}

/// The limiter of `args` on the configured store; refuses a store that would
/// count in this process only.
async fn limiter(global: &Global, args: &LimitArgs) -> Result<Limiter, Failure> {
    // The state is per key and algorithm, not per rate: `--reset` needs none.
    let one = NonZeroU32::MIN;
    let (limit, period) = args
        .rate
        .map_or((one, Duration::from_secs(1)), |r| (r.limit, r.period));
    let mut quota = Quota::new(limit.get(), period)?;
    if let Some(burst) = args.burst {
        quota = quota.burst(burst);
    }
    let tenure = store::connect(global).await?;
    // A lease store without a shared limit store would count in this process
    // only: every invocation would start from a full budget.
    if !tenure.limits().is_shared() && tenure.backend().is_shared() {
        let leases = tenure.backend().describe();
        return Err(Failure::usage(format!(
            "rate limits on {leases} are not supported (no shared limit store); use \
             one redis:// backend or the embedded SQLite store"
        )));
    }
    Ok(tenure.limiter(quota, args.algorithm))
}

/// `--reserve`: book, print the wait, sleep until the booked instant.
async fn reserve(
    global: &Global,
    args: &LimitArgs,
    limiter: &Limiter,
    max_delay: Duration,
) -> Result<u8, Failure> {
    let r = limiter
        .reserve(args.key.get(), args.cost.get(), max_delay)
        .await?;
    let d = r.decision();
    if !r.is_granted() {
        report(global, args, decision_json(&d), &verdict(&d));
        return Ok(exit::NOT_ACQUIRED);
    }
    let wait = r.delay();
    let mut value = decision_json(&d);
    value["retry_after_ms"] = Value::Null;
    value["wait_ms"] = json!(duration::millis(wait));
    let line = format!(
        "reserved: proceeding after {}; {} of {} left",
        duration::show(wait),
        d.remaining,
        d.limit
    );
    report(global, args, value, &line);
    let _ = r.ready().await;
    Ok(0)
}

fn decision_json(d: &Decision) -> Value {
    json!({
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ms": d.retry_after.map(duration::millis),
        "reset_after_ms": duration::millis(d.reset_after),
    })
}

/// "N of M left; full again after …", with the retry of a refusal.
fn summary(d: &Decision) -> String {
    let left = format!("{} of {} left", d.remaining, d.limit);
    let reset = duration::show(d.reset_after);
    match d.retry_after {
        Some(retry) if !d.allowed => format!(
            "{left}; retry after {}, full again after {reset}",
            duration::show(retry)
        ),
        _ => format!("{left}; full again after {reset}"),
    }
}

fn verdict(d: &Decision) -> String {
    let word = if d.allowed { "allowed" } else { "limited" };
    format!("{word}: {}", summary(d))
}

/// The JSON (with `--json`) or the line (unless `--quiet`), on stdout.
fn report(global: &Global, args: &LimitArgs, value: Value, line: &str) {
    if args.json {
        output::json(&value);
    } else if !global.quiet {
        output::line(line);
    }
}
