//! The manager under test as a process: started with the flags its subject needs, read from
//! `/proc` (peak RSS, CPU seconds) and from its own `/metrics` (Kubernetes API requests, failed
//! reconciles), and stopped with SIGTERM.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

use super::docker_count::RELAY_THREAD;

/// A counter on `/metrics` and the labels its samples are summed by (their values, joined by a
/// space, name a sum).
#[derive(Clone, Copy, Debug)]
pub struct RequestMetric {
    pub name: &'static str,
    pub labels: &'static [&'static str],
}

/// Kubernetes API requests as client-go counts them (one per response, by HTTP method). Both
/// managers export it (capd-rs beside its own per-verb series), so both are read with one
/// instrument.
pub const CLIENT_GO_REQUESTS: RequestMetric = RequestMetric {
    name: "rest_client_requests_total",
    labels: &["method"],
};
/// capd-rs's own count of its Kubernetes API requests, by verb and resource ("patch
/// dockermachines/status"): what each request of a machine is for. Upstream has no such series.
pub const OWN_REQUESTS: RequestMetric = RequestMetric {
    name: "capd_kube_api_requests_total",
    labels: &["verb", "resource"],
};
/// Failed reconciles as controller-runtime counts them, by controller; capd-rs exports the same.
pub const RECONCILE_ERRORS: RequestMetric = RequestMetric {
    name: "controller_runtime_reconcile_errors_total",
    labels: &["controller"],
};

/// What the bench reads off a manager's `/metrics`, each counter so far.
pub struct Counters {
    /// [`CLIENT_GO_REQUESTS`], by method.
    pub requests: BTreeMap<String, u64>,
    /// [`OWN_REQUESTS`], by verb and resource (empty for upstream).
    pub own_requests: BTreeMap<String, u64>,
    /// [`RECONCILE_ERRORS`], by controller.
    pub errors: BTreeMap<String, u64>,
}

pub struct Manager {
    child: Child,
    pub pid: u32,
    metrics_url: String,
    pub log: PathBuf,
    /// Who it is at the API server, when it runs as a ServiceAccount of its own.
    pub username: Option<String>,
}

impl Manager {
    /// Starts `bin` with `args` (stdout and stderr to `log`) and waits up to a minute for
    /// `ready_url` to answer 200.
    pub async fn start(
        bin: &Path,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        ready_url: String,
        metrics_url: String,
    ) -> Result<Self> {
        let out =
            std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let pid = child.id().context("manager pid")?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "{} exited at start ({status}); see {}",
                    bin.display(),
                    log.display()
                );
            }
            if get(&ready_url).await.is_ok() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{ready_url} not ready after 60 s; see {}", log.display());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Self {
            child,
            pid,
            metrics_url,
            log,
            username: None,
        })
    }

    /// The manager, known to run as `identity`.
    pub fn as_user(self, identity: Option<&super::audit::Identity>) -> Self {
        Self {
            username: identity.map(|i| i.username.clone()),
            ..self
        }
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kubernetes API requests and failed reconciles so far.
    pub async fn counters(&self) -> Result<Counters> {
        let text = get(&self.metrics_url).await?;
        Ok(Counters {
            requests: sum_by(&text, CLIENT_GO_REQUESTS),
            own_requests: sum_by(&text, OWN_REQUESTS),
            errors: sum_by(&text, RECONCILE_ERRORS),
        })
    }

    pub fn usage(&self) -> Usage {
        Usage::of(self.pid)
    }

    /// SIGTERM, then SIGKILL after 30 s.
    pub async fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A process's peak resident set and CPU time so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub peak_rss_mib: f64,
    pub cpu_s: f64,
}

impl Usage {
    pub fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        Self {
            peak_rss_mib: vm_hwm_kib(&status) as f64 / 1024.0,
            cpu_s: cpu_ticks(&stat) as f64 / CLOCK_TICKS,
        }
    }
}

/// `USER_HZ`, the unit of the times in `/proc/<pid>/stat`: 100 on every Linux ABI this runs on.
const CLOCK_TICKS: f64 = 100.0;

