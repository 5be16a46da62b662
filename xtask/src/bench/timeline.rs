//! Where each machine's time goes: for every machine of a light run, when its container started,
//! when its bootstrap began and ended (read in the node afterwards: the modification times of
//! the bootstrap's first file and of its sentinel) and when its provider reported it, each in
//! seconds from the phase's start. The node shares the host's clock, so the four are comparable.
//!
//! The phases between them say who a late machine waited for: the engine (container started),
//! the provider starting the bootstrap, the bootstrap itself, or the provider's status write.
use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// One machine's moments, in seconds from the phase's start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineTimes {
    pub machine: String,
    pub container_started_s: f64,
    pub bootstrap_began_s: f64,
    pub bootstrap_ended_s: f64,
    pub reported_s: f64,
}

impl MachineTimes {
    /// The four phases' lengths: to the container's start, from it to the bootstrap's, the
    /// bootstrap, and from its end to the report.
    pub fn phases(&self) -> [f64; 4] {
        [
            self.container_started_s,
            self.bootstrap_began_s - self.container_started_s,
            self.bootstrap_ended_s - self.bootstrap_began_s,
            self.reported_s - self.bootstrap_ended_s,
        ]
    }
}

/// The phases' names, in order, as the table and the plot show them.
pub const PHASES: [&str; 4] = [
    "container started",
    "bootstrap began",
    "bootstrap ran",
    "reported",
];

/// The median machine's length of each phase, each phase's median taken on its own.
pub fn median_phases(machines: &[MachineTimes]) -> [f64; 4] {
    let mut out = [0.0; 4];
    for (i, slot) in out.iter_mut().enumerate() {
        let v: Vec<f64> = machines.iter().map(|m| m.phases()[i]).collect();
        *slot = super::report::percentile(&v, 50.0);
    }
    out
}

/// The runs' timelines side by side, one panel per run, machines ordered by when they were
/// reported (the last at the top), each a bar of its four phases.
pub fn plot(
    png: &Path,
    title: &str,
    runs: &[(&str, &[MachineTimes])],
) -> Result<(), Box<dyn std::error::Error>> {
    if runs.is_empty() {
        return Ok(());
    }
    let root = BitMapBackend::new(png, (420 * runs.len() as u32, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let max_t = runs
        .iter()
        .flat_map(|(_, m)| m.iter().map(|t| t.reported_s))
        .fold(1.0, f64::max)
        * 1.05;
    let colors = [RGBColor(190, 190, 190), YELLOW, BLUE, RED];
    for (panel, (subject, machines)) in root.split_evenly((1, runs.len())).iter().zip(runs) {
        let mut sorted: Vec<&MachineTimes> = machines.iter().collect();
        sorted.sort_by(|a, b| a.reported_s.total_cmp(&b.reported_s));
        let rows = sorted.len().max(1) as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(*subject, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..max_t, 0.0..rows)?;
        chart
            .configure_mesh()
            .x_desc("seconds from the first create")
            .y_desc("machine (by report)")
            .label_style(("sans-serif", 13))
            .draw()?;
        for (row, m) in sorted.iter().enumerate() {
            let y = row as f64;
            let edges = [
                0.0,
                m.container_started_s,
                m.bootstrap_began_s,
                m.bootstrap_ended_s,
                m.reported_s,
            ];
            for (i, color) in colors.iter().enumerate() {
                let (from, to) = (edges[i], edges[i + 1].max(edges[i]));
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(from, y + 0.1), (to, y + 0.9)],
                    color.filled(),
                )))?;
            }
        }
        for (name, color) in PHASES.iter().zip(colors) {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(started: f64, began: f64, ended: f64, reported: f64) -> MachineTimes {
        MachineTimes {
            machine: "m".into(),
            container_started_s: started,
            bootstrap_began_s: began,
            bootstrap_ended_s: ended,
            reported_s: reported,
        }
    }

    #[test]
    fn each_phase_is_the_gap_since_the_one_before_and_its_median_is_its_own() {
        assert_eq!(m(1.0, 1.5, 3.0, 3.25).phases(), [1.0, 0.5, 1.5, 0.25]);
        let machines = [
            m(1.0, 2.0, 3.0, 4.0),
            m(2.0, 2.5, 9.0, 9.5),
            m(3.0, 6.0, 7.0, 10.0),
        ];
        // Per phase: [1, 2, 3], [1, 0.5, 3], [1, 6.5, 1], [1, 0.5, 3].
        assert_eq!(median_phases(&machines), [2.0, 1.0, 1.0, 1.0]);
    }
}
