//! The soak (issue 13): create → scale down → scale up → delete cycles of light machines under
//! one manager, sampling the manager process every few seconds: RSS, open file descriptors, OS
//! threads, tokio tasks, objects kept in memory, Docker calls and API requests. Writes
//! `$CARGO_TARGET_TMPDIR/soak/soak.json`, which `hack/soak.sh` plots. Fails when a figure at rest
//! grew after the first cycle ([`xtask_figures::soak::Report::growth`]).
//!
//! By hand (30 minutes): `hack/soak.sh`; `SOAK_MINUTES` and `SOAK_MACHINES` (default 30, 50).
mod common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use capd::api::DockerMachine;
use common::*;
use futures::FutureExt;
use kube::{Api, ResourceExt, api::DeleteParams};
use serde_json::json;
use xtask_figures::soak::{Cycle, Report, Sample};

const BOOTSTRAP_OK: &str = include_str!("fixtures/bootstrap-ok.yaml");
const EVERY: Duration = Duration::from_secs(5);
/// How long one phase of a cycle may take.
const PHASE_BOUND: Duration = Duration::from_secs(300);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A figure from `/proc/<pid>/status` (the number before any unit).
fn proc_status(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One reading of the manager process and its /metrics.
async fn sample(r: &TestEnvRef, pid: u32, start: Instant, machines: u64) -> Sample {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    Sample {
        t_s: start.elapsed().as_secs_f64(),
        machines,
        rss_kib: proc_status(pid, "VmRSS:"),
        fds,
        threads: proc_status(pid, "Threads:"),
        tasks: r.metric("capd_runtime_tasks ").await,
        docker_calls: r.metric("capd_docker_api_calls{").await,
        kube_requests: r.metric("capd_kube_api_requests_total{").await,
        tracked: r.metric("capd_tracked_objects{").await,
    }
}

struct Load {
    r: TestEnvRef,
    ns: String,
    cluster: String,
    created: usize,
}

impl Load {
    fn api(&self) -> Api<DockerMachine> {
        Api::namespaced(self.r.client.clone(), &self.ns)
    }

    /// Create `n` machines (the first of a batch is a control plane: the LB's backends churn
    /// too) and wait until every machine is provisioned; returns their names.
    async fn up(&mut self, n: usize) -> Vec<String> {
        let mut names = Vec::new();
        for i in 0..n {
            let name = format!("{}-s{}", self.cluster, self.created);
            self.created += 1;
            let node = json!({"customImage": NODE_IMAGE});
            self.r
                .create_machine(&self.ns, &self.cluster, &name, i == 0, Some("boot"), node)
                .await;
            names.push(name);
        }
        let api = self.api();
        eventually(PHASE_BOUND, "every machine provisioned", || async {
            let all = api.list(&Default::default()).await.ok()?.items;
            all.iter().all(fully_provisioned).then_some(())
        })
        .await;
        names
    }

    /// Delete `names` (DockerMachine and Machine, as a MachineSet scaling down) and wait until
    /// they are gone.
    async fn down(&self, names: &[String]) {
        let api = self.api();
        for name in names {
            let _ = api.delete(name, &DeleteParams::default()).await;
            self.r.delete_capi(&self.ns, "Machine", name).await;
        }
        eventually(PHASE_BOUND, "the deleted machines gone", || async {
            let left = api.list(&Default::default()).await.ok()?.items;
            (!left.iter().any(|dm| names.contains(&dm.name_any()))).then_some(())
        })
        .await;
    }
}

/// `$CARGO_TARGET_TMPDIR/soak/soak.json`.
fn write(report: &Report) {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("soak");
    std::fs::create_dir_all(&dir).unwrap();
    let json = serde_json::to_string_pretty(report).unwrap();
    std::fs::write(dir.join("soak.json"), json).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "30 minutes: hack/soak.sh"]
async fn soak() {
    let minutes = setting("SOAK_MINUTES", 30);
    let machines = setting("SOAK_MACHINES", 50) as usize;
    let mut env = TestEnv::new("soak").await;
    env.start_manager(&[], None);
    let pid = env.manager.as_ref().expect("a manager").child.id();
    env.run_mut(move |env| {
        async move {
            let r = env.handle();
            r.manager_ready().await;
            let ns = r.namespace("s").await;
            let cluster = format!("{}-c", r.id);
            r.provisioned_cluster(&ns, &cluster).await;
            r.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None).await;
            let mut load = Load { r: r.clone(), ns: ns.clone(), cluster, created: 0 };

            let start = Instant::now();
            let samples = Arc::new(Mutex::new(Vec::new()));
            let sampler = {
                let (r, samples, api) = (r.clone(), samples.clone(), load.api());
                tokio::spawn(async move {
                    loop {
                        let n = api.list(&Default::default()).await.map_or(0, |l| l.items.len());
                        let s = sample(&r, pid, start, n as u64).await;
                        samples.lock().unwrap().push(s);
                        tokio::time::sleep(EVERY).await;
                    }
                })
            };

            let mut cycles = Vec::new();
            while start.elapsed() < Duration::from_secs(minutes * 60) {
                let t = Instant::now();
                let all = load.up(machines).await;
                let up_s = t.elapsed().as_secs_f64();
                let t = Instant::now();
                load.down(&all[machines / 2..]).await;
                let scale_down_s = t.elapsed().as_secs_f64();
                let t = Instant::now();
                let again = load.up(machines - machines / 2).await;
                let scale_up_s = t.elapsed().as_secs_f64();
                let t = Instant::now();
                let remaining: Vec<String> =
                    all[..machines / 2].iter().chain(&again).cloned().collect();
                load.down(&remaining).await;
                let down_s = t.elapsed().as_secs_f64();
                // At rest: the bootstraps' and deletions' work has settled.
                tokio::time::sleep(EVERY).await;
                let at_rest = sample(&r, pid, start, 0).await;
                println!(
                    "cycle {}: up {up_s:.1} s, scale down {scale_down_s:.1} s, scale up {scale_up_s:.1} s, delete {down_s:.1} s; at rest: RSS {} KiB, {} fds, {} tasks, {} tracked",
                    cycles.len() + 1,
                    at_rest.rss_kib,
                    at_rest.fds,
                    at_rest.tasks,
                    at_rest.tracked
                );
                cycles.push(Cycle { up_s, scale_down_s, scale_up_s, down_s, at_rest });
                // After every cycle: a soak that fails later still leaves its series to plot.
                let report = Report {
                    machines: machines as u64,
                    minutes: start.elapsed().as_secs_f64() / 60.0,
                    samples: samples.lock().unwrap().clone(),
                    cycles: cycles.clone(),
                };
                write(&report);
            }
            sampler.abort();
            let report = Report {
                machines: machines as u64,
                minutes: start.elapsed().as_secs_f64() / 60.0,
                samples: samples.lock().unwrap().clone(),
                cycles,
            };
            write(&report);
            let grew = report.growth();
            assert!(grew.is_empty(), "grew after warm-up: {grew:?}");
        }
        .boxed()
    })
    .await;
}
