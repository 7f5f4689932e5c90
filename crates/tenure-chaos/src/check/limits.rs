//! Limiter admissions: a key admitted beyond its limit is over-admission,
//! or a burst after loss when a fault that loses the store's state touched
//! the key's lifetime.

use std::collections::BTreeMap;

use super::Report;
use super::faults::Faults;
use crate::history::{Event, Kind};

/// One limiter key's replies.
#[derive(Debug, Clone, Copy)]
struct Admissions {
    admitted: u64,
    limit: u64,
    /// The first reply (ns).
    first: u64,
    /// The last reply (ns).
    last: u64,
}

/// Every limiter key of a history.
#[derive(Debug, Default)]
pub(super) struct Limits {
    keys: BTreeMap<String, Admissions>,
}

impl Limits {
    /// A limit check's reply (ok: admitted; `value`: the limit).
    pub(super) fn reply(&mut self, e: &Event) {
        let Some(key) = &e.key else {
            return;
        };
        let a = self.keys.entry(key.clone()).or_insert(Admissions {
            admitted: 0,
            limit: 0,
            first: e.t,
            last: e.t,
        });
        if e.kind == Kind::Ok {
            a.admitted += 1;
        }
        a.limit = e.value.unwrap_or(a.limit);
        a.last = e.t;
    }

    /// Counts the admissions beyond each key's limit.
    pub(super) fn check(&self, faults: &Faults, report: &mut Report) {
        for (key, a) in &self.keys {
            if a.admitted <= a.limit {
                continue;
            }
            let extra = a.admitted - a.limit;
            if let Some(s) = faults.data_loss_during(a.first, a.last) {
                report.class(&s.kind).burst_after_loss += extra;
                continue;
            }
            let class = faults.blame(a.last);
            report.class(&class).over_admission += extra;
            report.note(format!(
                "limiter {key} admitted {} > limit {} [{class}]",
                a.admitted, a.limit
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Op;

    const MS: u64 = 1_000_000;

    fn reply(t_ms: u64, key: &str, kind: Kind) -> Event {
        let mut e = Event::new("t0", Op::Limit, kind).key(key).value(2);
        e.t = t_ms * MS;
        e
    }

    #[test]
    fn admissions_beyond_the_limit_are_over_admission_unless_the_state_was_lost() {
        let mut failover = Event::new("nemesis", Op::Fault, Kind::Info).note("failover");
        failover.t = 100 * MS;
        let mut heal = Event::new("nemesis", Op::Heal, Kind::Info).note("failover");
        heal.t = 200 * MS;
        let mut limits = Limits::default();
        for (t, key, kind) in [
            (10, "lim:0", Kind::Ok),
            (20, "lim:0", Kind::Ok),
            (30, "lim:0", Kind::Ok), // one beyond the limit of 2
            (40, "lim:0", Kind::Fail),
            (90, "lim:1", Kind::Ok),
            (150, "lim:1", Kind::Ok),
            (160, "lim:1", Kind::Info), // unknown: not an admission
            (210, "lim:1", Kind::Ok),   // beyond, after the failover lost the count
        ] {
            limits.reply(&reply(t, key, kind));
        }
        let mut r = Report::default();
        let faults = Faults::collect(&[failover, heal], 1_000 * MS, &mut r);
        limits.check(&faults, &mut r);
        assert_eq!(r.by_class["none"].over_admission, 1);
        assert_eq!(r.by_class["failover"].burst_after_loss, 1);
        assert_eq!(r.by_class["failover"].over_admission, 0);
        assert_eq!(r.examples, ["limiter lim:0 admitted 3 > limit 2 [none]"]);
    }
}
