//! Two link-time choices for the `tenure` binary, each made only where the
//! toolchain supports it; elsewhere the build is as Cargo makes it.
//!
//! - GCC's unwinder from its static archive (`libgcc_eh.a`) instead of
//!   loading `libgcc_s.so.1` at every start, as `gcc -static-libgcc` does
//!   for C programs (`build/unwinder.rs`).
//! - The code a one-shot `tenure run` executes placed together ahead of the
//!   rest, in release builds on Linux (`build/startup_order.rs`, the list in
//!   `build/startup-functions.txt`).
//!
//! Both make a one-shot `tenure run` start sooner (docs/BENCHMARKS.md, cold
//! start) and change nothing else a user can observe.

include!("build/unwinder.rs");
include!("build/startup_order.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/unwinder.rs");
    println!("cargo:rerun-if-changed=build/startup_order.rs");
    link_static_unwinder();
    place_startup_code();
}
