//! `warden status`: a read-only look at a lease.

use crate::cli::{Global, StatusArgs};
use crate::exit::Failure;
use crate::{duration, output, store};

pub async fn status(global: &Global, args: &StatusArgs) -> Result<u8, Failure> {
    warden::validate_key(&args.key)?;
    let warden = store::connect(global).await?;
    let s = warden.status(&args.key).await?;
    if args.json {
        let ttl_ms = s
            .ttl_left
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        let value = serde_json::json!({
            "key": args.key,
            "held": s.held,
            "ttl_ms": ttl_ms,
            "fence": s.fence.map(|f| f.get()),
            "storage_key": s.storage_key,
        });
        output::line(&value.to_string());
    } else if !global.quiet {
        let state = match (s.held, s.ttl_left) {
            (true, Some(ttl)) => format!("held, {} left", duration::show(ttl)),
            (true, None) => "held, no expiry".to_string(),
            (false, _) => "free".to_string(),
        };
        let fence = s
            .fence
            .map_or_else(|| "none (never acquired)".to_string(), |f| f.to_string());
        output::line(&format!("key      {}", args.key));
        output::line(&format!("state    {state}"));
        output::line(&format!("fence    {fence}"));
        output::line(&format!("storage  {}", s.storage_key));
        output::line(&format!("backend  {}", warden.backend().describe()));
    }
    Ok(0)
}
