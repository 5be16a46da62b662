//! The bench's result: one `Run` per subject and N, the managers' image sizes, the ratios the
//! goals are stated in, a Markdown table and a PNG plot.
use std::{collections::BTreeMap, path::Path};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::{nodes::NodeShape, objects::LightLoad};

pub const CAPD_RS: &str = "capd-rs";
pub const UPSTREAM: &str = "upstream";
pub const FLOOR: &str = "floor";
/// The host processes that create, start and exec the containers (and the bench's counting
/// relay in front of them); every other one the bench counts is the API side.
const ENGINE_SIDE: [&str; 4] = [
    "dockerd",
    "containerd",
    "containerd-shim",
    super::docker_count::RELAY_THREAD,
];
/// One figure of a run, e.g. its last machine's time.
type Figure = fn(&Run) -> f64;

/// The plane's processes whose CPU a provider's API writes cost: the API server, etcd and the
/// CAPI managers that watch and answer them.
const PLANE_PROCESSES: [&str; 5] = [
    "kube-apiserver",
    "etcd",
    "capi-manager",
    "cabpk-manager",
    "kcp-manager",
];

/// N light machines, bootstrapped from a prepared Secret (the default workload).
pub const LIGHT: &str = "light";
/// Real Kubernetes nodes, control planes and workers ([`Run::node_shape`]), to all Nodes Ready.
pub const NODES: &str = "nodes";
/// N in-memory machines in one cluster (1 control plane + N-1 workers), to all Machines Running.
pub const IN_MEMORY: &str = "in-memory";
/// N in-memory machines as N/2 clusters of 1 + 1.
pub const IN_MEMORY_PAIRS: &str = "in-memory-pairs";

fn light() -> String {
    LIGHT.into()
}

/// One subject at one N. Times in seconds from the start of creating the DockerMachines (the
/// floor: of its first container create).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub subject: String,
    /// [`LIGHT`], [`NODES`] (for real nodes, "bootstrapped" below reads "Node Ready", and
    /// the DockerMachines are deleted through their Cluster), [`IN_MEMORY`] or
    /// [`IN_MEMORY_PAIRS`] ("bootstrapped" reads "Machine Running"; DevMachines, deleted through
    /// their Clusters).
    #[serde(default = "light")]
    pub workload: String,
    pub n: usize,
    /// Light loads spread over several Clusters, each in a namespace of its own: how many (none:
    /// one Cluster, the plain light load, as in every run recorded before). See
    /// [`Run::light_load`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<usize>,
    /// Real nodes: how many of the N were control planes, the rest workers (none: 1, the only
    /// shape recorded before there were others). See [`Run::node_shape`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_planes: Option<usize>,
    /// Which round of this load (0 when the bench ran one).
    #[serde(default)]
    pub round: usize,
    /// The subject whose phase ran just before this one on the host, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// All N bootstrapped.
    pub provision_s: f64,
    /// Per machine: when it was bootstrapped, median and 95th percentile.
    pub p50_s: f64,
    pub p95_s: f64,
    /// The first machine done (real nodes: the control plane's Node Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_s: Option<f64>,
    /// From deleting the DockerMachines (one request) to all gone (the floor: all removed).
    /// `None`: the deletion failed, and the run was kept for its other figures.
    #[serde(default)]
    pub delete_s: Option<f64>,
    /// The manager's peak RSS (VmHWM) by the end of the run, MiB.
    pub peak_rss_mib: Option<f64>,
    /// The manager's CPU seconds from creating the DockerMachines to all bootstrapped.
    pub provision_cpu_s: Option<f64>,
    /// The manager's CPU seconds from its start to the end of the deletion.
    pub total_cpu_s: Option<f64>,
    /// The manager's CPU use with the N machines provisioned and nothing changing, % of a core.
    pub idle_cpu_pct: Option<f64>,
    /// Kubernetes API requests from creating the DockerMachines to all bootstrapped.
    pub api_requests: Option<u64>,
    /// ... and during the idle window.
    pub idle_api_requests: Option<u64>,
    /// The provisioning window's requests by verb and resource ("patch dockermachines/status"),
    /// from capd-rs's own counter: what each is for. Empty for upstream (no such counter).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub api_requests_by: BTreeMap<String, u64>,
    /// The provisioning window's requests (no watches) as the API server's audit log has them,
    /// by verb and resource: one instrument for every subject (see `audit`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_requests_by: BTreeMap<String, u64>,
    /// Their sum, and the idle window's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_audit_requests: Option<u64>,
    /// Failed reconciles (controller-runtime's counter, which both managers export) from
    /// creating the DockerMachines to all bootstrapped: work a subject repeats, beside its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_errors: Option<u64>,
    /// Docker Engine calls (counted on the wire) from creating the DockerMachines to all
    /// bootstrapped, by operation.
    pub docker_calls: BTreeMap<String, u64>,
    /// ... during the idle window.
    pub idle_docker_calls: u64,
    /// ... during the deletion.
    pub delete_docker_calls: u64,
    /// CPU seconds of the host's processes (engine, plane, CAPI, the manager) from creating the
    /// DockerMachines to all bootstrapped, by command: where the two cores went.
    #[serde(default)]
    pub host_cpu_s: BTreeMap<String, f64>,
    /// Light loads: each machine's container start, bootstrap and report (see `timeline`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<super::timeline::MachineTimes>,
}

impl Run {
    /// A run's provisioning times, from when each machine was done: all, median, 95th
    /// percentile.
    pub fn timed(subject: &str, n: usize, done: &BTreeMap<String, std::time::Duration>) -> Self {
        let secs: Vec<f64> = done
            .values()
            .map(std::time::Duration::as_secs_f64)
            .collect();
        Run {
            subject: subject.into(),
            workload: light(),
            n,
            provision_s: secs.iter().copied().fold(0.0, f64::max),
            first_s: secs.iter().copied().reduce(f64::min),
            p50_s: percentile(&secs, 50.0),
            p95_s: percentile(&secs, 95.0),
            ..Default::default()
        }
    }

    /// The light load this run is a row of: its N and its Clusters.
    pub fn light_load(&self) -> LightLoad {
        LightLoad {
            n: self.n,
            clusters: self.clusters.unwrap_or(1),
        }
    }

    /// The real-node shape of this run (meaningful for [`NODES`] runs only).
    pub fn node_shape(&self) -> NodeShape {
        let control_planes = self.control_planes.unwrap_or(1);
        NodeShape {
            control_planes,
            workers: self.n.saturating_sub(control_planes),
        }
    }

    pub fn docker_calls_total(&self) -> u64 {
        self.docker_calls.values().sum()
    }
    pub fn per_machine(&self, count: u64) -> f64 {
        count as f64 / self.n.max(1) as f64
    }

    /// API requests while provisioning: as the API server counted them when the run has that
    /// count (one instrument for every subject), else as the manager counted its own.
    pub fn requests(&self) -> Option<u64> {
        self.audit_requests.or(self.api_requests)
    }

    /// The same by verb and resource, and which instrument counted them.
    pub fn requests_by(&self) -> (&BTreeMap<String, u64>, &'static str) {
        if self.audit_requests_by.is_empty() {
            (&self.api_requests_by, "the manager's own counter")
        } else {
            (
                &self.audit_requests_by,
                "the API server's audit log, no watches",
            )
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub date: String,
    pub host: String,
    /// The command that produced it.
    pub command: String,
    /// The code measured: the last commit that changed it (`hack/bench.sh` names the paths),
    /// ending in `-dirty` when it had uncommitted changes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub code: String,
    pub upstream_version: String,
    pub idle_window_s: f64,
    /// Manager image sizes in bytes, by subject.
    pub images: BTreeMap<String, u64>,
    pub runs: Vec<Run>,
    /// When the run was taken up again from its partial result, each time (`--resume`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<String>,
}

/// The rounds' median with their range, as the tables print it: "1.23 (1.10–1.40)" at 2 digits.
fn median_range(v: &[f64], digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.digits$} ({lo:.digits$}–{hi:.digits$})", median(v))
}

fn is_in_memory(r: &Run) -> bool {
    r.workload == IN_MEMORY || r.workload == IN_MEMORY_PAIRS
}

/// A table cell for a deletion time: one decimal, or "failed" for a run kept without it.
fn deleted(delete_s: Option<f64>) -> String {
    delete_s.map_or("failed".into(), |d| format!("{d:.1}"))
}

/// Nearest-rank percentile of unsorted values.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// True median (the mean of the two middle values for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A goal as a ratio: measured value, the bound, whether it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Ratio {
    pub what: String,
    /// With several rounds, the median of the per-round ratios (each round's pair divided,
    /// never one subject's median round by the other's).
    pub value: f64,
    pub bound: f64,
    /// The best ratio any provider could reach in this run, where the floor sets one (the
    /// floor's own time against upstream's): a bound below it cannot be met here.
    pub reachable: Option<f64>,
    /// The lowest and highest per-round ratio, and how many rounds were paired (one: no spread).
    pub spread: Option<(f64, f64, usize)>,
}

