#!/usr/bin/env bash
# Checks the declared `rust-version` without a second toolchain: every package
# that a build on this host would compile (dependencies included) must declare
# a rust-version no newer than the workspace's. This is the check cargo makes
# before building, done against the declared version instead of the installed
# compiler. clippy's `incompatible_msrv` lint (on in `cargo clippy`) covers the
# other half: std APIs stabilised after the declared version. Not covered:
# language features newer than it — only a build with that toolchain shows those.
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(cargo metadata --no-deps --format-version 1 |
  jq -r '[.packages[].rust_version | select(. != null)] | unique | .[]')
if [ "$(printf '%s\n' "$msrv" | wc -l)" -ne 1 ] || [ -z "$msrv" ]; then
  echo "workspace members should share one rust-version, found: ${msrv:-none}" >&2
  exit 1
fi
host=$(rustc -vV | sed -n 's/^host: //p')
newer=$(cargo metadata --format-version 1 --filter-platform "$host" |
  jq -r --arg msrv "$msrv" '
    def v: split(".") | map(tonumber);
    .packages[] | select(.rust_version != null)
    | select((.rust_version | v) > ($msrv | v))
    | "  \(.name) \(.version) needs Rust \(.rust_version)"')
if [ -n "$newer" ]; then
  echo "the workspace declares rust-version $msrv, but these packages need a newer Rust:" >&2
  echo "$newer" >&2
  exit 1
fi
echo "rust-version $msrv: every dependency built for $host declares $msrv or older"
