//! Shadow mode (a dry run): policies whose decisions are computed, counted
//! and reported, but whose refusals are not enforced. See
//! [`Limiter::shadow`](super::Limiter::shadow) and
//! [`Limiter::and_shadow`](super::Limiter::and_shadow).
//!
//! A shadow policy consumes exactly what it would consume if it were
//! enforced: its units are taken when the request is admitted and the policy
//! allows it, and nothing is taken when it would refuse. Its state is
//! therefore the state the key would have under the new limit, and the
//! would-refuse count is the refusal count enforcing it would produce for the
//! same traffic, not a count inflated by requests a real refusal would have
//! stopped. The enforced policies are never charged for a shadow policy: a
//! compound request whose only refusals come from shadow policies is asked
//! again for the enforced policies alone.

use super::decision::{Decision, Mode};
use super::policy::Policy;
use super::store::{LimitRequest, LimitStore};
use crate::error::Result;

/// Which policies of a limiter are in shadow mode: all of them, or some by
/// their index in the limiter.
#[derive(Debug, Clone, Default)]
pub(super) struct Shadowing {
    all: bool,
    each: Vec<usize>,
}

impl Shadowing {
    /// Puts every policy in shadow mode, or takes them out (the ones added
    /// with `and_shadow` stay in shadow).
    pub(super) fn set_all(&mut self, on: bool) {
        self.all = on;
    }

    /// Puts the policy at `index` in shadow mode.
    pub(super) fn add(&mut self, index: usize) {
        self.each.push(index);
    }

    /// Whether any policy is in shadow mode.
    pub(super) fn is_active(&self) -> bool {
        self.all || !self.each.is_empty()
    }

    /// Whether every policy is in shadow mode (a fallback's refusals are then
    /// not enforced either).
    pub(super) fn is_total(&self) -> bool {
        self.all
    }

    fn covers(&self, index: usize) -> bool {
        self.all || self.each.contains(&index)
    }

    /// Asks `store` for `request`, enforcing only the policies not in shadow
    /// mode: one call, and a second one for the enforced policies alone when
    /// only shadow policies refused a consuming request (the first call,
    /// all-or-nothing, took nothing).
    pub(super) async fn ask(
        &self,
        store: &dyn LimitStore,
        request: &LimitRequest<'_>,
    ) -> Result<Vec<Decision>> {
        let first = store.apply(request).await?;
        if !self.is_active() {
            return Ok(first);
        }
        let refused_by = |shadow: bool| {
            first
                .iter()
                .enumerate()
                .any(|(i, d)| !d.allowed && self.covers(i) == shadow)
        };
        let enforced: Vec<Policy> = (request.policies.iter().enumerate())
            .filter(|(i, _)| !self.covers(*i))
            .map(|(_, p)| p.clone())
            .collect();
        let again = request.mode == Mode::Consume
            && !enforced.is_empty()
            && refused_by(true)
            && !refused_by(false);
        if !again {
            return Ok(self.mark(first));
        }
        let alone =
            LimitRequest::new(request.key, &enforced, request.cost, request.mode).at(request.now);
        let mut second = store.apply(&alone).await?.into_iter();
        let merged = (first.into_iter().enumerate())
            .map(|(i, d)| match self.covers(i) {
                true => d,
                false => second.next().unwrap_or(d),
            })
            .collect();
        Ok(self.mark(merged))
    }

    /// The decision the caller sees: [`Decision::combine`] of the enforced
    /// policies' decisions, or of every policy's when all are in shadow mode;
    /// `would_refuse` when any shadow policy would have refused.
    pub(super) fn combine(&self, decisions: &[Decision]) -> Option<Decision> {
        let enforced: Vec<Decision> = (decisions.iter().enumerate())
            .filter(|(i, _)| !self.covers(*i))
            .map(|(_, d)| *d)
            .collect();
        if enforced.is_empty() {
            return Decision::combine(decisions);
        }
        let mut combined = Decision::combine(&enforced)?;
        combined.would_refuse = decisions.iter().any(|d| d.would_refuse);
        Some(combined)
    }

    /// Turns the refusals of shadow policies into admissions that say they
    /// would have refused.
    pub(super) fn mark(&self, mut decisions: Vec<Decision>) -> Vec<Decision> {
        for (i, d) in decisions.iter_mut().enumerate() {
            if self.covers(i) && !d.allowed {
                d.allowed = true;
                d.would_refuse = true;
            }
        }
        decisions
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_shadow_refusals_are_turned_into_admissions() {
        let mut s = Shadowing::default();
        s.add(1);
        let no = Decision::refused(5, Duration::from_secs(9), Duration::from_secs(3));
        let yes = Decision::allowed(5, 2, Duration::from_secs(1));
        let marked = s.mark(vec![no, no, yes]);
        assert!(!marked[0].allowed && !marked[0].would_refuse);
        assert!(marked[1].allowed && marked[1].would_refuse);
        assert_eq!(marked[1].retry_after, Some(Duration::from_secs(3)));
        assert_eq!(marked[2], yes);
        let combined = Decision::combine(&marked).expect("decisions");
        assert!(!combined.allowed && combined.would_refuse);
    }

    #[test]
    fn the_combined_decision_of_a_shadowed_refusal_is_an_admission_with_its_numbers() {
        let mut s = Shadowing::default();
        s.set_all(true);
        let short = Decision::refused(5, Duration::from_secs(9), Duration::from_secs(1));
        let long = Decision::refused(7, Duration::from_secs(9), Duration::from_secs(4));
        let combined = Decision::combine(&s.mark(vec![short, long])).expect("decisions");
        assert!(combined.allowed && combined.would_refuse);
        assert_eq!((combined.limit, combined.remaining), (7, 0));
        assert_eq!(combined.retry_after, Some(Duration::from_secs(4)));
        // An enforced admission's numbers win over a shadow refusal's.
        let mut one = Shadowing::default();
        one.add(0);
        let ok = Decision::allowed(3, 2, Duration::from_secs(1));
        let combined = one.combine(&one.mark(vec![long, ok])).expect("decisions");
        assert!(combined.allowed && combined.would_refuse);
        assert_eq!((combined.limit, combined.remaining), (3, 2));
    }
}
