//! `timeline.svg`: one row per worker, hold intervals as bars, overlaps and rejected writes
//! marked, fault periods shaded (like Jepsen's timelines).

use std::path::Path;

use plotters::prelude::*;

use super::analyze::{Analysis, Fault};

pub(crate) fn draw(
    path: &Path,
    a: &Analysis,
    faults: &[Fault],
    t0: f64,
    t1: f64,
) -> anyhow::Result<()> {
    let workers = a.holds.iter().map(|h| h.worker).max().unwrap_or(0) + 1;
    let secs = |t: f64| (t - t0) / 1000.0;
    let root = SVGBackend::new(path, (1200, 120 + 28 * workers as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "leasehold check: critical sections per worker",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..secs(t1).max(0.1), 0.0..workers as f64)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("worker")
        .y_labels(workers as usize + 1)
        .draw()?;
    let shade = |kind: &str| match kind {
        "pause" => RGBColor(255, 200, 120).mix(0.35),
        _ => RGBColor(200, 160, 255).mix(0.35),
    };
    chart.draw_series(faults.iter().map(|f| {
        Rectangle::new(
            [(secs(f.start), 0.0), (secs(f.end), workers as f64)],
            shade(&f.kind).filled(),
        )
    }))?;
    chart.draw_series(a.holds.iter().map(|h| {
        let y = h.worker as f64;
        Rectangle::new(
            [
                (secs(h.start), y + 0.2),
                (secs(h.end).max(secs(h.start) + 0.002), y + 0.8),
            ],
            RGBColor(31, 119, 180).filled(),
        )
    }))?;
    chart.draw_series(a.overlap_spans.iter().map(|(s, e)| {
        Rectangle::new(
            [
                (secs(*s), 0.0),
                (secs(*e).max(secs(*s) + 0.004), workers as f64),
            ],
            RED.mix(0.25).filled(),
        )
    }))?;
    chart.draw_series(
        a.writes
            .iter()
            .filter(|w| !w.accepted)
            .map(|w| Cross::new((secs(w.t), w.worker as f64 + 0.5), 5, RED.stroke_width(2))),
    )?;
    chart.draw_series(
        a.writes
            .iter()
            .filter(|w| w.accepted && w.stale)
            .map(|w| TriangleMarker::new((secs(w.t), w.worker as f64 + 0.5), 6, BLACK.filled())),
    )?;
    root.present()?;
    Ok(())
}
