//! The soak's series (`tests/soak.rs` records them), whether they stay flat after warm-up, and
//! their plot.
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One reading of the manager process, every few seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the soak started.
    pub t_s: f64,
    /// DockerMachines that exist (the load at that moment).
    pub machines: u64,
    /// Resident set size (`VmRSS`).
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// OS threads.
    pub threads: u64,
    /// Live tokio tasks (`capd_runtime_tasks`).
    pub tasks: u64,
    /// Docker API calls so far.
    pub docker_calls: u64,
    /// Kubernetes API requests so far.
    pub kube_requests: u64,
    /// Objects the manager keeps state for in memory (`capd_tracked_objects`, all maps).
    pub tracked: u64,
}

/// One create → scale down → scale up → delete cycle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cycle {
    /// Seconds from creating the machines to all provisioned.
    pub up_s: f64,
    /// Seconds from deleting half of them to those gone.
    pub scale_down_s: f64,
    /// Seconds from creating them again to all provisioned.
    pub scale_up_s: f64,
    /// Seconds from deleting all to all gone.
    pub down_s: f64,
    /// The manager at rest with no machine left, at the end of the cycle.
    pub at_rest: Sample,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub machines: u64,
    pub minutes: f64,
    pub samples: Vec<Sample>,
    pub cycles: Vec<Cycle>,
}

/// A figure early and late in the soak, both after warm-up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drift {
    pub early: f64,
    pub late: f64,
}

impl Report {
    /// The figure at rest (no machine left) early and late in the soak: the medians of the
    /// first and the last third of the cycles, leaving out the first (warm-up: caches, pools and
    /// allocator arenas fill then). Medians, because pooled connections come and go by a few
    /// descriptors and tasks between any two readings; a leak moves the median. None with fewer
    /// than three cycles after warm-up.
    pub fn drift(&self, figure: impl Fn(&Sample) -> u64) -> Option<Drift> {
        let warm: Vec<f64> = self
            .cycles
            .iter()
            .skip(1)
            .map(|c| figure(&c.at_rest) as f64)
            .collect();
        if warm.len() < 3 {
            return None;
        }
        let third = warm.len() / 3;
        Some(Drift {
            early: median(&warm[..third]),
            late: median(&warm[warm.len() - third..]),
        })
    }

    /// Whether resources stayed flat after warm-up: RSS at rest within 10 % (or 2 MiB), file
    /// descriptors and tasks within 2, objects kept in memory not more at all. Returns what
    /// grew, if anything.
    pub fn growth(&self) -> Vec<String> {
        let mut grew = Vec::new();
        let mut check = |name: &str, figure: fn(&Sample) -> u64, slack: fn(f64) -> f64| {
            if let Some(d) = self.drift(figure)
                && d.late > d.early + slack(d.early)
            {
                grew.push(format!("{name}: {} -> {}", d.early, d.late));
            }
        };
        check("RSS KiB", |s| s.rss_kib, |e| (e * 0.10).max(2048.0));
        check("file descriptors", |s| s.fds, |_| 2.0);
        check("tokio tasks", |s| s.tasks, |_| 2.0);
        check("tracked objects", |s| s.tracked, |_| 0.0);
        grew
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

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

    fn at_rest(rss_kib: u64, fds: u64, tracked: u64) -> Cycle {
        Cycle {
            at_rest: Sample {
                rss_kib,
                fds,
                tasks: 20,
                tracked,
                ..Sample::default()
            },
            ..Cycle::default()
        }
    }

    fn report(cycles: Vec<Cycle>) -> Report {
        Report {
            cycles,
            ..Report::default()
        }
    }

    #[test]
    fn flat_after_warm_up_is_no_growth() {
        // The first cycle is warm-up; the others wobble by a few descriptors.
        let mut cycles = vec![at_rest(15_000, 20, 0)];
        for i in 0..9 {
            cycles.push(at_rest(21_000 + i * 50, 34 + i % 4, 2));
        }
        assert_eq!(report(cycles).growth(), Vec::<String>::new());
    }

    #[test]
    fn growth_names_the_figure_that_grew() {
        let cycles = (0..10)
            .map(|i| at_rest(20_000 + i * 2_000, 30 + i * 5, i))
            .collect();
        let grew = report(cycles).growth();
        assert_eq!(grew.len(), 3, "{grew:?}");
        assert!(grew[0].starts_with("RSS KiB: 24000 -> 36000"), "{grew:?}");
        assert!(
            grew[1].starts_with("file descriptors: 40 -> 70"),
            "{grew:?}"
        );
        assert!(grew[2].starts_with("tracked objects: 2 -> 8"), "{grew:?}");
    }

    #[test]
    fn too_few_cycles_cannot_show_drift() {
        let cycles = (0..3).map(|_| at_rest(20_000, 30, 0)).collect();
        assert_eq!(report(cycles).drift(|s| s.rss_kib), None);
    }

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
