//! SVG plots of the results (plotters, no fonts needed: the SVG backend writes text elements).

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The colours of the target lines (dashed), apart from the systems'.
const MARKS: [RGBColor; 4] = [
    RGBColor(0, 0, 0),
    RGBColor(200, 0, 0),
    RGBColor(0, 120, 120),
    RGBColor(120, 120, 0),
];

/// A target line on a plot: its label and where it lies on the measured axis (see
/// `targets::marks`).
pub(crate) type Mark = (String, f64);

/// Draws `marks` as dashed lines between the two points `ends(value)`, with legend entries.
fn draw_marks<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    marks: &[Mark],
    ends: impl Fn(f64) -> [(X::ValueType, Y::ValueType); 2],
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged,
    Y: Ranged,
    X::ValueType: Clone + 'static,
    Y::ValueType: Clone + 'static,
{
    for (i, (label, value)) in marks.iter().enumerate() {
        let color = MARKS[i % MARKS.len()];
        chart
            .draw_series(DashedLineSeries::new(
                ends(*value),
                8,
                5,
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    Ok(())
}

/// Draws the legend of the labelled series at `position`, boxed.
fn legend<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(position)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Latency CDFs, one line per system, log-scaled latency axis; each mark a vertical line at
/// its latency.
pub(crate) fn cdf(
    path: &Path,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
    marks: &[Mark],
) -> anyhow::Result<()> {
    let xs = || {
        series
            .iter()
            .flat_map(|(_, pts)| pts.iter().map(|p| p.0))
            .chain(marks.iter().map(|m| m.1))
    };
    let max_x = xs().fold(10.0f64, f64::max);
    let min_x = xs().fold(max_x, f64::min).max(1.0);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((min_x..max_x * 1.1).log_scale(), 0.0f64..1.0)?;
    chart
        .configure_mesh()
        .x_desc("latency (us, log scale)")
        .y_desc("fraction of operations")
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    draw_marks(&mut chart, marks, |x| [(x, 0.0), (x, 1.0)])?;
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A bar chart, one bar per system; each mark a horizontal line at its value.
pub(crate) fn bars(
    path: &Path,
    title: &str,
    unit: &str,
    values: &[(String, f64)],
    marks: &[Mark],
) -> anyhow::Result<()> {
    let max = values
        .iter()
        .map(|v| v.1)
        .chain(marks.iter().map(|m| m.1))
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = values.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), 0.0f64..max * 1.15)?;
    let labels: Vec<String> = values.iter().map(|v| v.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(unit)
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    chart.draw_series(values.iter().enumerate().map(|(i, (_, v))| {
        let color = PALETTE[i % PALETTE.len()];
        let mut bar = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), *v),
            ],
            color.filled(),
        );
        bar.set_margin(0, 0, 12, 12);
        bar
    }))?;
    draw_marks(&mut chart, marks, |y| {
        [(SegmentValue::Exact(0), y), (SegmentValue::Exact(n), y)]
    })?;
    if !marks.is_empty() {
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Lines of a metric against N (Redlock latency against the number of nodes); each mark a
/// horizontal line at its value.
pub(crate) fn lines(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[(String, Vec<(f64, f64)>)],
    marks: &[Mark],
) -> anyhow::Result<()> {
    let max_x = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(1.0f64, f64::max);
    let max_y = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .chain(marks.iter().map(|m| m.1))
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0f64..max_x + 1.0, 0.0f64..max_y * 1.15)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
    }
    draw_marks(&mut chart, marks, |y| [(0.0, y), (max_x + 1.0, y)])?;
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))
}
