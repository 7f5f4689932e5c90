//! The SVG charts of docs/BENCHMARKS.md, drawn with plotters' SVG backend
//! (text is measured without fonts, so nothing is needed from the system).

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;

/// Width and height of every chart, px.
const SIZE: (u32, u32) = (720, 400);

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// A named line of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a second measure of the same store, e.g. p99).
    pub dashed: bool,
}

/// Axes of a line chart.
pub struct Axes<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
    pub log_x: bool,
    pub log_y: bool,
}

/// What drawing a chart returns.
pub type Result = std::result::Result<(), Box<dyn std::error::Error>>;

/// A line chart of `series` into `path`; series without points are left out,
/// and nothing is written when none has any.
pub fn lines(path: &Path, axes: &Axes<'_>, series: &[Series]) -> Result {
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|p| p.0.is_finite() && p.1.is_finite())
    };
    if pts().next().is_none() {
        return Ok(());
    }
    let (x0, x1) = bounds(pts().map(|p| p.0), axes.log_x);
    let (y0, y1) = bounds(pts().map(|p| p.1), axes.log_y);
    let (y0, y1) = if axes.log_y { (y0, y1) } else { (0.0, y1) };
    match (axes.log_x, axes.log_y) {
        (false, false) => draw(path, axes, series, x0..x1, y0..y1),
        (true, false) => draw(path, axes, series, (x0..x1).log_scale(), y0..y1),
        (false, true) => draw(path, axes, series, x0..x1, (y0..y1).log_scale()),
        (true, true) => draw(
            path,
            axes,
            series,
            (x0..x1).log_scale(),
            (y0..y1).log_scale(),
        ),
    }
}

/// The range to show `values` in, with a margin; positive for a log axis.
fn bounds(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if log {
        (lo.max(1e-9) / 1.5, hi.max(1e-9) * 1.5)
    } else {
        let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.05).max(1e-9);
        (lo - pad, hi + pad)
    }
}

fn draw<X, Y>(path: &Path, axes: &Axes<'_>, series: &[Series], x: X, y: Y) -> Result
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
    <X as AsRangedCoord>::CoordDescType: Ranged<ValueType = f64>,
    <Y as AsRangedCoord>::CoordDescType: Ranged<ValueType = f64>,
{
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(axes.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let mut color = 0;
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let c = COLORS[color % COLORS.len()];
        if !s.dashed {
            color += 1;
        }
        let style = ShapeStyle::from(c).stroke_width(2);
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(points.clone(), 6, 4, style))?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c));
        } else {
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        }
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Horizontal bars, one per `(label, value)`, into `path`; nothing is
/// written when there are none.
pub fn bars(path: &Path, title: &str, unit: &str, bars: &[(String, f64)]) -> Result {
    let bars: Vec<&(String, f64)> = bars.iter().filter(|b| b.1.is_finite()).collect();
    if bars.is_empty() {
        return Ok(());
    }
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max) * 1.15;
    let height = 90 + 34 * bars.len() as u32;
    let root = SVGBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let label_width = bars.iter().map(|b| b.0.len()).max().unwrap_or(0) as u32 * 7 + 10;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(label_width)
        .build_cartesian_2d(0.0..max, 0.0..bars.len() as f64)?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(unit)
        .x_label_formatter(&|v| short(*v))
        .y_labels(bars.len() * 2 + 1)
        .y_label_formatter(&|v| {
            let at = *v - 0.5;
            let i = at.round();
            if (at - i).abs() < 0.01 && i >= 0.0 {
                let n = labels.len();
                labels.get(n - 1 - i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let n = bars.len();
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let row = (n - 1 - i) as f64;
        let color = COLORS[i % COLORS.len()];
        Rectangle::new([(0.0, row + 0.15), (b.1, row + 0.85)], color.filled())
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let row = (n - 1 - i) as f64;
        Text::new(short(b.1), (b.1, row + 0.7), ("sans-serif", 13))
    }))?;
    root.present()?;
    Ok(())
}

/// `1.2k`, `35k`, `1.5M`, `0.42`, `7`.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