fn vm_hwm_kib(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// utime + stime of a `/proc/<pid>/stat` line (the process alone).
fn cpu_ticks(stat: &str) -> u64 {
    stat_times(stat).map_or(0, |(_, t)| t[0] + t[1])
}

/// The host processes whose CPU the bench accounts for, by command name (`comm`, at most 15
/// characters): the engine, the plane, the CAPI managers and the manager under test.
pub const HOST_COMMANDS: [&str; 10] = [
    "dockerd",
    "containerd",
    "containerd-shim",
    "kube-apiserver",
    "etcd",
    "kube-controller",
    "capi-manager",
    "cabpk-manager",
    "kcp-manager",
    "manager",
];

/// CPU seconds used so far by the processes named in [`HOST_COMMANDS`], summed by name
/// (children that exited and were reaped, runc and exec'd commands, count in their parent's),
/// and by the counting relay's thread ([`RELAY_THREAD`]).
pub fn host_cpu() -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((comm, ticks)) = comm_and_ticks(&stat) else {
            continue;
        };
        let name = if comm.starts_with("containerd-shim") {
            "containerd-shim"
        } else {
            comm
        };
        if HOST_COMMANDS.contains(&name) {
            *out.entry(name.to_string()).or_default() += ticks as f64 / CLOCK_TICKS;
        }
    }
    // The counting relay is a thread of this process: its own times, not the process's.
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            // utime + stime alone: a thread's cutime and cstime are its whole process's.
            if let Some((RELAY_THREAD, [user, system, ..])) = stat_times(&stat) {
                *out.entry(RELAY_THREAD.to_string()).or_default() +=
                    (user + system) as f64 / CLOCK_TICKS;
            }
        }
    }
    out
}

/// `comm` and utime + stime + cutime + cstime of a `/proc/<pid>/stat` line.
fn comm_and_ticks(stat: &str) -> Option<(&str, u64)> {
    stat_times(stat).map(|(comm, t)| (comm, t.iter().sum()))
}

/// `comm` and fields 14–17 (utime, stime, cutime, cstime) of a `/proc/<pid>/stat` line,
/// counted after the `(comm)` that may hold spaces.
fn stat_times(stat: &str) -> Option<(&str, [u64; 4])> {
    let open = stat.find('(')?;
    let (comm_end, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let field = |i: usize| fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
    Some((
        &comm_end[open + 1..],
        [field(11), field(12), field(13), field(14)],
    ))
}

/// Sums a counter's samples by its labels: `name{..label="v"..} 3` lines; a sample without one
/// of the labels is left out.
pub fn sum_by(metrics: &str, m: RequestMetric) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(m.name) else {
            continue;
        };
        let Some(labels) = rest.strip_prefix('{') else {
            continue;
        };
        let Some((labels, value)) = labels.rsplit_once('}') else {
            continue;
        };
        let values: Option<Vec<&str>> = m
            .labels
            .iter()
            .map(|label| {
                // After `{` or `,`, so that `verb` is not found inside `subverb`.
                let key = format!("{label}=\"");
                let start = labels
                    .match_indices(&key)
                    .find(|(i, _)| *i == 0 || labels.as_bytes()[i - 1] == b',')?
                    .0;
                labels[start + key.len()..].split('"').next()
            })
            .collect();
        let Some(values) = values else {
            continue;
        };
        let n = value.trim().parse::<f64>().unwrap_or(0.0);
        *out.entry(values.join(" ")).or_default() += n as u64;
    }
    out
}

/// A plain HTTP GET on 127.0.0.1 (health and metrics endpoints).
pub async fn get(url: &str) -> Result<String> {
    let resp = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("GET {url}: {}", resp.status());
    }
    Ok(resp.text().await?)
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits until the previous phase's work has left the host: dirty pages written back (`sync`),
/// with `drop_caches` the kernel's clean caches dropped, then the whole machine below
/// [`QUIET_BUSY`] for one second, for at most `limit`. Phases run one after another on one
/// engine and disk, and what one leaves behind is paid for by the next one's container creates
/// (copying the image's `/var`, most of dockerd's CPU): measured with the same floor phase run
/// four times in a row, the first one after a cache drop took 2.7–3.5 dockerd CPU-seconds for 10
/// machines and each later one 5.8–6.3, whether the host rested 1 s or 45 s in between. Dropping
/// the caches also frees the memory cgroups of removed containers that their cached pages keep
/// alive (about a thousand after a session of runs). Returns the busy fraction last seen.
pub async fn settle(limit: Duration, drop_caches: bool) -> f64 {
    let _ = tokio::process::Command::new("sync").status().await;
    if drop_caches && let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "3") {
        eprintln!("WARNING: cannot drop the kernel's caches ({e}); phases start warm");
    }
    let deadline = std::time::Instant::now() + limit;
    loop {
        let before = cpu_jiffies();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = busy_fraction(before, cpu_jiffies());
        if busy < QUIET_BUSY || std::time::Instant::now() >= deadline {
            return busy;
        }
    }
}

