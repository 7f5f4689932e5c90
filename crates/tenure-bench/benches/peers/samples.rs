//! Named measurements collected over interleaved rounds, reported as medians.

use std::collections::BTreeMap;

/// One value per round for every named measurement, and the last round's
/// distribution of the measurements that have one (hand-off latencies).
#[derive(Default)]
pub struct Samples {
    values: BTreeMap<String, Vec<f64>>,
    distributions: BTreeMap<String, Vec<f64>>,
}

impl Samples {
    /// Records one round's value of `name`.
    pub fn add(&mut self, name: impl Into<String>, value: f64) {
        self.values.entry(name.into()).or_default().push(value);
    }

    /// Keeps `values` (sorted) as the distribution of `name`.
    pub fn distribution(&mut self, name: impl Into<String>, values: Vec<f64>) {
        self.distributions.insert(name.into(), values);
    }

    /// The distribution of `name`, sorted.
    pub fn sorted(&self, name: &str) -> Option<&[f64]> {
        self.distributions.get(name).map(Vec::as_slice)
    }

    /// The median over the rounds, `None` when `name` was never measured.
    pub fn median(&self, name: &str) -> Option<f64> {
        let mut v = self.values.get(name)?.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// `(rest of the name, median)` of every measurement named `prefix…`.
    pub fn prefixed(&self, prefix: &str) -> Vec<(String, f64)> {
        self.values
            .keys()
            .filter_map(|k| {
                let rest = k.strip_prefix(prefix)?;
                Some((rest.to_string(), self.median(k)?))
            })
            .collect()
    }

    /// The smallest and largest value over the rounds.
    pub fn range(&self, name: &str) -> Option<(f64, f64)> {
        let v = self.values.get(name)?;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((lo, hi))
    }
}
