// Included by this crate's build.rs and by tenure-bench's (its minimal lease
// run is built as `tenure` is).

/// Links GCC's unwinder from `libgcc_eh.a` instead of `libgcc_s.so.1` where
/// [`static_unwinder_available`] says so.
///
/// Rust's standard library asks for `libgcc_s` on Linux with glibc. The
/// archive, named here, comes before the standard library's libraries on the
/// link line: the linker resolves the unwinder from it, and `--as-needed`
/// (which rustc passes) then leaves `libgcc_s` out. Panics, backtraces and
/// `catch_unwind` work as before; the loader maps, relocates and initialises
/// one shared library fewer at every start.
fn link_static_unwinder() {
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if static_unwinder_available() {
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
}

/// Whether this build targets glibc on Linux natively and its linker finds
/// GCC's static unwinder.
fn static_unwinder_available() -> bool {
    let var = |name| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("TARGET") != var("HOST")
    {
        return false;
    }
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    // `-print-file-name` prints the archive's full path when it finds it,
    // and the bare name when it does not.
    let Ok(out) = std::process::Command::new(linker)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return false;
    };
    let printed = String::from_utf8_lossy(&out.stdout);
    let path = std::path::Path::new(printed.trim());
    out.status.success() && path.is_absolute() && path.is_file()
}
