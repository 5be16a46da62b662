//! The soak's plot: `xtask soak-plot` draws the series `tests/soak.rs` records (their types and
//! the flatness check are in `xtask_figures::soak`, shared with the test).
use std::path::Path;

pub use xtask_figures::soak::{Report, Sample};

/// Draw RSS, file descriptors, tasks and the machine count over time into a PNG.
pub fn plot(report: &Report, png: &Path, font: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let bytes: &'static [u8] = Box::leak(std::fs::read(font)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{}: not a usable font", font.display()))?;

    let root = BitMapBackend::new(png, (1200, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    title.draw_text(
        &format!(
            "capd-rs soak: {} minutes of create / scale / delete cycles with {} light machines",
            report.minutes.round(),
            report.machines
        ),
        &("sans-serif", 22).into_font().color(&BLACK),
        (20, 10),
    )?;
    let minutes = report.samples.last().map_or(1.0, |s| s.t_s / 60.0).max(1.0);
    type Series = (&'static str, fn(&Sample) -> f64, RGBColor);
    type Line = (&'static str, Vec<(f64, f64)>, RGBColor);
    let panels: [(&str, Vec<Series>); 4] = [
        (
            "manager RSS (MiB)",
            vec![("RSS", |s| s.rss_kib as f64 / 1024.0, BLUE)],
        ),
        (
            "open file descriptors",
            vec![("fds", |s| s.fds as f64, RED)],
        ),
        (
            "tokio tasks, OS threads, tracked objects",
            vec![
                ("tasks", |s| s.tasks as f64, GREEN),
                ("threads", |s| s.threads as f64, MAGENTA),
                ("tracked", |s| s.tracked as f64, BLACK),
            ],
        ),
        (
            "DockerMachines; Docker calls per second / 10",
            vec![("machines", |s| s.machines as f64, BLACK)],
        ),
    ];
    let areas = body.split_evenly((2, 2));
    for (i, ((caption, series), area)) in panels.iter().zip(areas.iter()).enumerate() {
        let mut lines: Vec<Line> = series
            .iter()
            .map(|(name, f, color)| {
                let points = report
                    .samples
                    .iter()
                    .map(|s| (s.t_s / 60.0, f(s)))
                    .collect();
                (*name, points, *color)
            })
            .collect();
        if i == 3 {
            lines.push(("Docker calls/s / 10", docker_rate(&report.samples), CYAN));
        }
        let top = lines
            .iter()
            .flat_map(|(_, p, _)| p.iter().map(|(_, y)| *y))
            .fold(1.0_f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(*caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..minutes, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .label_style(("sans-serif", 13))
            .draw()?;
        for (name, points, color) in lines {
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Docker calls per second between samples, divided by 10 to share an axis with the machines.
fn docker_rate(samples: &[Sample]) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .map(|w| {
            let dt = (w[1].t_s - w[0].t_s).max(0.001);
            let calls = w[1].docker_calls.saturating_sub(w[0].docker_calls) as f64;
            (w[1].t_s / 60.0, calls / dt / 10.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_rate_is_per_second_over_ten() {
        let s = |t_s, docker_calls| Sample {
            t_s,
            docker_calls,
            ..Sample::default()
        };
        assert_eq!(
            docker_rate(&[s(0.0, 0), s(5.0, 500)]),
            vec![(5.0 / 60.0, 10.0)]
        );
    }
}
