//! A wall clock that jumps, for client processes run under libfaketime.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable naming `libfaketime.so.1`.
pub const LIBFAKETIME_ENV: &str = "TENURE_LIBFAKETIME";

/// Finds libfaketime: `$TENURE_LIBFAKETIME`, else Debian's `faketime` package.
pub fn libfaketime() -> Option<PathBuf> {
    if let Ok(p) = std::env::var(LIBFAKETIME_ENV) {
        return Some(PathBuf::from(p));
    }
    let mut candidates = vec![PathBuf::from("/usr/lib/faketime/libfaketime.so.1")];
    if let Ok(dirs) = std::fs::read_dir("/usr/lib") {
        candidates.extend(
            dirs.filter_map(Result::ok)
                .map(|d| d.path().join("faketime/libfaketime.so.1")),
        );
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// A wall-clock offset shared by the processes started with
/// [`apply`](Self::apply): [`jump`](Self::jump) moves their `CLOCK_REALTIME` at
/// once (libfaketime re-reads the offset file on every call); their monotonic
/// and boot-time clocks stay true. Programs linked with jemalloc hang under
/// libfaketime (its issue #130): use it for programs on the system allocator.
///
/// ```no_run
/// let dir = tempfile::tempdir().unwrap();
/// let mut clock = tenure_test::FakeClock::new(dir.path()).expect("libfaketime installed");
/// let mut cmd = std::process::Command::new("date");
/// clock.apply(&mut cmd);
/// clock.jump(3600).unwrap(); // an hour ahead, for every process started with it
/// ```
#[derive(Debug, Clone)]
pub struct FakeClock {
    lib: PathBuf,
    file: PathBuf,
    offset: i64,
}

impl FakeClock {
    /// An offset of zero kept in `dir`; `None` when libfaketime is not installed
    /// (Debian's `faketime` package) or the file cannot be written.
    pub fn new(dir: &Path) -> Option<Self> {
        let lib = libfaketime()?;
        let file = dir.join("faketime.rc");
        std::fs::write(&file, "+0s\n").ok()?;
        Some(FakeClock {
            lib,
            file,
            offset: 0,
        })
    }

    /// Runs `cmd` under this clock.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env("LD_PRELOAD", &self.lib)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }

    /// Moves the wall clock by `seconds` (negative: backwards); offsets add up.
    ///
    /// # Errors
    /// When the offset file cannot be written.
    pub fn jump(&mut self, seconds: i64) -> std::io::Result<()> {
        self.offset += seconds;
        // Write-then-rename: a reader never sees a half-written offset.
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, format!("{:+}s\n", self.offset))?;
        std::fs::rename(&tmp, &self.file)
    }

    /// The current offset in seconds.
    pub fn offset(&self) -> i64 {
        self.offset
    }
}