impl Ratio {
    pub fn holds(&self) -> bool {
        self.value <= self.bound
    }

    /// A ratio of the per-round ratios `rounds`: their median, and their range when there
    /// are several.
    fn paired(what: String, rounds: &[f64], bound: f64) -> Self {
        let spread = (rounds.len() > 1).then(|| {
            let lo = rounds.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rounds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo, hi, rounds.len())
        });
        Ratio {
            what,
            value: median(rounds),
            bound,
            reachable: None,
            spread,
        }
    }

    /// The spread as the goals table shows it: "min–max (k rounds)", or "one round".
    pub fn spread_text(&self) -> String {
        match self.spread {
            Some((lo, hi, k)) => format!("{lo:.2}–{hi:.2} ({k} rounds)"),
            None => "one round".into(),
        }
    }

    /// "met", "missed", or why missing it says nothing about the provider.
    pub fn verdict(&self) -> String {
        match self.reachable {
            _ if self.holds() => "met".into(),
            Some(best) if best > self.bound => {
                format!("missed; unreachable in this run: the floor itself is {best:.2}× upstream")
            }
            _ => "missed".into(),
        }
    }
}

impl Report {
    /// The light-workload run of `subject` at `load` (a bare N: in one Cluster): of several
    /// rounds, the median one by time to provision (the lower of the two middle ones for an even
    /// count).
    pub fn run(&self, subject: &str, load: impl Into<LightLoad>) -> Option<&Run> {
        let rounds = self.rounds(subject, load);
        rounds.get(rounds.len().saturating_sub(1) / 2).copied()
    }

    /// `f(a) / f(b)` for every round in which both `a` and `b` ran the light load `load`, in
    /// round order: the pairs a ratio is computed from.
    pub fn paired(
        &self,
        a: &str,
        b: &str,
        load: impl Into<LightLoad>,
        f: impl Fn(&Run) -> f64,
    ) -> Vec<f64> {
        self.paired_with(a, b, load.into(), |ra, rb| {
            let (x, y) = (f(ra), f(rb));
            if y > 0.0 { x / y } else { f64::INFINITY }
        })
    }

    /// `f` of each round of `a` at `load` and the same round of `b`, in round order.
    fn paired_with(
        &self,
        a: &str,
        b: &str,
        load: LightLoad,
        f: impl Fn(&Run, &Run) -> f64,
    ) -> Vec<f64> {
        let of = |s: &str| -> BTreeMap<usize, &Run> {
            self.light()
                .filter(|r| r.subject == s && r.light_load() == load)
                .map(|r| (r.round, r))
                .collect()
        };
        let (a, b) = (of(a), of(b));
        a.iter()
            .filter_map(|(round, ra)| b.get(round).map(|rb| f(ra, rb)))
            .collect()
    }

    /// The host's cores, as the run recorded them ("2 cores, ...").
    fn cores(&self) -> Option<f64> {
        let n: f64 = self.host.split_whitespace().next()?.parse().ok()?;
        (n > 0.0).then_some(n)
    }

    /// Each provider's time over the floor's in the same round, beside the host CPU it used
    /// beyond the floor's spread over the host's cores, and the API side's share of that. On a
    /// host whose cores the engine's creates keep busy, CPU spent elsewhere is time the engine
    /// waits: where the two columns agree, that is what the gap is.
    fn floor_gap_markdown(&self) -> String {
        let Some(cores) = self.cores() else {
            return String::new();
        };
        let cpu = |r: &Run, api_only: bool| -> f64 {
            r.host_cpu_s
                .iter()
                .filter(|(k, _)| !api_only || !ENGINE_SIDE.contains(&k.as_str()))
                .map(|(_, v)| v)
                .sum()
        };
        let mut rows = String::new();
        for n in self.loads() {
            for subject in [CAPD_RS, UPSTREAM] {
                let time =
                    self.paired_with(subject, FLOOR, n, |a, f| a.provision_s - f.provision_s);
                if time.is_empty() {
                    continue;
                }
                let host = self.paired_with(subject, FLOOR, n, |a, f| {
                    (cpu(a, false) - cpu(f, false)) / cores
                });
                let api = self.paired_with(subject, FLOOR, n, |a, f| {
                    (cpu(a, true) - cpu(f, true)) / cores
                });
                rows.push_str(&format!(
                    "| {n} | {subject} | {} | {} | {} | {} |\n",
                    time.len(),
                    median_range(&time, 1),
                    median_range(&host, 1),
                    median_range(&api, 1)
                ));
            }
        }
        if rows.is_empty() {
            return rows;
        }
        format!(
            "\nTime over the floor's in the same round, and the host CPU used beyond the floor's divided by the host's {cores} cores (all processes; the API side alone: kube-apiserver, etcd, the CAPI managers and the provider), seconds, median of the rounds (min–max):\n\n\
             | N | subject | rounds | time over the floor | host CPU over the floor / cores | API side's / cores |\n\
             |---:|---|---:|---:|---:|---:|\n{rows}"
        )
    }

    /// Every round of `subject` at `load`, fastest first.
    pub fn rounds(&self, subject: &str, load: impl Into<LightLoad>) -> Vec<&Run> {
        let load = load.into();
        let mut v: Vec<&Run> = self
            .light()
            .filter(|r| r.subject == subject && r.light_load() == load)
            .collect();
        v.sort_by(|a, b| a.provision_s.total_cmp(&b.provision_s));
        v
    }

    fn light(&self) -> impl Iterator<Item = &Run> {
        self.runs
            .iter()
            .filter(|r| r.workload != NODES && !is_in_memory(r))
    }

