//! The reference parts of docs/cli.md, rendered from the clap grammar and the
//! exit-status table, so that the page cannot drift from what `tenure` accepts.
//!
//! Each generated part lies between `<!-- BEGIN GENERATED name -->` and
//! `<!-- END GENERATED name -->`, where `name` is a subcommand (its usage and
//! options), `global-options`, `environment` or `exit-statuses`. The test
//! below fails when a part differs from what the grammar renders; run it with
//! `TENURE_WRITE_DOCS=1` to rewrite the parts in place:
//!
//! ```sh
//! TENURE_WRITE_DOCS=1 cargo test -p tenure-cli --bin tenure reference
//! ```

use clap::{Arg, ArgAction, Command};

use crate::exit;
use crate::generate::ENVIRONMENT;

const BEGIN: &str = "<!-- BEGIN GENERATED ";
const END: &str = "<!-- END GENERATED ";
const CLOSE: &str = " -->";

/// The Markdown of the part `name`, or `None` for an unknown name.
pub fn render(name: &str) -> Option<String> {
    match name {
        "exit-statuses" => Some(exit_statuses()),
        "environment" => Some(environment()),
        "global-options" => {
            let root = built();
            let globals: Vec<&Arg> = root.get_arguments().filter(|a| documented(a)).collect();
            Some(options(&globals))
        }
        sub => {
            let root = built();
            let cmd = root.find_subcommand(sub)?;
            Some(subcommand(cmd))
        }
    }
}

