#!/usr/bin/env bash
# The test command of the README: installs what the tests need on a fresh Debian
# machine, then runs formatting, lints, every test (unit, integration, doc) and
# the examples. Tests start their own redis-server (and etcd) processes on free ports.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# redis-cli, which a CLI test's commands use to write a fenced resource and the
# Redis Cluster harness uses to create its cluster (`redis-cli --cluster create`).
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v jq >/dev/null 2>&1 || missing+=(jq)   # scripts/check-rust-version.sh
# PostgreSQL for the SQL-fencing tests (the harness finds Debian's versioned bin dir).
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
# etcd for the etcd-store tests (Debian's etcd-server ships the `etcd` binary), and
# protoc plus the well-known .proto files (libprotobuf-dev) for the drift check of
# the generated etcd client code (scripts/etcd-proto --check) only: building
# tenure and the CLI never needs them, as the no-protoc build below proves.
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
test -f /usr/include/google/protobuf/descriptor.proto || missing+=(libprotobuf-dev)
# libfaketime, for the fault suite's client processes whose wall clock jumps (and
# to sign the TLS tests' expired certificate in the past).
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
# openssl, which the TLS tests run to make their CA and certificates.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  # As root (CI containers) directly, otherwise through sudo.
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo features (tenure with no store, and with each feature alone; warnings refused)"
# Runs a quiet cargo command and fails on any output: warnings are refused.
silent() {
  local out
  out=$("$@" 2>&1) || { echo "$out"; return 1; }
  if [ -n "$out" ]; then echo "$out"; return 1; fi
}
check_features() { silent cargo check -q -p tenure --no-default-features "$@"; }
check_features
for feature in redis sqlite quorum tls etcd metrics; do
  check_features --features "$feature"
done
# The libraries take only the tokio features they use, not the command line's.
echo "== tokio features of the libraries and the command line"
# Fails if package $1 pulls in a tokio feature matching the pattern $2.
no_tokio_features() {
  local extra
  extra=$(cargo tree -q -p "$1" -e normal,features -i tokio --prefix none \
    | grep -oE "^tokio feature \"($2)\"" | sort -u || true)
  if [ -n "$extra" ]; then echo "$1 pulls in: $extra"; exit 1; fi
}
for lib in tenure tenure-http; do
  no_tokio_features "$lib" 'process|signal|rt-multi-thread|io-std|fs|full'
done
# The command line runs on a current-thread runtime: the multi-threaded
# scheduler would only make its binary, and every start, larger.
no_tokio_features tenure-cli rt-multi-thread
# A URL whose store is compiled out is refused naming the feature.
cargo test -q -p tenure --no-default-features --lib features:: >/dev/null
echo "== the CLI builds without protoc (etcd's client code is generated ahead of time)"
# No build script in the CLI's tree compiles .proto files: no code generator
# among its build dependencies, transitive ones included.
generators=$(cargo tree -q -p tenure-cli -e normal,build --prefix none |
  grep -E '^(prost-build|tonic-build|tonic-prost-build) ' || true)
if [ -n "$generators" ]; then
  echo "protobuf code generators in the CLI's build: $generators" >&2
  exit 1
fi
# And it builds with no protoc reachable, in a target directory of its own (no
# artefact of a build that had protoc counts). `cargo check` runs every build
# script, which is where protoc would be needed, without the cost of code
# generation and linking. A directory of PATH that holds protoc (/usr/bin, with
# the linker) is replaced by links to everything else in it.
shadow=$(mktemp -d)
no_protoc_path=
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  [ -n "$dir" ] || continue
  if [ -e "$dir/protoc" ]; then
    copy="$shadow/$(printf '%s' "$dir" | tr / _)"
    mkdir -p "$copy"
    find "$dir" -maxdepth 1 -mindepth 1 ! -name 'protoc' ! -name 'protoc-*' \
      -exec ln -s {} "$copy/" \;
    dir=$copy
  fi
  no_protoc_path+="$dir:"
