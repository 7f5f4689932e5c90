//! The process's entry point, in place of the start-up std wraps around a
//! Rust program's `fn main`.
//!
//! That start-up also installs std's handler that reports a stack overflow,
//! and to find the main thread's stack it has glibc read and scan
//! `/proc/self/maps` (`pthread_getattr_np`): about 80k instructions and 16
//! system calls, a tenth of a millisecond of a `tenure run -- true` whose
//! whole cold start is about two. tenure's entry point (`#![no_main]`
//! in `main.rs`) does the rest of std's start-up itself:
//!
//! - SIGPIPE is ignored, so writing to a closed pipe is an error tenure
//!   handles (`output.rs`), not its death; the commands tenure starts get
//!   its default action back from std's `Command`, as before.
//! - A standard descriptor (0, 1, 2) that is closed is opened on
//!   `/dev/null`, so no socket or file tenure opens later takes its number
//!   and receives what is printed, and the commands tenure runs inherit it.
//! - A panic prints its message (std's hook) and ends the process with
//!   status 101, as std's start-up does.
//! - Buffered output on stdout is flushed before the process exits.
//!
//! What is left out is the stack-overflow report: a thread that overflows
//! its stack still hits the guard below it and is ended by SIGSEGV, without
//! std's "has overflowed its stack" line.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::raw::c_int;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{SigHandler, Signal, signal};

/// The exit status of a process that panicked, as std's start-up gives it.
const PANICKED: c_int = 101;

/// Runs `body` as std's start-up would run `main`, and returns the
/// process's exit status.
pub fn run(body: fn() -> u8) -> c_int {
    ignore_sigpipe();
    open_closed_stdio();
    let status = std::panic::catch_unwind(body).map_or(PANICKED, c_int::from);
    let _ = std::io::stdout().flush();
    status
}

/// Ignores SIGPIPE, as std's start-up does (see the module docs). std's
/// `Command` gives the commands tenure starts the default action back.
#[allow(unsafe_code)]
fn ignore_sigpipe() {
    // SAFETY: SIG_IGN installs no handler, so no code runs in a signal
    // context; this runs before any other thread exists. It cannot fail for
    // SIGPIPE; if it did, SIGPIPE would keep its default action, as in a C
    // program.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

/// Opens `/dev/null` in place of each closed standard descriptor (see the
/// module docs). A new file takes the lowest free descriptor, so while
/// `/dev/null` opens as 0, 1 or 2 one of them was closed and is kept open
/// on it, without close-on-exec (std sets it on every file it opens), so
/// that the commands tenure runs inherit it as their own; the first that
/// opens above 2 is closed again. Two system calls when none is closed.
fn open_closed_stdio() {
    while let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        if null.as_raw_fd() > 2 {
            return;
        }
        let _ = fcntl(&null, FcntlArg::F_SETFD(FdFlag::empty()));
        // Kept open for the rest of the process, as the standard descriptor.
        std::mem::forget(null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_is_the_bodys() {
        assert_eq!(run(|| 0), 0);
        assert_eq!(run(|| 75), 75);
    }

    #[test]
    fn a_panic_ends_with_status_101() {
        assert_eq!(run(|| panic!("a test of the start-up's panic")), PANICKED);
    }
}
