//! The `warden` command line (a thin layer over the library).

use clap::Parser;

/// Distributed coordination from the shell: leases with fencing tokens, rate limits.
#[derive(Debug, Parser)]
#[command(name = "warden", version, about)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