    /// The Docker-backed runs (light and real nodes), which the manager-wide goals compare.
    fn docker_backed(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| !is_in_memory(r))
    }

    /// The real-node run of `subject` in `shape`.
    pub fn nodes_run(&self, subject: &str, shape: NodeShape) -> Option<&Run> {
        self.runs
            .iter()
            .find(|r| r.subject == subject && r.workload == NODES && r.node_shape() == shape)
    }

    /// The real-node shapes run, in the order first run.
    fn node_shapes(&self) -> Vec<NodeShape> {
        let mut shapes: Vec<NodeShape> = Vec::new();
        for r in self.runs.iter().filter(|r| r.workload == NODES) {
            if !shapes.contains(&r.node_shape()) {
                shapes.push(r.node_shape());
            }
        }
        shapes
    }

    /// Every light load run, one row each: the one-Cluster loads by N, then each spread (by its
    /// Clusters) by N, so that N machines in one Cluster and over ten are rows of their own.
    fn loads(&self) -> Vec<LightLoad> {
        let mut loads: Vec<LightLoad> = self.light().map(Run::light_load).collect();
        loads.sort_unstable_by_key(|l| (l.clusters, l.n));
        loads.dedup();
        loads
    }

    /// The loads of each Cluster count, by N: the series a line over N is fitted or drawn
    /// through (N machines in one Cluster and over ten are not points of one line).
    fn series(&self) -> Vec<Vec<LightLoad>> {
        let mut out: Vec<Vec<LightLoad>> = Vec::new();
        for load in self.loads() {
            match out.last_mut() {
                Some(s) if s[0].clusters == load.clusters => s.push(load),
                _ => out.push(vec![load]),
            }
        }
        out
    }

    /// The load the sections about one load show (CPU by process, requests by verb, the
    /// timeline): the largest N of the first series, the one-Cluster load when it ran.
    fn headline(&self) -> Option<LightLoad> {
        self.series().first().and_then(|s| s.last()).copied()
    }

    /// The issue's goals, for the N this report has.
    pub fn ratios(&self) -> Vec<Ratio> {
        let mut out = Vec::new();
        let ratio = |what: String, a: f64, b: f64, bound: f64| Ratio {
            what,
            value: if b > 0.0 { a / b } else { f64::INFINITY },
            bound,
            reachable: None,
            spread: None,
        };
        // The last machine and the median one, each round's pair divided: within 1.15x the
        // floor from N=10 up, within 0.55x upstream from N=50 up.
        let machines: [(&str, Figure); 2] = [
            ("provision time", |r| r.provision_s),
            ("median machine", |r| r.p50_s),
        ];
        // A spread load is held to the same goals as one Cluster of the same N.
        for load in self.loads().into_iter().filter(|l| l.n >= 10) {
            let n = load.n;
            for (what, f) in machines {
                let vs_upstream = self.paired(CAPD_RS, UPSTREAM, load, f);
                if n >= 50 && !vs_upstream.is_empty() {
                    let floor = self.paired(FLOOR, UPSTREAM, load, f);
                    out.push(Ratio {
                        reachable: (!floor.is_empty()).then(|| median(&floor)),
                        ..Ratio::paired(format!("{what} vs upstream, N={load}"), &vs_upstream, 0.55)
                    });
                }
                let vs_floor = self.paired(CAPD_RS, FLOOR, load, f);
                if !vs_floor.is_empty() {
                    out.push(Ratio::paired(
                        format!("{what} vs floor, N={load}"),
                        &vs_floor,
                        1.15,
                    ));
                }
            }
            // What the provider's writes cost the plane: the API server, etcd and the CAPI
            // managers that answer them, per machine (the same N, so the totals' ratio).
            let plane = |r: &Run| {
                PLANE_PROCESSES
                    .iter()
                    .map(|p| r.host_cpu_s.get(*p).copied().unwrap_or(0.0))
                    .sum::<f64>()
            };
            let vs_upstream = self.paired(CAPD_RS, UPSTREAM, load, plane);
            if n >= 50 && !vs_upstream.is_empty() {
                out.push(Ratio::paired(
                    format!("API server + etcd + CAPI CPU vs upstream, N={load}"),
                    &vs_upstream,
                    0.3,
                ));
            }
            // Not a ratio: requests per machine, at most four at every N.
            let per_machine: Vec<f64> = self
                .light()
                .filter(|r| r.subject == CAPD_RS && r.light_load() == load)
                .filter_map(|r| r.requests().map(|a| r.per_machine(a)))
                .collect();
            if !per_machine.is_empty() {
                out.push(Ratio::paired(
                    format!("API requests per machine (a count), N={load}"),
                    &per_machine,
                    4.0,
                ));
            }
        }
        let peak = |s: &str, f: fn(&Run) -> Option<f64>| {
            self.docker_backed()
                .filter(|r| r.subject == s)
                .filter_map(f)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        };
        if let (Some(a), Some(b)) = (
            peak(CAPD_RS, |r| r.peak_rss_mib),
            peak(UPSTREAM, |r| r.peak_rss_mib),
        ) {
            out.push(ratio(
                "peak RSS vs upstream (largest N)".into(),
                a,
                b,
                1.0 / 3.0,
            ));
        }
        // None without a run (a bench of in-memory loads only), not a sum of nothing.
        let cpu = |s: &str| -> Option<f64> {
            let runs: Vec<&Run> = self.docker_backed().filter(|r| r.subject == s).collect();
            if runs.is_empty() {
                return None;
            }
            runs.iter().map(|r| r.total_cpu_s).sum()
        };
        if let (Some(a), Some(b)) = (cpu(CAPD_RS), cpu(UPSTREAM)) {
            out.push(ratio(
                "CPU seconds vs upstream (all N, start to deleted)".into(),
                a,
                b,
                1.0 / 3.0,
            ));
        }
        if let (Some(a), Some(b)) = (self.images.get(CAPD_RS), self.images.get(UPSTREAM)) {
            out.push(ratio(
                "manager image vs upstream".into(),
                *a as f64,
                *b as f64,
                1.0 / 3.0,
            ));
        }
        // Flat: requests per machine at the largest N against the smallest N of at least 10,
        // within each series (the same Clusters).
        for series in self.series() {
            let ours: Vec<&Run> = series
                .into_iter()
                .filter(|l| l.n >= 10)
                .filter_map(|l| self.run(CAPD_RS, l))
                .collect();
            if let (Some(lo), Some(hi)) = (ours.first(), ours.last())
                && let (Some(a), Some(b)) = (hi.requests(), lo.requests())
            {
                out.push(ratio(
                    format!(
                        "API requests per machine, N={} vs N={}",
                        hi.light_load(),
                        lo.light_load()
                    ),
                    hi.per_machine(a),
                    lo.per_machine(b),
                    1.1,
                ));
            }
        }
        out.extend(self.in_memory_ratios());
        out
    }

    /// The in-memory runs of `workload` (one per subject and N: the in-memory loads run one
    /// round), by N.
    fn in_memory_runs(&self, workload: &str, subject: &str) -> Vec<&Run> {
        let mut v: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| r.workload == workload && r.subject == subject)
            .collect();
        v.sort_by_key(|r| r.n);
        v
    }

    /// The in-memory backend's goals, per shape and N: manager CPU and peak RSS per machine at
    /// most 1/3 of upstream's, at least twice its machines per second (time at most half), and
    /// API requests per machine flat from the smallest N to the largest.
    fn in_memory_ratios(&self) -> Vec<Ratio> {
        let mut out = Vec::new();
        let ratio = |what: String, a: f64, b: f64, bound: f64| Ratio {
            value: if b > 0.0 { a / b } else { f64::INFINITY },
            what,
            bound,
            reachable: None,
            spread: None,
        };
        for workload in [IN_MEMORY, IN_MEMORY_PAIRS] {
            let ours = self.in_memory_runs(workload, CAPD_RS);
            for r in &ours {
                let n = r.n;
                let Some(up) = self
                    .in_memory_runs(workload, UPSTREAM)
                    .into_iter()
                    .find(|u| u.n == n)
                else {
                    continue;
                };
                out.push(ratio(
                    format!("{workload} N={n}: time to all Running vs upstream"),
                    r.provision_s,
                    up.provision_s,
                    0.5,
                ));
                if let (Some(a), Some(b)) = (r.provision_cpu_s, up.provision_cpu_s) {
                    out.push(ratio(
                        format!("{workload} N={n}: manager CPU per machine vs upstream"),
                        a,
                        b,
                        1.0 / 3.0,
                    ));
                }
                if let (Some(a), Some(b)) = (r.peak_rss_mib, up.peak_rss_mib) {
                    out.push(ratio(
                        format!("{workload} N={n}: peak RSS per machine vs upstream"),
                        a,
                        b,
                        1.0 / 3.0,
                    ));
                }
            }
            if let (Some(lo), Some(hi)) = (ours.first(), ours.last())
                && hi.n > lo.n
                && let (Some(a), Some(b)) = (hi.requests(), lo.requests())
            {
                out.push(ratio(
                    format!(
                        "{workload}: API requests per machine, N={} vs N={}",
                        hi.n, lo.n
                    ),
                    hi.per_machine(a),
                    lo.per_machine(b),
                    1.1,
                ));
            }
        }
        out
    }

    /// What each manager's API requests while provisioning were, per machine, at the
    /// [`Report::headline`] load: the most frequent first.
    fn requests_by_markdown(&self) -> String {
        let Some(n) = self.headline() else {
            return String::new();
        };
        let mut out = String::new();
        for subject in [CAPD_RS, UPSTREAM] {
            let Some(r) = self.run(subject, n) else {
                continue;
            };
            let (by, counted_by) = r.requests_by();
            if by.is_empty() {
                continue;
            }
            let mut by: Vec<(&String, &u64)> = by.iter().collect();
            by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let parts: Vec<String> = by
                .iter()
                .map(|(what, count)| format!("{what} {:.2}", r.per_machine(**count)))
                .collect();
            out.push_str(&format!(
                "\n{subject}'s API requests per machine while N={n} were provisioned ({counted_by}), by verb and resource: {}.\n",
                parts.join(", ")
            ));
        }
        out
    }

    /// The light runs of the [`Report::headline`] load that have a timeline (each subject's
    /// median round).
    fn timelines(&self) -> Vec<&Run> {
        let Some(n) = self.headline() else {
            return Vec::new();
        };
        [FLOOR, CAPD_RS, UPSTREAM]
            .into_iter()
            .filter_map(|subject| self.run(subject, n))
            .filter(|r| !r.timeline.is_empty())
            .collect()
    }

    /// Where the machines' time went at the [`Report::headline`] load: each phase's median, and
    /// the phases of the last machine reported.
    fn timeline_markdown(&self) -> String {
        let runs = self.timelines();
        let Some(first) = runs.first() else {
            return String::new();
        };
        let mut s = format!(
            "\nWhere each machine's time went at N={} (seconds; from the first create to its container started, its bootstrap began, the bootstrap ran, the provider reported it), the median of each phase and the last machine's:\n\n\
             | subject | {} | last machine |\n|---|---:|---:|---:|---:|---|\n",
            first.light_load(),
            super::timeline::PHASES.join(" | ")
        );
        for r in runs {
            let med = super::timeline::median_phases(&r.timeline);
            let last = r
                .timeline
                .iter()
                .max_by(|a, b| a.reported_s.total_cmp(&b.reported_s))
                .map(|m| {
                    let p = m.phases();
                    format!("{:.1} / {:.1} / {:.1} / {:.1}", p[0], p[1], p[2], p[3])
                })
                .unwrap_or_default();
            s.push_str(&format!(
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {last} |\n",
                r.subject, med[0], med[1], med[2], med[3]
            ));
        }
        s
    }

    /// The in-memory table: one row per shape, N and subject.
    fn in_memory_markdown(&self) -> String {
        let opt =
            |v: Option<f64>, prec: usize| v.map_or("–".to_string(), |v| format!("{v:.prec$}"));
        let mut rows = String::new();
        for workload in [IN_MEMORY, IN_MEMORY_PAIRS] {
            for subject in [CAPD_RS, UPSTREAM] {
                for r in self.in_memory_runs(workload, subject) {
                    let cpu = |name: &str| r.host_cpu_s.get(name).copied().unwrap_or(0.0);
                    rows.push_str(&format!(
                        "| {workload} | {} | {subject} | {:.1} | {:.1} | {} | {} | {} | {} | {:.1} / {:.1} |\n",
                        r.n,
                        r.provision_s,
                        r.n as f64 / r.provision_s.max(f64::MIN_POSITIVE),
                        deleted(r.delete_s),
                        opt(r.provision_cpu_s.map(|c| 1000.0 * c / r.n as f64), 1),
                        opt(r.peak_rss_mib.map(|m| 1024.0 * m / r.n as f64), 1),
                        opt(r.requests().map(|a| r.per_machine(a)), 1),
                        cpu("kube-apiserver"),
                        cpu("etcd"),
                    ));
                }
            }
        }
        if rows.is_empty() {
            return rows;
        }
        format!(
            "\nIn-memory machines (no container), driven by the real CAPI core, CABPK and KCP, to all Machines Running:\n\n\
             | shape | N | subject | all Running s | machines / s | Clusters deleted s | manager CPU ms / machine | peak RSS KiB / machine | API requests / machine | kube-apiserver / etcd CPU s |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n{rows}"
        )
    }

    /// The table of `docs/performance.md`: one row per light load and subject (N in one
    /// Cluster, and N over K Clusters, each a row of its own).
    pub fn markdown(&self) -> String {
        // The light table, when there are light runs (a bench of other loads only has none).
        let mut s = if self.loads().is_empty() {
            String::new()
        } else {
            String::from(
                "| N | subject | provisioned s | p50 / p95 s | deleted s | peak RSS MiB | CPU s (provision / total) | idle CPU % | API requests / machine | Docker calls / machine |\n\
                 |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            )
        };
        let opt =
            |v: Option<f64>, prec: usize| v.map_or("–".to_string(), |v| format!("{v:.prec$}"));
        for n in self.loads() {
            for subject in [CAPD_RS, UPSTREAM, FLOOR] {
                let Some(r) = self.run(subject, n) else {
                    continue;
                };
                s.push_str(&format!(
                    "| {n} | {subject} | {:.1} | {:.1} / {:.1} | {} | {} | {} / {} | {} | {} | {:.1} |\n",
                    r.provision_s,
                    r.p50_s,
                    r.p95_s,
                    deleted(r.delete_s),
                    opt(r.peak_rss_mib, 1),
                    opt(r.provision_cpu_s, 2),
                    opt(r.total_cpu_s, 2),
                    opt(r.idle_cpu_pct, 2),
                    opt(r.requests().map(|a| r.per_machine(a)), 1),
                    r.per_machine(r.docker_calls_total()),
                ));
            }
        }
        if let Some(n) = self.headline() {
            let runs: Vec<&Run> = [CAPD_RS, UPSTREAM, FLOOR]
                .iter()
                .filter_map(|s| self.run(s, n))
                .filter(|r| !r.host_cpu_s.is_empty())
                .collect();
            if !runs.is_empty() {
                let mut names: Vec<&String> =
                    runs.iter().flat_map(|r| r.host_cpu_s.keys()).collect();
                names.sort();
                names.dedup();
                s.push_str(&format!(
                    "\nCPU seconds by process while N={n} machines were provisioned:\n\n| process |"
                ));
                for r in &runs {
                    s.push_str(&format!(" {} |", r.subject));
                }
                s.push_str("\n|---|");
                s.push_str(&"---:|".repeat(runs.len()));
                s.push('\n');
                for name in names {
                    s.push_str(&format!("| {name} |"));
                    for r in &runs {
                        s.push_str(&format!(
                            " {:.1} |",
                            r.host_cpu_s.get(name).copied().unwrap_or(0.0)
                        ));
                    }
                    s.push('\n');
                }
            }
        }
        s.push_str(&self.requests_by_markdown());
        s.push_str(&self.timeline_markdown());
        s.push_str(&self.paired_markdown());
        s.push_str(&self.floor_gap_markdown());
        s.push_str(&self.rss_markdown());
        s.push_str(&self.errors_markdown());
        s.push_str(&self.rounds_markdown());
        s.push_str(&self.in_memory_markdown());
        s.push_str(&self.nodes_markdown());
        if !self.images.is_empty() {
            s.push_str("\nManager images: ");
            let parts: Vec<String> = self
                .images
                .iter()
                .map(|(k, v)| format!("{k} {:.1} MB", *v as f64 / 1e6))
                .collect();
            s.push_str(&parts.join(", "));
            s.push('\n');
        }
        let ratios = self.ratios();
        if !ratios.is_empty() {
            s.push_str(
                "\n| goal | ratio (median of the rounds' own) | min–max | bound | |\n|---|---:|---:|---:|---|\n",
            );
            for r in ratios {
                s.push_str(&format!(
                    "| {} | {:.2} | {} | {:.2} | {} |\n",
                    r.what,
                    r.value,
                    r.spread_text(),
                    r.bound,
                    r.verdict()
                ));
            }
        }
        s
    }

    /// The real-node table, one row per shape and subject, and capd-rs's time over upstream's
    /// for each shape both ran. No goal: the time is the nodes' (systemd, kubeadm, the
    /// kubelet), mostly.
    fn nodes_markdown(&self) -> String {
        let opt =
            |v: Option<f64>, prec: usize| v.map_or("–".to_string(), |v| format!("{v:.prec$}"));
        let (mut rows, mut ratios) = (String::new(), String::new());
        for shape in self.node_shapes() {
            if let (Some(ours), Some(up)) = (
                self.nodes_run(CAPD_RS, shape),
                self.nodes_run(UPSTREAM, shape),
            ) {
                ratios.push_str(&format!(
                    "\nReal nodes {shape}, all Ready: capd-rs {:.2}× upstream's time.\n",
                    ours.provision_s / up.provision_s.max(f64::MIN_POSITIVE)
                ));
            }
            for r in [CAPD_RS, UPSTREAM]
                .iter()
                .filter_map(|s| self.nodes_run(s, shape))
            {
                rows.push_str(&format!(
                    "| {shape} | {} | {:.1} | {} / {:.1} | {} | {} | {} / {} | {} | {} |\n",
                    r.subject,
                    r.provision_s,
                    opt(r.first_s, 1),
                    r.p50_s,
                    deleted(r.delete_s),
                    opt(r.peak_rss_mib, 1),
                    opt(r.provision_cpu_s, 2),
                    opt(r.total_cpu_s, 2),
                    r.requests().map_or("–".into(), |a| a.to_string()),
                    r.docker_calls_total(),
                ));
            }
        }
        if rows.is_empty() {
            return rows;
        }
        format!(
            "{ratios}\nReal nodes, control planes + workers (`clusterctl generate cluster` from the default template):\n\n\
             | shape | subject | all Nodes Ready s | first / median Node Ready s | Cluster deleted s | peak RSS MiB | CPU s (provision / total) | API requests | Docker calls |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|\n{rows}"
        )
    }

    /// capd-rs against upstream and the floor, round by round: the last, median and 95th
    /// percentile machine, each the median of the rounds' own ratios with their range. The last
    /// machine alone hides how the others finish. Empty without a pair.
    fn paired_markdown(&self) -> String {
        let mut rows = String::new();
        for n in self.loads() {
            for other in [UPSTREAM, FLOOR] {
                let cell = |f: fn(&Run) -> f64| {
                    let v = self.paired(CAPD_RS, other, n, f);
                    (!v.is_empty()).then(|| median_range(&v, 2))
                };
                let (Some(last), Some(p50), Some(p95)) = (
                    cell(|r| r.provision_s),
                    cell(|r| r.p50_s),
                    cell(|r| r.p95_s),
                ) else {
                    continue;
                };
                let k = self.paired(CAPD_RS, other, n, |r| r.provision_s).len();
                rows.push_str(&format!(
                    "| {n} | capd-rs / {other} | {k} | {last} | {p50} | {p95} |\n"
                ));
            }
        }
        if rows.is_empty() {
            return rows;
        }
        format!(
            "\ncapd-rs's time over the other subject's in the same round, median of the rounds (min–max):\n\n\
             | N | ratio | rounds | last machine | median machine | 95th percentile machine |\n\
             |---:|---|---:|---:|---:|---:|\n{rows}"
        )
    }

    /// Peak RSS as a line over N, per subject (least squares over its median rounds of the
    /// first series, the one-Cluster loads when they ran): the fixed baseline and what each
    /// machine adds. One N: nothing to fit.
    pub fn rss_lines(&self) -> Vec<(String, f64, f64)> {
        let mut out = Vec::new();
        let series = self.series().into_iter().next().unwrap_or_default();
        for subject in [CAPD_RS, UPSTREAM] {
            let pts: Vec<(f64, f64)> = series
                .iter()
                .filter_map(|n| self.run(subject, *n))
                .filter_map(|r| r.peak_rss_mib.map(|m| (r.n as f64, m)))
                .collect();
            if pts.len() < 2 {
                continue;
            }
            let k = pts.len() as f64;
            let (mx, my) = (
                pts.iter().map(|p| p.0).sum::<f64>() / k,
                pts.iter().map(|p| p.1).sum::<f64>() / k,
            );
            let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
            if sxx == 0.0 {
                continue;
            }
            let slope = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx;
            out.push((subject.to_string(), my - slope * mx, slope));
        }
        out
    }

    /// Failed reconciles while provisioning, per N and subject (median round): a subject that
    /// retries errors pays for them in its time and its requests.
    fn errors_markdown(&self) -> String {
        let mut parts = Vec::new();
        for n in self.loads() {
            let of: Vec<String> = [CAPD_RS, UPSTREAM]
                .iter()
                .filter_map(|s| {
                    let r = self.run(s, n)?;
                    Some(format!("{s} {}", r.reconcile_errors?))
                })
                .collect();
            if !of.is_empty() {
                parts.push(format!("N={n}: {}", of.join(", ")));
            }
        }
        if parts.is_empty() {
            return String::new();
        }
        format!(
            "\nFailed reconciles while provisioning (controller_runtime_reconcile_errors_total): {}.\n",
            parts.join("; ")
        )
    }

    fn rss_markdown(&self) -> String {
        let lines = self.rss_lines();
        if lines.is_empty() {
            return String::new();
        }
        let mut s = String::from("\nPeak RSS as baseline + slope (least squares over N):");
        for (subject, base, slope) in &lines {
            s.push_str(&format!(
                " {subject} {base:.1} MiB + {:.0} KiB per machine;",
                slope * 1024.0
            ));
        }
        s.pop();
        s.push_str(".\n");
        s
    }

    /// With several rounds: every round, in the order run, with the phase before it and what
    /// the engine spent. Empty with one round.
    fn rounds_markdown(&self) -> String {
        if !self.light().any(|r| r.round > 0) {
            return String::new();
        }
        let mut s = String::from(
            "\nEvery round (the tables above show each subject's median round), in the order run:\n\n\
             | N | round | subject | after | provisioned s | dockerd CPU s | host CPU s |\n\
             |---:|---:|---|---|---:|---:|---:|\n",
        );
        for r in self.light() {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} |\n",
                r.light_load(),
                r.round + 1,
                r.subject,
                r.after.as_deref().unwrap_or("–"),
                r.provision_s,
                r.host_cpu_s.get("dockerd").copied().unwrap_or(0.0),
                r.host_cpu_s.values().sum::<f64>(),
            ));
        }
        s
    }

    /// Time to all provisioned against N, one line per subject (its median round) and series:
    /// a spread load's line thinner, with triangles.
    pub fn plot(&self, png: &Path, font: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let font_bytes = std::fs::read(font).map_err(|e| format!("{}: {e}", font.display()))?;
        let font_bytes: &'static [u8] = Box::leak(font_bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, font_bytes)
            .map_err(|_| "cannot load the font")?;
        let root = BitMapBackend::new(png, (900, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let max_n = self.loads().iter().map(|l| l.n).max().unwrap_or(1) as f64;
        let max_t = self.light().map(|r| r.provision_s).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Time from creating N DockerMachines to all bootstrapped",
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..max_n * 1.05, 0.0..max_t)?;
        chart
            .configure_mesh()
            .x_desc("N machines")
            .y_desc("seconds")
            .label_style(("sans-serif", 15))
            .draw()?;
        for series in self.series() {
            let clusters = series[0].clusters;
            let width = if clusters == 1 { 2 } else { 1 };
            for (subject, color) in [(CAPD_RS, BLUE), (UPSTREAM, RED), (FLOOR, BLACK)] {
                let pts: Vec<(f64, f64)> = series
                    .iter()
                    .filter_map(|n| self.run(subject, *n))
                    .map(|r| (r.n as f64, r.provision_s))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let label = if clusters == 1 {
                    subject.to_string()
                } else {
                    format!("{subject}, over {clusters} clusters")
                };
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
                    });
                if clusters == 1 {
                    chart
                        .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
                } else {
                    chart.draw_series(
                        pts.into_iter()
                            .map(|p| TriangleMarker::new(p, 5, color.filled())),
                    )?;
                }
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()?;
        root.present()?;
        let runs = self.timelines();
        if let Some(first) = runs.first() {
            let panels: Vec<(&str, &[super::timeline::MachineTimes])> = runs
                .iter()
                .map(|r| (r.subject.as_str(), r.timeline.as_slice()))
                .collect();
            super::timeline::plot(
                &timeline_png(png),
                &format!("Each machine's time at N={}", first.light_load()),
                &panels,
            )?;
        }
        Ok(())
    }
}

