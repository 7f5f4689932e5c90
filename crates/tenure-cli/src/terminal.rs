//! Handing the controlling terminal to the command, as a shell does for a
//! foreground job.
//!
//! The command runs in its own process group (so that a lost lease stops all of
//! it). A process group that is not the terminal's foreground group is stopped
//! (SIGTTIN) when it reads from the terminal, so when tenure itself is in the
//! foreground, it makes the command's group the foreground group for as long as
//! the command runs: the command can read the terminal, and Ctrl-C reaches it
//! directly. Nothing happens when stdin is not a terminal (scripts, CI) or tenure
//! runs in the background.

use std::io::IsTerminal;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

/// Gives the terminal back to tenure's process group when dropped.
#[derive(Debug)]
pub struct Handover {
    ours: Pid,
}

/// Makes `group` the terminal's foreground group, if tenure holds the
/// foreground now.
pub fn hand_over(group: Pid) -> Option<Handover> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let ours = getpgrp();
    if tcgetpgrp(&stdin).ok()? != ours {
        return None; // a background job: leave the terminal alone
    }
    tcsetpgrp(&stdin, group).ok()?;
    // The command may have touched the terminal before it was its own, and been
    // stopped for it: let it go on.
    let _ = killpg(group, Signal::SIGCONT);
    Some(Handover { ours })
}

impl Drop for Handover {
    fn drop(&mut self) {
        // tenure is a background group now: taking the terminal back would stop
        // it with SIGTTOU unless that signal is blocked (on this thread, for the
        // call only).
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut previous = SigSet::empty();
        if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut previous)).is_ok() {
            let _ = tcsetpgrp(std::io::stdin(), self.ours);
            let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&previous), None);
        }
    }
}
