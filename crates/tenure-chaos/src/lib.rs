//! tenure's fault-injection suite.
//!
//! A lock-set workload (threads with their own runtimes, or `tenure run`
//! processes) loops acquire → read-modify-write of protected resources →
//! release while a nemesis injects faults drawn from a seed; every operation
//! goes to a JSON-lines history ([`history`]); the [`check`]er reads it back
//! and counts stale writes accepted, fence regressions, lost updates, double
//! grants per fault class, orphan keys, limiter over-admission and the
//! lost-signal latency. [`run::run`] runs one scenario; a holder's critical
//! section ([`section`]) is the same in the in-process clients ([`workload`])
//! and in the writer `tenure run` processes run ([`rmw`]); the in-process
//! clients also take lease sets and read-write leases ([`held`]);
//! [`scorecard`] renders the table of `docs/RELIABILITY.md`.

pub mod check;
pub mod held;
pub mod history;
pub mod resource;
pub mod rmw;
pub mod run;
pub mod scorecard;
pub mod section;
pub mod store;
pub mod workload;
