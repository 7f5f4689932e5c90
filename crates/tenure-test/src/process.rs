//! Signals to a process and everything it started: SIGSTOP/SIGCONT/SIGKILL of
//! real processes (a server with its workers, a `tenure run` with its command).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The process ids of `pid`'s descendants, parents before children, read from
/// `/proc` (empty elsewhere).
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.filter_map(Result::ok) {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
                parents.push((p, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(child, ppid) in &parents {
            if ppid == parent && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

/// Sends `signal` to `pid` and to all its descendants. Processes that are gone
/// already are skipped. SIGSTOP goes to the parent first (so it starts no new
/// child), SIGCONT to the children first.
pub fn signal_tree(pid: u32, signal: Signal) {
    let mut all = vec![pid];
    all.extend(descendants(pid));
    if signal == Signal::SIGCONT {
        all.reverse();
    }
    for p in all {
        if let Ok(p) = i32::try_from(p) {
            let _ = kill(Pid::from_raw(p), signal);
        }
    }
}

/// Freezes `pid` and its descendants (SIGSTOP): their sockets stay open.
pub fn pause_tree(pid: u32) {
    signal_tree(pid, Signal::SIGSTOP);
}

/// Resumes `pid` and its descendants (SIGCONT).
pub fn resume_tree(pid: u32) {
    signal_tree(pid, Signal::SIGCONT);
}

/// Kills `pid` and its descendants (SIGKILL) and waits (up to 5 s) until they
/// are gone — dead processes hold no socket — so a port they listened on is
/// closed when this returns.
pub fn kill_tree(pid: u32) {
    // Freeze the tree until it stops growing: a frozen process forks no more,
    // so the list of processes to kill is then complete.
    let mut all = vec![pid];
    for _ in 0..10 {
        signal_tree(pid, Signal::SIGSTOP);
        let mut now = vec![pid];
        now.extend(descendants(pid));
        if now == all {
            break;
        }
        all = now;
    }
    for &p in &all {
        if let Ok(p) = i32::try_from(p) {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(p), Signal::SIGCONT);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while all.iter().any(|&p| alive(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether `pid` exists and is not a zombie (a zombie has released its files).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, r)| r.trim().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}