/// Where the timeline plot of the bench plot `png` goes: beside it, `<name>-timeline.png`.
pub fn timeline_png(png: &Path) -> std::path::PathBuf {
    let stem = png
        .file_stem()
        .map_or("bench".into(), |s| s.to_string_lossy());
    png.with_file_name(format!("{stem}-timeline.png"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(subject: &str, n: usize, provision_s: f64, rss: Option<f64>, api: Option<u64>) -> Run {
        Run {
            subject: subject.into(),
            n,
            provision_s,
            peak_rss_mib: rss,
            total_cpu_s: rss.map(|r| r / 10.0),
            api_requests: api,
            ..Default::default()
        }
    }

    /// A map of `pairs`, keyed by name (requests by verb, CPU by process).
    fn by<T: Copy>(pairs: &[(&str, T)]) -> BTreeMap<String, T> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// The goal named `what` among `r`.
    fn goal<'a>(r: &'a [Ratio], what: &str) -> &'a Ratio {
        r.iter()
            .find(|x| x.what == what)
            .unwrap_or_else(|| panic!("{what} in {r:?}"))
    }

    /// The table's home is `docs/performance.md` (it left the README): a change of its columns
    /// must reach that page too, or the page shows a table this task no longer prints.
    #[test]
    fn the_docs_page_carries_this_table() {
        let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/performance.md");
        let page = std::fs::read_to_string(page).expect("docs/performance.md");
        let md = Report {
            runs: vec![run(CAPD_RS, 10, 1.0, None, None)],
            ..Default::default()
        }
        .markdown();
        let header: Vec<&str> = md.lines().take(2).collect();
        let header = header.join("\n");
        assert!(header.starts_with("| N | subject |"), "{md}");
        assert!(
            page.contains(&header),
            "docs/performance.md lacks:\n{header}"
        );
    }

    #[test]
    fn the_gap_to_the_floor_is_set_beside_the_host_cpu_used_beyond_the_floors_per_core() {
        let round = |subject: &str, round: usize, provision_s: f64, host: &[(&str, f64)]| Run {
            round,
            host_cpu_s: by(host),
            ..run(subject, 100, provision_s, None, None)
        };
        let mut report = Report {
            host: "2 cores, Docker Engine 26".into(),
            runs: vec![
                round(
                    FLOOR,
                    0,
                    20.0,
                    &[("dockerd", 16.0), ("kube-apiserver", 1.0)],
                ),
                round(
                    CAPD_RS,
                    0,
                    27.0,
                    &[("dockerd", 18.0), ("kube-apiserver", 9.0), ("manager", 1.0)],
                ),
                round(
                    CAPD_RS,
                    1,
                    25.0,
                    &[("dockerd", 16.0), ("kube-apiserver", 7.0), ("manager", 1.0)],
                ),
                round(
                    FLOOR,
                    1,
                    21.0,
                    &[("dockerd", 17.0), ("kube-apiserver", 1.0)],
                ),
            ],
            ..Default::default()
        };
        let md = report.markdown();
        // Round 1: 7 s later, (28 - 17) / 2 = 5.5 s of host CPU, (10 - 1) / 2 = 4.5 of it the
        // API side's; round 2: 4 s, (24 - 18) / 2 = 3 s, (8 - 1) / 2 = 3.5 s.
        assert!(
            md.contains("| 100 | capd-rs | 2 | 5.5 (4.0–7.0) | 4.2 (3.0–5.5) | 4.0 (3.5–4.5) |"),
            "{md}"
        );
        // Without the host's cores nothing can be divided: no table.
        report.host = String::new();
        assert!(!report.markdown().contains("host CPU over the floor"));
    }

    #[test]
    fn each_managers_requests_are_broken_down_per_machine_at_the_largest_n() {
        let report = Report {
            runs: vec![
                Run {
                    api_requests_by: by(&[("get secrets", 10)]),
                    ..run(CAPD_RS, 10, 1.0, None, Some(10))
                },
                Run {
                    api_requests_by: by(&[
                        ("get secrets", 100),
                        ("patch dockermachines/status", 200),
                    ]),
                    ..run(CAPD_RS, 100, 1.0, None, Some(300))
                },
                Run {
                    audit_requests_by: by(&[("get secrets", 100), ("patch dockermachines", 150)]),
                    audit_requests: Some(250),
                    ..run(UPSTREAM, 100, 1.0, None, Some(900))
                },
            ],
            ..Default::default()
        };
        let md = report.markdown();
        assert!(
            md.contains("capd-rs's API requests per machine while N=100 were provisioned (the manager's own counter), by verb and resource: patch dockermachines/status 2.00, get secrets 1.00."),
            "{md}"
        );
        assert!(
            md.contains("upstream's API requests per machine while N=100 were provisioned (the API server's audit log, no watches), by verb and resource: patch dockermachines 1.50, get secrets 1.00."),
            "{md}"
        );
        assert!(
            md.contains("| 100 | upstream |")
                && md
                    .lines()
                    .any(|l| l.starts_with("| 100 | upstream |") && l.contains("| 2.5 |")),
            "the audit count, where there is one, is the table's: {md}"
        );
        let none = Report {
            runs: vec![run(CAPD_RS, 10, 1.0, None, Some(10))],
            ..Default::default()
        };
        assert!(
            !none.markdown().contains("by verb and resource"),
            "nothing to break down"
        );
    }

    #[test]
    fn the_timeline_table_gives_each_phases_median_and_the_last_machine() {
        use super::super::timeline::MachineTimes;
        let t = |name: &str, started, began, ended, reported| MachineTimes {
            machine: name.into(),
            container_started_s: started,
            bootstrap_began_s: began,
            bootstrap_ended_s: ended,
            reported_s: reported,
        };
        let report = Report {
            runs: vec![
                Run {
                    timeline: vec![t("a", 1.0, 1.5, 2.0, 2.5), t("b", 2.0, 3.0, 4.0, 6.0)],
                    ..run(CAPD_RS, 2, 6.0, None, None)
                },
                run(UPSTREAM, 2, 9.0, None, None),
            ],
            ..Default::default()
        };
        let md = report.markdown();
        assert!(md.contains("Where each machine's time went at N=2"), "{md}");
        assert!(
            md.contains("| capd-rs | 1.00 | 0.50 | 0.50 | 0.50 | 2.0 / 1.0 / 1.0 / 2.0 |"),
            "{md}"
        );
        assert!(!md.contains("| upstream | 0."), "no timeline, no row: {md}");
        assert_eq!(
            timeline_png(Path::new("/x/bench.png")),
            Path::new("/x/bench-timeline.png")
        );
    }

    #[test]
    fn a_spread_load_is_a_row_and_a_goal_of_its_own_beside_one_cluster_of_the_same_n() {
        let spread = |subject: &str, n: usize, secs: f64, api: Option<u64>| Run {
            clusters: Some(10),
            api_requests_by: api
                .map(|a| BTreeMap::from([("get secrets".to_string(), a)]))
                .unwrap_or_default(),
            ..run(subject, n, secs, None, api)
        };
        let report = Report {
            runs: vec![
                Run {
                    api_requests_by: BTreeMap::from([("get secrets".to_string(), 300)]),
                    ..run(CAPD_RS, 100, 30.0, None, Some(300))
                },
                run(UPSTREAM, 100, 60.0, None, None),
                run(FLOOR, 100, 25.0, None, None),
                spread(CAPD_RS, 100, 40.0, Some(400)),
                spread(UPSTREAM, 100, 50.0, None),
                spread(FLOOR, 100, 20.0, None),
                spread(CAPD_RS, 200, 90.0, Some(1000)),
            ],
            ..Default::default()
        };
        let over_10 = LightLoad {
            n: 100,
            clusters: 10,
        };
        assert_eq!(report.run(CAPD_RS, 100).unwrap().provision_s, 30.0);
        assert_eq!(report.run(CAPD_RS, over_10).unwrap().provision_s, 40.0);
        assert_eq!(
            report.rounds(CAPD_RS, 100).len(),
            1,
            "not a round of the spread"
        );
        assert_eq!(
            report.paired(CAPD_RS, UPSTREAM, 100, |r| r.provision_s),
            [0.5]
        );
        assert_eq!(
            report.paired(CAPD_RS, UPSTREAM, over_10, |r| r.provision_s),
            [0.8]
        );

        // The light goals hold the spread load too, each under its own name.
        let r = report.ratios();
        assert_eq!(goal(&r, "provision time vs upstream, N=100").value, 0.5);
        let vs_upstream = goal(&r, "provision time vs upstream, N=100 over 10 clusters");
        assert_eq!(vs_upstream.value, 0.8);
        assert_eq!(
            vs_upstream.reachable,
            Some(0.4),
            "the spread floor's 20 / 50"
        );
        assert_eq!(vs_upstream.verdict(), "missed");
        assert_eq!(
            goal(&r, "provision time vs floor, N=100 over 10 clusters").value,
            2.0
        );
        assert_eq!(
            goal(
                &r,
                "API requests per machine (a count), N=100 over 10 clusters"
            )
            .value,
            4.0
        );
        // Flat within the spread series, not from one Cluster's N=100 to ten's N=200.
        let flat = goal(
            &r,
            "API requests per machine, N=200 over 10 clusters vs N=100 over 10 clusters",
        );
        assert_eq!(flat.value, 5.0 / 4.0);
        assert!(
            r.iter()
                .all(|g| g.what != "API requests per machine, N=200 over 10 clusters vs N=100"),
            "{r:?}"
        );

        let md = report.markdown();
        let light_rows: Vec<&str> = md
            .lines()
            .take_while(|l| !l.is_empty())
            .filter(|l| l.starts_with("| 1") || l.starts_with("| 2"))
            .collect();
        assert_eq!(
            light_rows
                .iter()
                .map(|l| l.split(" | ").take(3).collect::<Vec<_>>().join(" | "))
                .collect::<Vec<_>>(),
            [
                "| 100 | capd-rs | 30.0",
                "| 100 | upstream | 60.0",
                "| 100 | floor | 25.0",
                "| 100 over 10 clusters | capd-rs | 40.0",
                "| 100 over 10 clusters | upstream | 50.0",
                "| 100 over 10 clusters | floor | 20.0",
                "| 200 over 10 clusters | capd-rs | 90.0",
            ],
            "{md}"
        );
        assert!(
            md.contains("| 100 over 10 clusters | capd-rs / upstream | 1 | 0.80 (0.80–0.80) |"),
            "{md}"
        );
        assert!(
            md.contains("| 100 | capd-rs / upstream | 1 | 0.50 (0.50–0.50) |"),
            "{md}"
        );
        assert!(
            md.contains("capd-rs's API requests per machine while N=100 were provisioned (the manager's own counter), by verb and resource: get secrets 3.00."),
            "the one-Cluster load is the headline: {md}"
        );
        assert!(!md.contains("clusters were provisioned"), "{md}");
    }

    #[test]
    fn a_run_without_the_new_fields_is_one_cluster_or_one_plus_two_nodes() {
        // As bench.json held runs before spread loads and node shapes.
        let old = r#"{"subject": "capd-rs", "workload": "nodes", "n": 3, "provision_s": 48.0,
            "p50_s": 40.0, "p95_s": 48.0, "delete_s": 10.0, "peak_rss_mib": 16.0,
            "provision_cpu_s": null, "total_cpu_s": null, "idle_cpu_pct": null,
            "api_requests": null, "idle_api_requests": null, "docker_calls": {},
            "idle_docker_calls": 0, "delete_docker_calls": 0}"#;
        let old: Run = serde_json::from_str(old).unwrap();
        assert_eq!(old.node_shape(), NodeShape::default());
        assert_eq!(old.light_load(), LightLoad::one(3));
        let plain = serde_json::to_value(run(CAPD_RS, 10, 1.0, None, None)).unwrap();
        assert!(
            plain.get("clusters").is_none() && plain.get("control_planes").is_none(),
            "a plain run is written as before: {plain}"
        );
        let spread = Run {
            clusters: Some(10),
            ..run(CAPD_RS, 100, 1.0, None, None)
        };
        let back: Run = serde_json::from_value(serde_json::to_value(&spread).unwrap()).unwrap();
        assert_eq!(
            back.light_load(),
            LightLoad {
                n: 100,
                clusters: 10
            }
        );
    }

    #[test]
    fn a_run_whose_deletion_failed_keeps_its_row_and_says_so() {
        let failed = Run {
            delete_s: None,
            ..run(CAPD_RS, 10, 5.0, Some(20.0), Some(40))
        };
        let kept = Run {
            delete_s: Some(2.34),
            ..run(UPSTREAM, 10, 9.0, Some(60.0), Some(100))
        };
        let md = Report {
            runs: vec![failed.clone(), kept],
            ..Default::default()
        }
        .markdown();
        assert!(
            md.contains("| 10 | capd-rs | 5.0 | 0.0 / 0.0 | failed |"),
            "{md}"
        );
        assert!(
            md.contains("| 10 | upstream | 9.0 | 0.0 / 0.0 | 2.3 |"),
            "{md}"
        );
        let written = serde_json::to_value(&failed).unwrap();
        assert!(written["delete_s"].is_null(), "{written}");
        let back: Run = serde_json::from_value(written).unwrap();
        assert_eq!(back.delete_s, None);
    }

    #[test]
    fn each_real_node_shape_is_a_row_of_its_own() {
        let nodes = |subject: &str, control_planes: Option<usize>, n: usize, secs: f64| Run {
            workload: NODES.into(),
            control_planes,
            ..run(subject, n, secs, None, None)
        };
        let report = Report {
            runs: vec![
                // Recorded before there were shapes: 1 + 2.
                nodes(CAPD_RS, None, 3, 48.0),
                nodes(UPSTREAM, Some(1), 3, 60.0),
                nodes(CAPD_RS, Some(3), 8, 150.0),
                nodes(UPSTREAM, Some(3), 8, 200.0),
            ],
            ..Default::default()
        };
        let three_five = NodeShape {
            control_planes: 3,
            workers: 5,
        };
        assert_eq!(report.node_shapes(), [NodeShape::default(), three_five]);
        assert_eq!(
            report
                .nodes_run(CAPD_RS, NodeShape::default())
                .unwrap()
                .provision_s,
            48.0
        );
        assert_eq!(
            report.nodes_run(UPSTREAM, three_five).unwrap().provision_s,
            200.0
        );
        let md = report.markdown();
        let rows: Vec<String> = md
            .lines()
            .filter(|l| l.starts_with("| 1+2 |") || l.starts_with("| 3+5 |"))
            .map(|l| l.split(" | ").take(3).collect::<Vec<_>>().join(" | "))
            .collect();
        assert_eq!(
            rows,
            [
                "| 1+2 | capd-rs | 48.0",
                "| 1+2 | upstream | 60.0",
                "| 3+5 | capd-rs | 150.0",
                "| 3+5 | upstream | 200.0",
            ],
            "{md}"
        );
        assert!(
            md.contains("Real nodes 1+2, all Ready: capd-rs 0.80× upstream's time."),
            "{md}"
        );
        assert!(
            md.contains("Real nodes 3+5, all Ready: capd-rs 0.75× upstream's time."),
            "{md}"
        );
        assert!(!md.contains("| N | subject |"), "no light table: {md}");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 10.0);
        assert_eq!(percentile(&v, 95.0), 19.0);
        assert_eq!(percentile(&[3.0], 95.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn of_several_rounds_the_median_one_counts_and_every_round_is_listed() {
        let round = |subject: &str, round: usize, provision_s: f64, after: Option<&str>| Run {
            round,
            after: after.map(Into::into),
            ..run(subject, 10, provision_s, None, None)
        };
        let report = Report {
            runs: vec![
                round(FLOOR, 0, 3.0, None),
                round(CAPD_RS, 0, 9.0, Some(FLOOR)),
                round(CAPD_RS, 1, 4.0, Some(FLOOR)),
                round(FLOOR, 1, 3.4, Some(CAPD_RS)),
                round(CAPD_RS, 2, 5.0, Some(FLOOR)),
                round(FLOOR, 2, 3.2, Some(CAPD_RS)),
            ],
            ..Default::default()
        };
        assert_eq!(report.run(CAPD_RS, 10).unwrap().provision_s, 5.0);
        assert_eq!(report.run(FLOOR, 10).unwrap().provision_s, 3.2);
        let vs_floor = report.ratios();
        assert_eq!(vs_floor[0].what, "provision time vs floor, N=10");
        assert!((vs_floor[0].value - 5.0 / 3.2).abs() < 1e-9);
        let md = report.markdown();
        assert!(md.contains("| 10 | 2 | floor | capd-rs | 3.4 |"), "{md}");
        assert!(md.contains("| 10 | 1 | floor | – | 3.0 |"), "{md}");
        // One round: no rounds table.
        let single = Report {
            runs: vec![run(FLOOR, 10, 3.0, None, None)],
            ..Default::default()
        };
        assert!(!single.markdown().contains("Every round"));
    }

    #[test]
    fn ratios_divide_each_rounds_pair_not_one_median_by_another() {
        let at = |subject: &str, round: usize, secs: f64, p50: f64| Run {
            round,
            p50_s: p50,
            p95_s: secs,
            ..run(subject, 50, secs, None, None)
        };
        let report = Report {
            runs: vec![
                at(CAPD_RS, 0, 4.0, 3.0),
                at(UPSTREAM, 0, 10.0, 6.0),
                at(CAPD_RS, 1, 6.0, 5.0),
                at(UPSTREAM, 1, 10.0, 6.0),
                at(CAPD_RS, 2, 5.0, 4.0),
                at(UPSTREAM, 2, 8.0, 8.0),
                // A round upstream did not finish pairs with nothing.
                at(CAPD_RS, 3, 1.0, 1.0),
            ],
            ..Default::default()
        };
        assert_eq!(
            report.paired(CAPD_RS, UPSTREAM, 50, |r| r.provision_s),
            [0.4, 0.6, 0.625]
        );
        let r = &report.ratios()[0];
        assert_eq!(r.what, "provision time vs upstream, N=50");
        // The medians' ratio (5 / 10) would say the goal is met.
        assert_eq!(r.value, 0.6);
        assert_eq!(r.verdict(), "missed");
        assert_eq!(r.spread_text(), "0.40–0.62 (3 rounds)");
        let md = report.markdown();
        assert!(
            md.contains(
                "| provision time vs upstream, N=50 | 0.60 | 0.40–0.62 (3 rounds) | 0.55 | missed |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 50 | capd-rs / upstream | 3 | 0.60 (0.40–0.62) | 0.50 (0.50–0.83) | 0.60 (0.40–0.62) |"),
            "{md}"
        );
        assert_eq!(median(&[1.0, 4.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn the_median_machine_and_the_plane_cpu_are_goals_of_their_own() {
        let at = |subject: &str, p50: f64, plane: f64| Run {
            p50_s: p50,
            host_cpu_s: BTreeMap::from([
                ("kube-apiserver".to_string(), 0.75 * plane),
                ("etcd".to_string(), 0.25 * plane),
                ("dockerd".to_string(), 100.0),
            ]),
            ..run(subject, 50, 10.0, None, None)
        };
        let report = Report {
            runs: vec![
                at(CAPD_RS, 4.0, 2.0),
                at(UPSTREAM, 8.0, 10.0),
                at(FLOOR, 3.0, 0.0),
            ],
            ..Default::default()
        };
        let r = report.ratios();
        let get = |w: &str| goal(&r, w);
        let plane = get("API server + etcd + CAPI CPU vs upstream, N=50");
        assert!(
            (plane.value - 0.2).abs() < 1e-9,
            "dockerd is not the plane's"
        );
        assert!(plane.holds());
        assert!(get("median machine vs upstream, N=50").holds(), "0.5");
        assert!(!get("median machine vs floor, N=50").holds(), "1.33");
    }

    #[test]
    fn peak_rss_is_split_into_baseline_and_per_machine_slope() {
        let report = Report {
            runs: vec![
                run(CAPD_RS, 10, 1.0, Some(20.0), None),
                run(CAPD_RS, 100, 2.0, Some(29.0), None),
                run(UPSTREAM, 10, 1.0, Some(70.0), None),
                run(UPSTREAM, 100, 2.0, Some(88.0), None),
            ],
            ..Default::default()
        };
        assert!(
            !report.markdown().contains("Failed reconciles"),
            "none counted"
        );
        let mut counted = report.clone();
        for r in &mut counted.runs {
            r.reconcile_errors = Some(if r.subject == UPSTREAM { 240 } else { 0 });
        }
        assert!(
            counted.markdown().contains(
                "Failed reconciles while provisioning (controller_runtime_reconcile_errors_total): N=10: capd-rs 0, upstream 240; N=100: capd-rs 0, upstream 240."
            ),
            "{}",
            counted.markdown()
        );
        let lines = report.rss_lines();
        let (subject, base, slope) = &lines[0];
        assert_eq!(subject, CAPD_RS);
        assert!(
            (base - 19.0).abs() < 1e-9 && (slope - 0.1).abs() < 1e-9,
            "{lines:?}"
        );
        assert!((lines[1].2 - 0.2).abs() < 1e-9, "{lines:?}");
        assert!(
            report.markdown().contains(
                "capd-rs 19.0 MiB + 102 KiB per machine; upstream 68.0 MiB + 205 KiB per machine."
            ),
            "{}",
            report.markdown()
        );
    }

    #[test]
    fn a_bound_below_the_floor_is_called_unreachable() {
        let report = Report {
            runs: vec![
                run(CAPD_RS, 100, 34.0, None, None),
                run(UPSTREAM, 100, 50.0, None, None),
                run(FLOOR, 100, 30.0, None, None),
            ],
            ..Default::default()
        };
        let r = report.ratios();
        let vs_upstream = r.iter().find(|x| x.what.contains("vs upstream")).unwrap();
        assert_eq!(
            vs_upstream.verdict(),
            "missed; unreachable in this run: the floor itself is 0.60× upstream"
        );
        let vs_floor = r.iter().find(|x| x.what.contains("vs floor")).unwrap();
        assert_eq!(vs_floor.verdict(), "met", "34 / 30 = 1.13");
    }

    #[test]
    fn ratios_compare_like_with_like_and_say_which_goal_is_missed() {
        let report = Report {
            images: BTreeMap::from([(CAPD_RS.into(), 10), (UPSTREAM.into(), 60)]),
            runs: vec![
                run(CAPD_RS, 10, 4.0, Some(20.0), Some(100)),
                run(UPSTREAM, 10, 10.0, Some(90.0), Some(500)),
                run(FLOOR, 10, 2.0, None, None),
                run(CAPD_RS, 50, 12.0, Some(30.0), Some(600)),
                run(UPSTREAM, 50, 20.0, Some(120.0), Some(2500)),
            ],
            ..Default::default()
        };
        let r = report.ratios();
        let get = |w: &str| goal(&r, w);
        assert!(
            r.iter().all(|x| !x.what.contains("vs upstream, N=10")),
            "no goal against upstream below N=50: {r:?}"
        );
        assert!(
            !get("provision time vs upstream, N=50").holds(),
            "0.6 > 0.55"
        );
        assert!(!get("provision time vs floor, N=10").holds(), "2.0 > 1.15");
        let count = get("API requests per machine (a count), N=10");
        assert_eq!(count.value, 10.0);
        assert!(!count.holds(), "10 > 4");
        assert_eq!(get("provision time vs upstream, N=50").verdict(), "missed");
        assert_eq!(get("peak RSS vs upstream (largest N)").value, 0.25);
        assert!(get("manager image vs upstream").holds());
        // 12 per machine at N=50 against 10 at N=10.
        assert!((get("API requests per machine, N=50 vs N=10").value - 1.2).abs() < 1e-9);
        assert!(report.markdown().contains("| 50 | capd-rs | 12.0 |"));

        // A real-node run has its own table and stays out of the light workload's figures.
        let mut with_nodes = report.clone();
        with_nodes.runs.push(Run {
            workload: NODES.into(),
            first_s: Some(30.0),
            p50_s: 40.0,
            ..run(CAPD_RS, 3, 48.0, Some(16.0), Some(90))
        });
        with_nodes.runs.push(Run {
            workload: NODES.into(),
            ..run(UPSTREAM, 3, 60.0, Some(70.0), Some(300))
        });
        assert_eq!(with_nodes.run(CAPD_RS, 3), None);
        let md = with_nodes.markdown();
        assert!(md.contains("| capd-rs | 48.0 | 30.0 / 40.0 |"), "{md}");
        assert!(md.contains("capd-rs 0.80× upstream's time"), "{md}");
        assert!(
            !md.contains("| 3 | capd-rs"),
            "not in the light table: {md}"
        );
    }

    #[test]
    fn in_memory_runs_have_goals_and_a_table_of_their_own() {
        let mem = |subject: &str, n: usize, secs: f64, cpu: f64, rss: f64, api: u64| Run {
            workload: IN_MEMORY.into(),
            provision_cpu_s: Some(cpu),
            ..run(subject, n, secs, Some(rss), Some(api))
        };
        let report = Report {
            runs: vec![
                run(CAPD_RS, 10, 5.0, Some(20.0), Some(100)),
                run(UPSTREAM, 10, 10.0, Some(60.0), Some(300)),
                mem(CAPD_RS, 100, 10.0, 2.0, 30.0, 1_000),
                mem(UPSTREAM, 100, 30.0, 9.0, 120.0, 5_000),
                mem(CAPD_RS, 1000, 50.0, 20.0, 90.0, 12_000),
                mem(UPSTREAM, 1000, 80.0, 50.0, 200.0, 60_000),
            ],
            ..Default::default()
        };
        let ratios = report.ratios();
        let find = |what: &str| {
            ratios
                .iter()
                .find(|r| r.what == what)
                .unwrap_or_else(|| panic!("no ratio {what}: {ratios:?}"))
        };
        // Light goals read light runs only: an in-memory manager's RSS is not the light one's.
        assert!((find("peak RSS vs upstream (largest N)").value - 20.0 / 60.0).abs() < 1e-9);
        let time = find("in-memory N=1000: time to all Running vs upstream");
        assert!((time.value - 50.0 / 80.0).abs() < 1e-9);
        assert!(!time.holds(), "not twice upstream's machines per second");
        assert!(find("in-memory N=100: manager CPU per machine vs upstream").holds());
        assert!(find("in-memory N=100: peak RSS per machine vs upstream").holds());
        let flat = find("in-memory: API requests per machine, N=1000 vs N=100");
        assert!((flat.value - 12.0 / 10.0).abs() < 1e-9);
        assert!(!flat.holds(), "12 per machine against 10 is not flat");

        let md = report.markdown();
        assert!(
            md.contains("| in-memory | 1000 | capd-rs | 50.0 | 20.0 |"),
            "{md}"
        );
        assert!(
            !md.contains("\n| 1000 | capd-rs"),
            "not in the light table: {md}"
        );
    }
}