/// `doc` with every generated part rendered afresh; an unknown part or a
/// part without its end marker is an error naming it.
pub fn regenerate(doc: &str) -> Result<String, String> {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(at) = rest.find(BEGIN) {
        let after = &rest[at + BEGIN.len()..];
        let name_len = after
            .find(CLOSE)
            .ok_or_else(|| format!("unclosed marker at {:?}", &after[..after.len().min(40)]))?;
        let name = &after[..name_len];
        let end_marker = format!("{END}{name}{CLOSE}");
        let body_start = at + BEGIN.len() + name_len + CLOSE.len();
        let body_len = rest[body_start..]
            .find(&end_marker)
            .ok_or_else(|| format!("no {end_marker}"))?;
        let body = render(name).ok_or_else(|| format!("unknown generated part {name:?}"))?;
        out.push_str(&rest[..body_start]);
        out.push_str("\n\n");
        out.push_str(&body);
        out.push_str("\n\n");
        out.push_str(&end_marker);
        rest = &rest[body_start + body_len + end_marker.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The whole grammar, built: every subcommand's options and display names.
fn built() -> Command {
    let mut root = crate::cli::command().disable_help_subcommand(true);
    root.build();
    root
}

/// A subcommand's usage line and its own options (the global ones have a
/// table of their own).
fn subcommand(cmd: &Command) -> String {
    let usage = cmd.clone().render_usage().to_string();
    // Continuation lines are indented under clap's "Usage: ", dropped here.
    let usage: Vec<&str> = usage
        .trim_start_matches("Usage: ")
        .trim()
        .lines()
        .map(|l| l.strip_prefix("       ").unwrap_or(l))
        .collect();
    let usage = usage.join("\n");
    let own: Vec<&Arg> = cmd
        .get_arguments()
        .chain(cmd.get_positionals())
        .filter(|a| documented(a) && !crate::global::is_global(a.get_id().as_str()))
        .fold(Vec::new(), |mut seen, a| {
            if !seen.iter().any(|s: &&Arg| s.get_id() == a.get_id()) {
                seen.push(a);
            }
            seen
        });
    format!("```text\n{usage}\n```\n\n{}", options(&own))
}

/// Whether an argument belongs in the reference (not clap's own help and
/// version flags, nor hidden ones).
fn documented(arg: &Arg) -> bool {
    !arg.is_hide_set()
        && !matches!(
            arg.get_action(),
            ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
        )
}

/// A table of options: how to write it, its default, what it does.
fn options(args: &[&Arg]) -> String {
    let mut out = String::from("| option | default | meaning |\n|---|---|---|\n");
    for arg in args {
        // A flag's `false` and an empty default say nothing.
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .filter(|v| arg.get_action().takes_values() && !v.is_empty())
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            cell(&spelling(arg)),
            cell(&defaults.join(", ")),
            cell(&meaning(arg)),
        ));
    }
    out.trim_end().to_string()
}

/// `-k`, `--key KEY`, or `KEY` / `CMD…` for a positional.
fn spelling(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    if arg.is_positional() {
        let dots = if many { "…" } else { "" };
        let dash = if arg.is_last_set() { "-- " } else { "" };
        return format!("`{dash}{value}{dots}`");
    }
    let takes = arg.get_action().takes_values();
    let mut forms = Vec::new();
    if let Some(short) = arg.get_short() {
        forms.push(format!("`-{short}`"));
    }
    if let Some(long) = arg.get_long() {
        if takes {
            forms.push(format!("`--{long} {value}`"));
        } else {
            forms.push(format!("`--{long}`"));
        }
    }
    forms.join(", ")
}

/// The help text, with the possible values and environment variable clap
/// would show.
fn meaning(arg: &Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && !matches!(arg.get_action(), ArgAction::SetTrue) {
        text.push_str(&format!(" One of {}.", values.join(", ")));
    }
    if let Some(env) = arg.get_env() {
        text.push_str(&format!(" Env: `{}`.", env.to_string_lossy()));
    }
    text.trim().to_string()
}

fn exit_statuses() -> String {
    let mut out = String::from("| status | meaning |\n|---|---|\n");
    for row in &exit::TABLE {
        out.push_str(&format!(
            "| {} | {} |\n",
            cell(&row.status.label()),
            cell(row.meaning)
        ));
    }
    out.trim_end().to_string()
}

fn environment() -> String {
    let mut out = String::from("| variable | meaning |\n|---|---|\n");
    for (name, meaning) in ENVIRONMENT {
        out.push_str(&format!("| `{name}` | {} |\n", cell(meaning)));
    }
    out.trim_end().to_string()
}

/// Text fit for one table cell: no newline, no bare `|`.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md")
    }

    /// docs/cli.md's generated parts are what the grammar renders now
    /// (`TENURE_WRITE_DOCS=1` rewrites them).
    #[test]
    fn docs_cli_md_matches_the_grammar() {
        let path = doc_path();
        let doc = std::fs::read_to_string(&path).expect("docs/cli.md");
        let fresh = regenerate(&doc).expect("markers");
        if std::env::var_os("TENURE_WRITE_DOCS").is_some() {
            std::fs::write(&path, &fresh).expect("write docs/cli.md");
            return;
        }
        assert!(
            doc == fresh,
            "docs/cli.md differs from the grammar; rewrite its generated parts with \
             TENURE_WRITE_DOCS=1 cargo test -p tenure-cli --bin tenure reference"
        );
    }

    /// Every subcommand and every table has a generated part on the page.
    #[test]
    fn every_part_is_on_the_page() {
        let doc = std::fs::read_to_string(doc_path()).expect("docs/cli.md");
        let root = built();
        let names = root
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .chain(["global-options", "environment", "exit-statuses"].map(String::from));
        for name in names {
            assert!(
                doc.contains(&format!("{BEGIN}{name}{CLOSE}")),
                "docs/cli.md has no generated part {name:?}"
            );
        }
    }

    #[test]
    fn every_status_constant_is_in_the_table() {
        let listed: Vec<u8> = exit::TABLE
            .iter()
            .filter_map(|r| match r.status {
                exit::Status::Codes(c) => Some(c),
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        for code in [
            exit::USAGE,
            exit::DATA,
            exit::UNAVAILABLE,
            exit::SOFTWARE,
            exit::CANT_CREATE,
            exit::NOT_ACQUIRED,
            exit::LEASE_LOST,
            exit::CANNOT_EXECUTE,
            exit::NOT_FOUND,
        ] {
            assert!(listed.contains(&code), "{code} is not in exit::TABLE");
        }
    }

    #[test]
    fn regenerating_refuses_unknown_or_unclosed_parts() {
        assert!(regenerate("<!-- BEGIN GENERATED nope -->\n<!-- END GENERATED nope -->").is_err());
        assert!(regenerate("<!-- BEGIN GENERATED run -->\n").is_err());
        let once = regenerate("a <!-- BEGIN GENERATED man -->x<!-- END GENERATED man --> b")
            .expect("renders");
        assert_eq!(regenerate(&once).expect("renders"), once);
        assert!(once.contains("--dir"), "{once}");
    }
}
