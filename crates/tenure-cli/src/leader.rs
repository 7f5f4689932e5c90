//! `tenure leader`: who leads an election now.

use clap::Args;

use crate::cli::{Global, KeyArg};
use crate::exit::{self, Failure};
use crate::{duration, output, store};

// `tenure leader` options.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election's key.
    #[command(flatten)]
    pub key: KeyArg,

    /// Print {"key","id","term","ttl_ms"} as JSON ("id": null when nobody
    /// leads).
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 with the leader, 75 when nobody leads.
pub async fn leader(global: &Global, args: &LeaderArgs) -> Result<u8, Failure> {
    tenure::validate_key(args.key.get())?;
    let tenure = store::connect(global).await?;
    let now = tenure.election(args.key.get()).leader().await?;
    if args.json {
        let value = match &now {
            Some(l) => serde_json::json!({
                "key": args.key.get(),
                "id": l.id,
                "term": l.term.get(),
                "ttl_ms": l.ttl_left.map(duration::millis),
            }),
            None => serde_json::json!({
                "key": args.key.get(),
                "id": null,
                "term": null,
                "ttl_ms": null,
            }),
        };
        output::json(&value);
    } else if !global.quiet {
        match &now {
            Some(l) => {
                let missing = if tenure.records().is_some() {
                    "(elected, id not written yet)"
                } else {
                    "(this store keeps no leader ids)"
                };
                let id = l.id.as_deref().unwrap_or(missing);
                output::line(&format!("key     {}", args.key.get()));
                output::line(&format!("leader  {id}"));
                output::line(&format!("term    {}", l.term));
                if let Some(ttl) = l.ttl_left {
                    output::line(&format!("ttl     {}", duration::show(ttl)));
                }
            }
            None => output::note(&format!("nobody leads {:?}", args.key.get())),
        }
    }
    Ok(if now.is_some() { 0 } else { exit::NOT_ACQUIRED })
}
