//! Links GCC's unwinder into `tenure` from its static archive (`libgcc_eh.a`)
//! instead of loading `libgcc_s.so.1` at every start, where the toolchain
//! has that archive. This is what `gcc -static-libgcc` does for C programs.
//!
//! Rust's standard library asks for `libgcc_s` on Linux with glibc. The
//! archive, named by this crate, comes before the standard library's
//! libraries on the link line: the linker resolves the unwinder from it, and
//! `--as-needed` (which rustc passes) then leaves `libgcc_s` out. Panics,
//! backtraces and `catch_unwind` work as before. A one-shot `tenure run`
//! starts sooner: the loader maps, relocates and initialises one shared
//! library fewer (docs/BENCHMARKS.md, cold start).
//!
//! Only for a native build (target = host) with glibc on Linux, and only when
//! the C compiler that links (the configured linker, else `cc`) finds
//! `libgcc_eh.a`: otherwise nothing changes and `libgcc_s` is used as usual.

include!("build/unwinder.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/unwinder.rs");
    link_static_unwinder();
}
