//! `tenure release KEY --force`: the operator's break-glass for a lease whose
//! holder hangs while it keeps renewing.
//!
//! A `tenure` invocation never holds a lease of an earlier one (`run`, `elect`
//! and `once` release theirs when their command ends), so every release from
//! here takes the lease from someone else, and `--force` says that is meant.
//! The store's next fence is greater than the old holder's, so a fenced
//! resource refuses its writes; the old holder learns of the loss at its next
//! renewal (its `tenure run` stops the command and exits 76) — until then its
//! command goes on.

use clap::Args;
use tenure::ReleaseOutcome;

use crate::cli::{Global, KeyArg};
use crate::exit::{self, Failure};
use crate::{output, status, store};

// `tenure release` options.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lease key.
    #[command(flatten)]
    pub key: KeyArg,

    /// Release the lease whoever holds it (required: the holder is another
    /// process, which learns of the loss only at its next renewal).
    #[arg(long)]
    pub force: bool,
}

/// Exit 0 when released (or already free), 64 without --force, 75 when the
/// lease changed hands meanwhile (nothing released).
pub async fn release(global: &Global, args: &ReleaseArgs) -> Result<u8, Failure> {
    let key = args.key.get();
    tenure::validate_key(key)?;
    if !args.force {
        return Err(Failure::usage(format!(
            "lease {key:?} belongs to the process that took it, which releases it when its \
             command ends; to take it from that holder, add --force (its fence stops counting, \
             but its command runs on until its next renewal fails)"
        )));
    }
    let tenure = store::connect(global).await?;
    let before = tenure.status(key).await?;
    match tenure.force_release(key).await? {
        ReleaseOutcome::Released => {
            if !global.quiet {
                let holder = before
                    .holder
                    .as_ref()
                    .map_or_else(|| "a holder that recorded nothing".into(), status::describe);
                let fence = before
                    .fence
                    .map_or_else(String::new, |f| format!(", fence {f}"));
                output::note(&format!(
                    "released lease {key:?} held by {holder}{fence}; the next holder's fence \
                     is greater, and the old holder learns of the loss at its next renewal"
                ));
            }
            Ok(0)
        }
        _ if tenure.status(key).await?.held => Err(Failure::new(
            exit::NOT_ACQUIRED,
            format!(
                "lease {key:?} changed hands meanwhile; nothing released (run again to release the new holder)"
            ),
        )),
        _ => {
            if !global.quiet {
                output::note(&format!("lease {key:?} is not held; nothing to release"));
            }
            Ok(0)
        }
    }
}
