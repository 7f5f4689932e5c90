//! Rows, bars and targets that other benchmarks add to the report.
//!
//! A bench command listed in `crates/tenure-bench/extra-benches` is run by
//! `scripts/bench` before this program, with `TENURE_BENCH_ROWS` naming a
//! directory; it writes a `NAME.tsv` file there, one tab-separated line per
//! item:
//!
//! ```text
//! row     TABLE   WORKLOAD   TENURE   PEERS   RATIO
//! bar     CHART   TITLE      UNIT     LABEL   VALUE
//! target  TEXT
//! ```
//!
//! Rows are grouped into a table per `TABLE` title, in the order first seen;
//! bars into `docs/bench/CHART.svg`; targets are printed with this bench's
//! own, never written into the page. A module of this bench adds the same
//! items through [`Extras::parse_line`] or the fields directly.

use std::path::Path;

/// One row of a table: workload, tenure, peers, ratio.
pub type Row = [String; 4];

/// A bar chart: file stem, title, unit, `(label, value)` bars.
pub type BarChart = (String, String, String, Vec<(String, f64)>);

/// What the other benchmarks reported.
#[derive(Default)]
pub struct Extras {
    /// `(table title, rows)`, in the order first seen.
    pub tables: Vec<(String, Vec<Row>)>,
    /// `(chart file stem, title, unit, bars)`.
    pub charts: Vec<BarChart>,
    pub targets: Vec<String>,
}

impl Extras {
    /// Reads every `*.tsv` file in `dir` (sorted by name); a missing
    /// directory is no extras.
    pub fn read(dir: &Path) -> Self {
        let mut extras = Extras::default();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return extras;
        };
        let mut files: Vec<_> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            for line in text.lines() {
                if !extras.parse_line(line) && !line.trim().is_empty() {
                    eprintln!("{}: ignored line: {line}", file.display());
                }
            }
        }
        extras
    }

    /// Adds one item; false when the line is not one.
    pub fn parse_line(&mut self, line: &str) -> bool {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["row", table, w, t, p, r] => {
                let row = [w, t, p, r].map(|s| s.to_string());
                match self.tables.iter_mut().find(|(title, _)| title == table) {
                    Some((_, rows)) => rows.push(row),
                    None => self.tables.push((table.to_string(), vec![row])),
                }
                true
            }
            ["bar", chart, title, unit, label, value] => {
                let Ok(value) = value.parse() else {
                    return false;
                };
                let bar = (label.to_string(), value);
                match self.charts.iter_mut().find(|c| c.0 == *chart) {
                    Some(c) => c.3.push(bar),
                    None => self.charts.push((
                        chart.to_string(),
                        title.to_string(),
                        unit.to_string(),
                        vec![bar],
                    )),
                }
                true
            }
            ["target", text] => {
                self.targets.push(text.to_string());
                true
            }
            _ => false,
        }
    }
}
