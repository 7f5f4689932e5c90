//! `tenure completions SHELL` and `tenure man`: generated from the clap
//! grammar, so they cannot drift from what `tenure` accepts.

use std::io::Write;

use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

use crate::cli::{self, CompletionsArgs, ManArgs};
use crate::exit;

pub const ENVIRONMENT: [(&str, &str); 12] = [
    (
        "TENURE_BACKEND",
        "store URL(s), comma-separated; --backend wins over it",
    ),
    (
        "TENURE_DB",
        "the default SQLite file (else $XDG_STATE_HOME/tenure/tenure.db, else \
         ~/.local/state/tenure/tenure.db)",
    ),
    (
        "TENURE_CACERT",
        "the CA file of a TLS store (rediss://, rediss+cluster://, rediss+sentinel://, \
         etcds://), as --cacert (which wins over it)",
    ),
    (
        "TENURE_TLS_CERT",
        "the client certificate for a TLS store, as --tls-cert (which wins over it)",
    ),
    (
        "TENURE_TLS_KEY",
        "the client certificate's private key, as --tls-key (which wins over it)",
    ),
    (
        "RUST_LOG",
        "log directives (tenure=debug, info, off); what it names wins over -v",
    ),
    (
        "TENURE_FENCE",
        "set for the command of run (one key), elect and once: the fencing token (elect: \
         the term), decimal",
    ),
    (
        "TENURE_ACQUISITION",
        "set for the command of run (one key) and elect: the acquisition's id (32 hex \
         digits), which a fenced resource stores with the fence to tell a retry from another \
         holder",
    ),
    (
        "TENURE_KEY",
        "set for the command of run (one key), elect and once: the key",
    ),
    (
        "TENURE_KEYS",
        "set instead of the three above for the command of run with several keys (-k A -k B): \
         the keys, one per line",
    ),
    (
        "TENURE_FENCES",
        "set with TENURE_KEYS: each key's fencing token, one per line in the same order",
    ),
    (
        "SHELL",
        "not used: -c runs /bin/sh, whatever the user's shell, so scripts behave alike",
    ),
];

/// Prints the completion script for `args.shell` on stdout.
pub fn completions(args: &CompletionsArgs) -> u8 {
    let mut script = Vec::new();
    // Into memory first: clap_complete panics when its writer fails (a closed
    // pipe), and a panic is not an answer.
    clap_complete::generate(args.shell, &mut cli::command(), "tenure", &mut script);
    emit(&script)
}

/// Prints tenure(1) on stdout, or writes a page per command into `--dir`.
pub fn man(args: &ManArgs) -> u8 {
    let mut root = cli::command().disable_help_subcommand(true);
    // Gives subcommands their display names (tenure-run) for titles and files.
    root.build();
    let Some(dir) = &args.dir else {
        return match page(&root) {
            Ok(text) => emit(&text),
            Err(e) => software(&format!("cannot render the man page: {e}")),
        };
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        return cant_create(&format!("cannot create {}: {e}", dir.display()));
    }
    let mut commands = vec![root.clone()];
    commands.extend(root.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    for cmd in commands {
        let name = Man::new(cmd.clone()).get_filename();
        let path = dir.join(&name);
        let written = page(&cmd).and_then(|text| std::fs::write(&path, text));
        if let Err(e) = written {
            return cant_create(&format!("cannot write {}: {e}", path.display()));
        }
    }
    0
}

/// One man page: clap_mangen's sections, then the exit statuses and the
/// environment, which clap does not know about.
fn page(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    // The examples get a section of their own, set line by line: clap_mangen
    // would fill them into a paragraph under "EXTRA".
    let examples = cmd.get_after_help().map(|text| text.to_string());
    Man::new(cmd.clone().after_help(None::<&str>)).render(&mut out)?;
    let mut roff = Roff::new();
    if let Some(text) = examples {
        roff.control("SH", ["EXAMPLES"]).control("nf", []);
        // The examples end at the first blank line (the top-level help goes
        // on with the exit statuses, which get their own section below).
        let lines = text.lines().skip_while(|l| l.trim() == "Examples:");
        for line in lines.take_while(|l| !l.trim().is_empty()) {
            roff.text([roman(line.trim_start())]);
        }
        roff.control("fi", []);
    }
    roff.control("SH", ["EXIT STATUS"]);
    for row in &exit::TABLE {
        roff.control("TP", [])
            .text([bold(row.status.label())])
            .text([roman(row.plain())]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, meaning) in ENVIRONMENT {
        roff.control("TP", [])
            .text([bold(name)])
            .text([roman(meaning)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(
        "flock(1); https://crates.io/crates/tenure-cli, the contract scripts rely on.",
    )]);
    roff.to_writer(&mut out)?;
    Ok(out)
}

/// Writes `bytes` to stdout; a closed pipe is not worth a panic, but it is a
/// failure (the script or page did not arrive).
fn emit(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::SOFTWARE,
        Err(e) => software(&format!("cannot write to stdout: {e}")),
    }
}

fn cant_create(message: &str) -> u8 {
    crate::output::note(message);
    exit::CANT_CREATE
}

fn software(message: &str) -> u8 {
    crate::output::note(message);
    exit::SOFTWARE
}
