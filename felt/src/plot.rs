//! The report's PNG: position error over time (left) and its CDF (right).

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

/// Writes the chart.
pub(crate) fn write(path: &Path, series: &[(f64, f64)], errors: &[f64]) -> anyhow::Result<()> {
    let _ =
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(620);
    let t_max = series.iter().map(|p| p.0).fold(1.0, f64::max);
    let e_max = errors.iter().copied().fold(0.05, f64::max).min(1.0);
    let mut c = ChartBuilder::on(&left)
        .caption("Rendered vs true position error", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..e_max)?;
    c.configure_mesh()
        .x_desc("local time, s")
        .y_desc("error, m")
        .draw()?;
    c.draw_series(
        series
            .iter()
            .map(|&(t, e)| Circle::new((t, e.min(e_max)), 1, BLUE.mix(0.3).filled())),
    )?;
    let mut sorted = errors.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len().max(1) as f64;
    let mut c = ChartBuilder::on(&right)
        .caption("CDF of the error", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(45)
        .build_cartesian_2d(0.0..e_max, 0.0..1.0)?;
    c.configure_mesh()
        .x_desc("error, m")
        .y_desc("fraction")
        .draw()?;
    c.draw_series(LineSeries::new(
        sorted
            .iter()
            .enumerate()
            .map(|(i, &e)| (e.min(e_max), (i + 1) as f64 / n)),
        RED,
    ))?;
    root.present()?;
    Ok(())
}
