//! `forecast --svg FILE`: capacity over time of the median run, one panel
//! per pool: total and available nodes against the band the rollout must
//! stay in (floor to max total), the disruption windows shaded, and with
//! `--sweep` one line per budget.

use jiff::SignedDuration;
use plotters::prelude::*;

use crate::reconcile::forecast::{Forecast, Point};
use crate::spec::types::Disruption;

/// A pool's panel: its forecast, its disruption rules, and the lines to
/// draw (a label and the median run's capacity curve).
type Panel = (Forecast, Disruption, Vec<(String, Vec<Point>)>);

/// Steps, not slopes: a count holds until the next change (`unit`: seconds
/// per unit of the x axis).
fn steps(points: &[Point], end: f64, unit: f64, value: impl Fn(&Point) -> u32) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2 + 1);
    for (i, p) in points.iter().enumerate() {
        let y = f64::from(value(p));
        out.push((p.t / unit, y));
        let next = points.get(i + 1).map_or(end, |n| n.t / unit);
        out.push((next, y));
    }
    out
}

pub fn draw(panels: &[Panel]) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let height = 340 * panels.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut svg, (960, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let areas = root.split_evenly((panels.len().max(1), 1));
        for (area, (f, disruption, lines)) in areas.iter().zip(panels) {
            let end_secs = lines
                .iter()
                .flat_map(|(_, pts)| pts.last().map(|p| p.t))
                .fold(f.duration_seconds.p50, f64::max)
                .max(60.0);
            // Minutes for rolls under two hours, hours beyond.
            let (unit, unit_name) = if end_secs < 7200.0 {
                (60.0, "minutes from now")
            } else {
                (3600.0, "hours from now")
            };
            let end = end_secs / unit * 1.02;
            let top = lines
                .iter()
                .flat_map(|(_, pts)| pts.iter().map(|p| p.total))
                .fold(f.max_total_bound, u32::max);
            let ymax = f64::from(top) * 1.15 + 1.0;
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!("nodepool.{} — capacity over time (median run)", f.pool),
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(44)
                .build_cartesian_2d(0f64..end, 0f64..ymax)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            chart
                .configure_mesh()
                .x_desc(unit_name)
                .y_desc("nodes")
                .light_line_style(WHITE.mix(0.0))
                .draw()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let to = f
                .start
                .saturating_add(
                    SignedDuration::try_from_secs_f64(end * unit).unwrap_or(SignedDuration::MAX),
                )
                .unwrap_or(f.start);
            let windows = crate::policy::open_intervals(disruption, f.start, to);
            let hours = |t: jiff::Timestamp| t.duration_since(f.start).as_secs_f64() / unit;
            chart
                .draw_series(windows.iter().map(|(a, b)| {
                    Rectangle::new(
                        [(hours(*a), 0.0), (hours(*b), ymax)],
                        RGBColor(225, 236, 250).filled(),
                    )
                }))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label("disruption allowed")
                .legend(|(x, y)| {
                    Rectangle::new(
                        [(x, y - 5), (x + 14, y + 5)],
                        RGBColor(225, 236, 250).filled(),
                    )
                });
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (0.0, f64::from(f.floor)),
                        (end, f64::from(f.max_total_bound)),
                    ],
                    RGBColor(63, 154, 91).mix(0.15).filled(),
                )))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(format!(
                    "bounds: floor {} .. max total {}",
                    f.floor, f.max_total_bound
                ))
                .legend(|(x, y)| {
                    Rectangle::new(
                        [(x, y - 5), (x + 14, y + 5)],
                        RGBColor(63, 154, 91).mix(0.3).filled(),
                    )
                });
            for (i, (label, pts)) in lines.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                let (total_label, available_label) = if lines.len() == 1 {
                    ("total".to_string(), "available".to_string())
                } else {
                    (format!("{label}: total"), format!("{label}: available"))
                };
                chart
                    .draw_series(LineSeries::new(
                        steps(pts, end, unit, |p| p.total),
                        color.stroke_width(2),
                    ))
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .label(total_label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(DashedLineSeries::new(
                        steps(pts, end, unit, |p| p.available),
                        6,
                        4,
                        color.stroke_width(2),
                    ))
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .label(available_label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 6, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .draw()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(svg)
}
