//! The soak's series (`tests/soak.rs` records them) and whether they stay flat after warm-up;
//! `xtask soak-plot` draws them.
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
}
