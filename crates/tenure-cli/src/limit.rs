//! `tenure limit`: take units from a rate limit, decide, exit 0 or 75.

use std::time::Duration;

use tenure::limit::Quota;

use crate::cli::{Global, LimitArgs};
use crate::exit::{self, Failure};
use crate::{duration, output, store};

pub async fn limit(global: &Global, args: &LimitArgs) -> Result<u8, Failure> {
    tenure::validate_key(args.key.get())?;
    let mut quota = Quota::new(args.rate.limit.get(), args.rate.period)?;
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
    let limiter = tenure.limiter(quota, args.algorithm);
    let d = limiter.check_n(args.key.get(), args.cost.get()).await?;
    let ms = |t: Duration| u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
    if args.json {
        let value = serde_json::json!({
            "allowed": d.allowed,
            "limit": d.limit,
            "remaining": d.remaining,
            "retry_after_ms": d.retry_after.map(ms),
            "reset_after_ms": ms(d.reset_after),
        });
        output::json(&value);
    } else if !global.quiet {
        let left = format!("{} of {} left", d.remaining, d.limit);
        let reset = duration::show(d.reset_after);
        output::line(&match d.retry_after {
            Some(retry) if !d.allowed => format!(
                "limited: {left}; retry after {}, full again after {reset}",
                duration::show(retry)
            ),
            _ if d.allowed => format!("allowed: {left}; full again after {reset}"),
            _ => format!("limited: {left}; full again after {reset}"),
        });
    }
    Ok(if d.allowed { 0 } else { exit::NOT_ACQUIRED })
}