done
no_protoc_path=${no_protoc_path%:}
if env PATH="$no_protoc_path" sh -c 'command -v protoc' >/dev/null; then
  echo "protoc is still reachable" >&2
  exit 1
fi
env PROTOC=/nonexistent PATH="$no_protoc_path" CARGO_TARGET_DIR=target/no-protoc \
  cargo check -q -p tenure-cli --locked
rm -rf "$shadow"
echo "== generated etcd client code (scripts/etcd-proto --check)"
./scripts/etcd-proto --check
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "== cargo publish --dry-run (the publishable crates, each built from its packaged sources)"
# Examples, tenure-test, tenure-chaos and tenure-bench have publish = false.
# Verification builds every crate from its .crate file against the others
# (a local registry cargo makes for the run), as crates.io would.
# Cargo unpacks each of them under $CARGO_HOME/registry/src/ to build it, and
# would reuse a copy of the same version unpacked by an earlier run (stale
# sources): remove ours first. No crate of these names comes from crates.io.
for unpacked in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/tenure-{,http-,cli-}[0-9]*; do
  if [ -e "$unpacked" ]; then rm -rf "$unpacked"; fi
done
cargo publish --dry-run --allow-dirty --quiet -p tenure -p tenure-http -p tenure-cli
echo "== dependency audit (sources and licences, offline)"
./scripts/audit-deps
echo "== rust-version"
./scripts/check-rust-version.sh
echo "== examples"
cargo run -q -p lease-example
echo "== README set-up command (tenure run on the embedded SQLite default, fresh state dir)"
state=$(mktemp -d)
env -u TENURE_DB -u TENURE_BACKEND XDG_STATE_HOME="$state" \
  cargo run -q -p tenure-cli -- run demo sh -c 'echo "holding demo, fence $TENURE_FENCE"'
test -f "$state/tenure/tenure.db"
rm -rf "$state"
echo "== the CLI links GCC's unwinder from its static archive (crates/tenure-cli/build.rs)"
# Where the C toolchain has libgcc_eh.a, `tenure` does not load libgcc_s.so.1
# at every start (docs/BENCHMARKS.md, cold start).
if [ -f "$(cc -print-file-name=libgcc_eh.a)" ] &&
  readelf -d "${CARGO_TARGET_DIR:-target}/debug/tenure" | grep -q 'libgcc_s'; then
  echo "tenure needs libgcc_s.so.1: its build script no longer links libgcc_eh.a" >&2
  exit 1
fi
echo "== man pages (generated from the CLI's grammar, as a packager would)"
man_dir=$(mktemp -d)
cargo run -q -p tenure-cli -- man --dir "$man_dir"
test -s "$man_dir/tenure.1" && test -s "$man_dir/tenure-run.1"
rm -rf "$man_dir"
echo "== doctests"
cargo test --workspace --doc
echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --profile ci
else
  cargo test --workspace --lib --bins --tests --examples
fi
echo "== the CLI built with the embedded SQLite store alone (--no-default-features)"
# Last: this build replaces target/debug/tenure, which the tests above run.
# (The CLI's tests need its default features: they start Redis and etcd.)
silent cargo build -q -p tenure-cli --no-default-features
lean=target/debug/tenure
state=$(mktemp -d)
lean_run() { env -u TENURE_DB -u TENURE_BACKEND XDG_STATE_HOME="$state" "$lean" "$@"; }
lean_run run demo -- true
test -f "$state/tenure/tenure.db"
refused() {
  local want=$1 out code=0
  shift
  out=$(lean_run "$@" status demo 2>&1) || code=$?
  if [ "$code" -ne 64 ] || [[ "$out" != *"no $want support"* ]]; then
    echo "tenure $* status demo: exit $code, '$out' (wanted 64 and 'no $want support')" >&2
    exit 1
  fi
}
refused Redis --backend redis://127.0.0.1:1
refused Redis --backend redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3
refused Redis --backend rediss://127.0.0.1:1 --cacert /dev/null
refused etcd --backend etcd://127.0.0.1:1
refused etcd --backend etcds://127.0.0.1:1 --cacert /dev/null
rm -rf "$state"
