// Included by this crate's build.rs.

/// The functions a one-shot `tenure run` enters, as section-name patterns
/// (written by scripts/startup-order).
const STARTUP_FUNCTIONS: &str = "build/startup-functions.txt";

/// Places the code a one-shot `tenure run` executes together, ahead of the
/// rest of `tenure`'s code, in its release build on Linux: the kernel maps
/// a binary's code in 64 KB windows as it is first touched, and the
/// start-up's functions, scattered over 7.8 MB, would each fault in a window
/// of their own (docs/BENCHMARKS.md, cold start).
///
/// A linker script inserts one output section, `.text.hot`, before `.text`
/// and lists the functions' sections in it; everything else keeps the
/// linker's default layout. Only when a probe program links with the same
/// compiler, linker and flags and that script: a linker that does not take
/// it (macOS's, gold) leaves the build as it was. A debug build links
/// without it: matching the patterns against its many more sections takes
/// the linker seconds at every link.
fn place_startup_code() {
    println!("cargo:rerun-if-changed={STARTUP_FUNCTIONS}");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let var = |name| std::env::var(name).unwrap_or_default();
    if var("PROFILE") != "release" || var("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    let (Ok(listed), Some(out)) = (
        std::fs::read_to_string(STARTUP_FUNCTIONS),
        std::env::var_os("OUT_DIR"),
    ) else {
        return;
    };
    let out = std::path::Path::new(&out);
    let script = out.join("startup.ld");
    if std::fs::write(&script, linker_script(&listed)).is_ok() && links_with(&script, out) {
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}

/// The linker script for the `listed` patterns (one per line, `#` starts a
/// comment); a line with anything but a symbol's characters and `*` is left
/// out.
fn linker_script(listed: &str) -> String {
    let symbol = |c: char| c.is_ascii_alphanumeric() || "_.$*".contains(c);
    let mut script = String::from("SECTIONS {\n  .text.hot : {\n");
    for pattern in listed.lines().map(str::trim) {
        if !pattern.is_empty() && !pattern.starts_with('#') && pattern.chars().all(symbol) {
            // LLVM puts a function it deems cold in `.text.unlikely.NAME`.
            script.push_str(&format!(
                "    *(.text.{pattern} .text.unlikely.{pattern})\n"
            ));
        }
    }
    script.push_str("  }\n} INSERT BEFORE .text;\n");
    script
}

/// Whether an empty program links with `script` as this crate's binary
/// would: the same compiler, target, flags and linker.
fn links_with(script: &std::path::Path, out: &std::path::Path) -> bool {
    let probe = out.join("startup_probe.rs");
    if std::fs::write(&probe, "fn main() {}\n").is_err() {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let mut cmd = std::process::Command::new(rustc);
    cmd.arg(&probe);
    if let Ok(target) = std::env::var("TARGET") {
        cmd.arg("--target").arg(target);
    }
    cmd.arg("-o")
        .arg(out.join("startup_probe"))
        .arg("-C")
        .arg(format!("link-arg=-Wl,-T,{}", script.display()));
    if let Ok(flags) = std::env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        cmd.arg("-C").arg(format!("linker={linker}"));
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
