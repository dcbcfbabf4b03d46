//! `timeline.svg`: one row per worker, hold intervals as bars, overlaps and rejected writes
//! marked, fault periods shaded (like Jepsen's timelines).

use std::path::Path;

use plotters::prelude::*;

use super::analyze::{Analysis, Fault};

/// The narrowest a fault period is drawn, in seconds.
const MIN_FAULT_WIDTH_S: f64 = 0.06;

/// Empty rows above the workers, where the legend goes.
const LEGEND_ROWS: u64 = 5;

pub(crate) fn draw(
    path: &Path,
    a: &Analysis,
    faults: &[Fault],
    t0: f64,
    t1: f64,
) -> anyhow::Result<()> {
    let workers = a.holds.iter().map(|h| h.worker).max().unwrap_or(0) + 1;
    let secs = |t: f64| (t - t0) / 1000.0;
    let root = SVGBackend::new(path, (1200, 120 + 28 * (workers + LEGEND_ROWS) as u32))
        .into_drawing_area();
    root.fill(&WHITE)?;
    // Worker w's row is centred on y = w; the legend sits in the empty rows above them.
    let bottom_of_legend = workers as f64 - 0.5;
    let top = (workers + LEGEND_ROWS) as f64 - 0.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "leasehold check: critical sections per worker",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..secs(t1).max(0.1), -0.5..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("worker")
        .y_labels((workers + LEGEND_ROWS) as usize + 1)
        .y_label_formatter(&|y| {
            if *y > -0.1 && *y < workers as f64 - 0.5 && (*y - y.round()).abs() < 0.01 {
                format!("{}", y.round() as u64)
            } else {
                String::new()
            }
        })
        .draw()?;
    let shade = |kind: &str| match kind {
        "pause" => RGBColor(255, 190, 100),
        "kill" => RGBColor(190, 150, 255),
        "stall" => RGBColor(120, 200, 255),
        "failover" => RGBColor(120, 220, 140),
        "kill-primary" => RGBColor(230, 120, 120),
        "migrate" => RGBColor(240, 220, 90),
        "restart-noaof" => RGBColor(110, 110, 110),
        "member-kill" => RGBColor(230, 150, 200),
        "member-pause" => RGBColor(150, 230, 230),
        "leader-kill" => RGBColor(230, 120, 120),
        _ => RGBColor(190, 190, 190), // restarts that keep their data
    };
    let mut kinds: Vec<&str> = faults.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds {
        let color = shade(kind);
        chart
            .draw_series(faults.iter().filter(|f| f.kind == kind).map(|f| {
                Rectangle::new(
                    // A kill or a restart takes milliseconds: keep it visible.
                    [
                        (secs(f.start), -0.5),
                        (
                            secs(f.end).max(secs(f.start) + MIN_FAULT_WIDTH_S),
                            bottom_of_legend,
                        ),
                    ],
                    color.mix(0.35).filled(),
                )
            }))?
            .label(kind)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.mix(0.6).filled())
            });
    }
    chart
        .draw_series(a.holds.iter().map(|h| {
            let y = h.worker as f64;
            Rectangle::new(
                [
                    (secs(h.start), y - 0.3),
                    (secs(h.end).max(secs(h.start) + 0.002), y + 0.3),
                ],
                RGBColor(31, 119, 180).filled(),
            )
        }))?
        .label("holding the lock")
        .legend(|(x, y)| {
            Rectangle::new(
                [(x, y - 5), (x + 12, y + 5)],
                RGBColor(31, 119, 180).filled(),
            )
        });
    chart
        .draw_series(a.overlap_spans.iter().map(|(s, e)| {
            Rectangle::new(
                [
                    (secs(*s), -0.5),
                    (secs(*e).max(secs(*s) + 0.004), bottom_of_legend),
                ],
                RED.mix(0.25).filled(),
            )
        }))?
        .label("overlap")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], RED.mix(0.4).filled()));
    chart
        .draw_series(
            a.writes
                .iter()
                .filter(|w| !w.accepted)
                .map(|w| Cross::new((secs(w.t), w.worker as f64), 5, RED.stroke_width(2))),
        )?
        .label("write refused")
        .legend(|(x, y)| Cross::new((x + 6, y), 5, RED.stroke_width(2)));
    chart
        .draw_series(
            a.writes
                .iter()
                .filter(|w| w.accepted && w.stale)
                .map(|w| TriangleMarker::new((secs(w.t), w.worker as f64), 6, BLACK.filled())),
        )?
        .label("stale write accepted")
        .legend(|(x, y)| TriangleMarker::new((x + 6, y), 6, BLACK.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
