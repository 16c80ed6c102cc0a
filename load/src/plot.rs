//! PNG plots of a report's time series with plotters' bitmap backend.
//!
//! Text is rendered with ab_glyph from DejaVu Sans embedded by the `dejavu` crate, so no system
//! font, fontconfig or freetype is needed. Four plots: connected bots, latency percentiles,
//! bytes per bot, server tick p99 (an empty chart with a note when nothing was scraped).

use std::path::PathBuf;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::report::Report;

const SIZE: (u32, u32) = (900, 480);

/// Registers the embedded font under plotters' `sans-serif` family once.
fn ensure_font() -> anyhow::Result<()> {
    static FONT: OnceLock<bool> = OnceLock::new();
    let ok = *FONT.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
    });
    anyhow::ensure!(ok, "embedded font failed to load");
    Ok(())
}

/// One line of a chart.
struct Line<'a> {
    name: &'a str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// Writes the plots; `path_for("-latency.png")` names each file. Returns the paths.
pub(crate) fn write_plots(
    report: &Report,
    path_for: &dyn Fn(&str) -> PathBuf,
) -> anyhow::Result<Vec<PathBuf>> {
    ensure_font()?;
    let s = &report.series;
    let pts = |f: &dyn Fn(&crate::report::SeriesPoint) -> Option<f64>| -> Vec<(f64, f64)> {
        s.iter().filter_map(|p| f(p).map(|v| (p.t_s, v))).collect()
    };
    let mut out = Vec::new();
    let charts: Vec<(&str, &str, &str, Vec<Line<'_>>)> = vec![
        (
            "-connected.png",
            "Connected bots",
            "bots",
            vec![Line {
                name: "connected",
                color: BLUE,
                points: pts(&|p| Some(p.connected as f64)),
            }],
        ),
        (
            "-latency.png",
            "Latency percentiles (per second)",
            "ms",
            vec![
                Line {
                    name: "move-to-seen p50",
                    color: GREEN,
                    points: pts(&|p| p.move_to_seen_p50_ms),
                },
                Line {
                    name: "move-to-seen p99",
                    color: RED,
                    points: pts(&|p| p.move_to_seen_p99_ms),
                },
                Line {
                    name: "snapshot interval p99",
                    color: BLUE,
                    points: pts(&|p| p.snapshot_interval_p99_ms),
                },
                Line {
                    name: "ping rtt p99",
                    color: MAGENTA,
                    points: pts(&|p| p.rtt_p99_ms),
                },
            ],
        ),
        (
            "-bytes.png",
            "WS payload bytes per bot per second",
            "bytes/s",
            vec![
                Line {
                    name: "down",
                    color: BLUE,
                    points: pts(&|p| Some(p.down_bytes_per_bot_per_s)),
                },
                Line {
                    name: "up",
                    color: RED,
                    points: pts(&|p| Some(p.up_bytes_per_bot_per_s)),
                },
            ],
        ),
        (
            "-tick.png",
            "Server room tick p99 (plaza_room_tick_duration_seconds)",
            "ms",
            vec![Line {
                name: "tick p99",
                color: RED,
                points: pts(&|p| p.server_tick_p99_ms),
            }],
        ),
    ];
    let x_max = s.last().map_or(1.0, |p| p.t_s.max(1.0));
    for (suffix, title, y_desc, lines) in charts {
        let path = path_for(suffix);
        line_chart(&path, title, y_desc, x_max, &lines)?;
        out.push(path);
    }
    Ok(out)
}

fn line_chart(
    path: &PathBuf,
    title: &str,
    y_desc: &str,
    x_max: f64,
    lines: &[Line<'_>],
) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .draw()?;
    let mut any = false;
    for line in lines {
        if line.points.is_empty() {
            continue;
        }
        any = true;
        let color = line.color;
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(line.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    if any {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    } else {
        root.draw(&Text::new(
            "no data (not measured in this run)",
            (SIZE.0 as i32 / 2 - 150, SIZE.1 as i32 / 2),
            ("sans-serif", 18),
        ))?;
    }
    root.present()?;
    Ok(())
}