/// Host busy fraction under which [`settle`] calls the machine quiet (the plane and the CAPI
/// managers at rest use a few percent of 2 cores).
pub const QUIET_BUSY: f64 = 0.15;

/// (busy, total) jiffies of all CPUs, from the first line of `/proc/stat`.
fn cpu_jiffies() -> (u64, u64) {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().next().map(parse_cpu_line))
        .unwrap_or((0, 0))
}

/// `cpu  user nice system idle iowait irq softirq steal ...`: idle and iowait are not busy.
fn parse_cpu_line(line: &str) -> (u64, u64) {
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn busy_fraction(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1);
    if total == 0 {
        return 0.0;
    }
    after.0.saturating_sub(before.0) as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_counts_everything_but_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let a = parse_cpu_line("cpu  100 0 50 800 50 0 0 0 0 0");
        let b = parse_cpu_line("cpu  130 0 60 950 60 0 0 0 0 0");
        assert_eq!(a, (150, 1000));
        assert!((busy_fraction(a, b) - 40.0 / 200.0).abs() < 1e-9);
        assert_eq!(busy_fraction(a, a), 0.0, "no time passed");
    }

    #[test]
    fn counters_sum_by_label_across_other_labels() {
        let text = "# HELP x\n\
            rest_client_requests_total{code=\"200\",host=\"127.0.0.1:6443\",method=\"GET\"} 10\n\
            rest_client_requests_total{code=\"404\",host=\"127.0.0.1:6443\",method=\"GET\"} 2\n\
            rest_client_requests_total{code=\"201\",host=\"127.0.0.1:6443\",method=\"POST\"} 3\n\
            rest_client_request_duration_seconds_bucket{method=\"GET\",le=\"1\"} 99\n";
        assert_eq!(
            sum_by(text, CLIENT_GO_REQUESTS),
            BTreeMap::from([("GET".to_string(), 12), ("POST".into(), 3)])
        );
        let errors = "controller_runtime_reconcile_errors_total{controller=\"dockermachine\"} 4\n\
            controller_runtime_reconcile_errors_total{controller=\"dockercluster\"} 1\n\
            controller_runtime_reconcile_total{controller=\"dockermachine\",result=\"error\"} 4\n";
        assert_eq!(
            sum_by(errors, RECONCILE_ERRORS),
            BTreeMap::from([
                ("dockercluster".to_string(), 1),
                ("dockermachine".into(), 4)
            ])
        );
        let own = "capd_kube_api_requests_total{verb=\"patch\",resource=\"dockermachines/status\"} 7\n\
            capd_kube_api_requests_total{verb=\"get\",resource=\"secrets\"} 2\n\
            capd_kube_api_requests_total{subverb=\"x\",resource=\"secrets\"} 5\n";
        assert_eq!(
            sum_by(own, OWN_REQUESTS),
            BTreeMap::from([
                ("get secrets".to_string(), 2),
                ("patch dockermachines/status".into(), 7)
            ]),
            "both labels name a sum; a sample missing one is left out"
        );
    }

    #[test]
    fn proc_fields_are_read_past_a_comm_with_spaces() {
        let stat = "42 (my manager) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        assert_eq!(cpu_ticks(stat), 300);
        assert_eq!(
            vm_hwm_kib("Name:\tm\nVmHWM:\t   20480 kB\nVmRSS:\t1 kB\n"),
            20480
        );
        assert_eq!(cpu_ticks("garbage"), 0);
        assert_eq!(comm_and_ticks(stat), Some(("my manager", 300)));
        let shim = "7 (containerd-shim) S 1 7 7 0 -1 0 0 0 0 0 10 20 30 40 20 0 9 0 1 2 3";
        assert_eq!(comm_and_ticks(shim), Some(("containerd-shim", 100)));
    }
}
