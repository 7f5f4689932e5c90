//! Named measurements collected over interleaved rounds, reported as medians.

use std::collections::BTreeMap;

/// One value per round for every named measurement.
#[derive(Default)]
pub struct Samples(BTreeMap<String, Vec<f64>>);

impl Samples {
    /// Records one round's value of `name`.
    pub fn add(&mut self, name: impl Into<String>, value: f64) {
        self.0.entry(name.into()).or_default().push(value);
    }

    /// The median over the rounds, `None` when `name` was never measured.
    pub fn median(&self, name: &str) -> Option<f64> {
        let mut v = self.0.get(name)?.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// The smallest and largest value over the rounds.
    pub fn range(&self, name: &str) -> Option<(f64, f64)> {
        let v = self.0.get(name)?;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((lo, hi))
    }
}
