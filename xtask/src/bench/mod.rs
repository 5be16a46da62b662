//! Side by side: capd-rs, upstream CAPD and the floor (the Docker Engine alone) provisioning the
//! same light machines on the same plane and engine, in one run (`hack/bench.sh`).
//!
//! For each N, the subjects run one after another (floor, capd-rs, upstream), so that a drift
//! of the machine during the run touches all three alike; with several rounds, each round
//! rotates that order, so that every subject also runs after each of the others (what a phase
//! leaves behind, a hundred volumes being removed, say, is paid for by the next one). Both managers
//! run as processes, each as a ServiceAccount of its own whose requests the API server's audit
//! log counts (`audit`), and reach the engine through one counting relay (`docker_count`); each
//! provider runs with its own CRDs (`crds`), swapped between phases.
//! A machine counts as provisioned when its provider reports the bootstrap done (both:
//! `BootstrapCompleted`, upstream v1.14's condition); the bench then checks in every container
//! that the bootstrap really ran.
pub mod audit;
pub mod crds;
pub mod docker_count;
pub mod floor;
pub mod in_memory;
mod interrupt;
pub mod nodes;
pub mod objects;
pub mod process;
pub mod removals;
pub mod report;
pub mod timeline;

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use bollard::{
    Docker,
    exec::{CreateExecOptions, StartExecResults},
    query_parameters::{
        ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
    },
};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use interrupt::Interrupt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;

use docker_count::DockerCounter;
use nodes::NodeShape;
use objects::{LightLoad, Workload};
use process::{Manager, Usage};
use report::{CAPD_RS, FLOOR, NODES, Run, UPSTREAM};

use in_memory::Shape;
use timeline::MachineTimes;

/// The light bootstrap's first file and its sentinel: both there means it ran; their
/// modification times are when it began and ended (see [`timeline`]).
const HELLO: &str = "/etc/capd-bench/hello.txt";
const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";
/// How long the Machines must go unchanged before a light phase is timed: CAPI core's patches
/// of a new Machine come within a second of each other (measured at N=100), so 3 s without one
/// means it is done with them.
const MACHINES_QUIET: Duration = Duration::from_secs(3);

/// A time `stat -c %.9Y` printed: seconds since the epoch, with nanoseconds.
fn epoch(line: &str) -> Option<DateTime<Utc>> {
    let (secs, nanos) = line.trim().split_once('.')?;
    DateTime::from_timestamp(secs.parse().ok()?, nanos.parse().ok()?)
}

/// Every container and network the bench (or capd-rs for it) creates carries this label, with
/// the run's id as the value.
pub const LABEL_KEY: &str = "capd-rs.test/run";
/// Upstream CAPD labels its containers with the cluster name (the run's id); it has no flag to
/// add one of ours.
const UPSTREAM_CLUSTER_LABEL: &str = "io.x-k8s.kind.cluster";
/// Upstream CAPD puts every container on this network and expects it to exist.
const UPSTREAM_NETWORK: &str = "kind";

pub struct Config {
    pub kubeconfig: PathBuf,
    /// The light loads, in the order run: N machines in one Cluster or spread over several.
    pub ns: Vec<LightLoad>,
    pub subjects: Vec<String>,
    /// Rounds per load; round r runs the subjects in row r of a Williams design
    /// ([`williams`]). The report divides each round's pair and takes the median of those.
    pub rounds: usize,
    /// Drop the kernel's clean caches before each phase (`process::settle`), so that every
    /// phase starts from the same state.
    pub drop_caches: bool,
    pub capd_rs_manager: PathBuf,
    pub upstream_manager: PathBuf,
    pub upstream_version: String,
    /// The code measured, as [`report::Report::code`] records it.
    pub code: String,
    pub own_crds: PathBuf,
    pub upstream_crds: PathBuf,
    /// tls.crt/tls.key for upstream's webhook server (it will not start without them; nothing
    /// registers its webhooks).
    pub webhook_cert_dir: PathBuf,
    pub image: String,
    pub lb_image: String,
    pub engine_socket: PathBuf,
    pub work_dir: PathBuf,
    pub idle: Duration,
    /// Manager images whose size to report, by subject.
    pub images: BTreeMap<String, String>,
    pub command: String,
    /// The real-node workloads, one per shape, after the light ones (both providers; the floor
    /// has no counterpart: it would be a hand-written kubeadm).
    pub nodes: Option<nodes::NodesConfig>,
    /// The in-memory loads (both providers; no floor), after the others, with the Kubernetes
    /// version their machines report.
    pub in_memory: Vec<(Shape, usize)>,
    pub in_memory_version: String,
    /// A shell command run after each swap of the Docker* CRDs, e.g. restarting the CAPI
    /// managers: KCP's cache kept answering "DockerMachineTemplate not found" for 56 s after a
    /// swap, and held capd-rs's real-node phase back by as much.
    pub after_crd_swap: Option<String>,
    /// The plane's audit log (see [`audit`]): with it each manager runs as a ServiceAccount of
    /// its own and its requests are counted there; without it, as the admin, counted by the
    /// manager's own metrics alone.
    pub audit_log: Option<PathBuf>,
    /// A `partial.json` of an earlier, unfinished run of the same command and code on this
    /// host: its phases are kept and only the others run (a run too long for one sitting).
    pub resume: Option<PathBuf>,
}

/// What one phase provisions.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Load {
    Light(LightLoad),
    Nodes(NodeShape),
    InMemory(Shape, usize),
}

/// The id of `subject`'s phase of `load` in `round`, by bench process `pid`: the namespace,
/// Cluster and container names start with it. Each round has its own namespace, containers and
/// log: the namespace of the round before may still be terminating.
fn run_id(subject: &str, load: Load, round: usize, pid: u32) -> String {
    format!(
        "bench-{}-{}-r{}-{:04}",
        match subject {
            CAPD_RS => "rs",
            UPSTREAM => "up",
            _ => "fl",
        },
        load.id_part(),
        round + 1,
        pid % 10_000
    )
}

impl Load {
    /// Its part of the run's id, which names the namespaces, Clusters and containers: short,
    /// and of DNS-label characters only.
    fn id_part(self) -> String {
        match self {
            Load::Light(l) => match l.spread() {
                None => format!("n{}", l.n),
                Some(k) => format!("n{}x{k}", l.n),
            },
            Load::Nodes(s) => format!("cp{}w{}", s.control_planes, s.workers),
            Load::InMemory(Shape::One, n) => format!("m{n}"),
            Load::InMemory(Shape::Pairs, n) => format!("p{n}"),
        }
    }

    /// The load a recorded run was a phase of.
    fn of(run: &Run) -> Option<Load> {
        match run.workload.as_str() {
            report::LIGHT => Some(Load::Light(run.light_load())),
            NODES => Some(Load::Nodes(run.node_shape())),
            report::IN_MEMORY => Some(Load::InMemory(Shape::One, run.n)),
            report::IN_MEMORY_PAIRS => Some(Load::InMemory(Shape::Pairs, run.n)),
            _ => None,
        }
    }
}

/// Whether `report` (a resumed one) holds `subject`'s phase of `load` in `round` already.
fn on_record(report: &report::Report, subject: &str, load: Load, round: usize) -> bool {
    report
        .runs
        .iter()
        .any(|r| r.subject == subject && r.round == round && Load::of(r) == Some(load))
}

/// The partial result at `path` (a `partial.json`), to go on with instead of `fresh`: only one
/// of the same command on the same host, so that the rounds before and after stay comparable.
fn resumed(path: &Path, fresh: report::Report) -> Result<report::Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut old: report::Report =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    ensure!(
        !fresh.code.is_empty(),
        "the code measured is not known (no --code): a resumed run must measure the same code"
    );
    ensure!(
        !fresh.code.ends_with("-dirty"),
        "the code has uncommitted changes ({}): a resumed run must measure committed code",
        fresh.code
    );
    for (what, was, now) in [
        ("code", &old.code, &fresh.code),
        ("command", &old.command, &fresh.command),
        ("host", &old.host, &fresh.host),
        (
            "upstream version",
            &old.upstream_version,
            &fresh.upstream_version,
        ),
    ] {
        ensure!(
            was == now,
            "{} was recorded with {what} {was:?}, this run has {now:?}: it cannot be resumed",
            path.display()
        );
    }
    old.resumed.push(fresh.date);
    Ok(old)
}

/// As the progress lines name the load: `light N=100 over 10 clusters`, `nodes 3+5`.
impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Load::Light(l) => write!(f, "{} N={l}", report::LIGHT),
            Load::Nodes(s) => write!(f, "{NODES} {s}"),
            Load::InMemory(s, n) => write!(f, "{} N={n}", s.workload()),
        }
    }
}

/// Which CRDs the plane has now.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Installed {
    Own,
    Upstream,
}

struct Bench {
    cfg: Config,
    client: Client,
    admin: kube::config::Kubeconfig,
    docker: Docker,
    counter: DockerCounter,
    own: Vec<CustomResourceDefinition>,
    upstream: Vec<CustomResourceDefinition>,
    installed: Installed,
    interrupt: Interrupt,
}

pub async fn run(cfg: Config) -> Result<report::Report> {
    let interrupt = Interrupt::listen()?;
    let admin = kube::config::Kubeconfig::read_from(&cfg.kubeconfig)?;
    let client = Client::try_from(
        kube::Config::from_custom_kubeconfig(admin.clone(), &Default::default()).await?,
    )?;
    let docker = Docker::connect_with_unix(
        &cfg.engine_socket.to_string_lossy(),
        120,
        bollard::API_DEFAULT_VERSION,
    )?;
    std::fs::create_dir_all(&cfg.work_dir)?;
    let counter =
        DockerCounter::start(cfg.work_dir.join("docker.sock"), cfg.engine_socket.clone())?;
    let mut own = crds::load_dir(&cfg.own_crds)?;
    crds::as_live(&client, &mut own).await?;
    let upstream = if cfg.subjects.iter().any(|s| s == UPSTREAM) {
        let mut crds = crds::load_dir(&cfg.upstream_crds)?;
        crds::label_contracts(&mut crds);
        crds
    } else {
        Vec::new()
    };
    let mut bench = Bench {
        cfg,
        client,
        admin,
        docker,
        counter,
        own,
        upstream,
        installed: Installed::Own,
        interrupt,
    };
    let fresh = report::Report {
        date: now_rfc3339(),
        host: host_description(&bench.docker).await,
        command: bench.cfg.command.clone(),
        upstream_version: bench.cfg.upstream_version.clone(),
        code: bench.cfg.code.clone(),
        idle_window_s: bench.cfg.idle.as_secs_f64(),
        ..Default::default()
    };
    let mut report = match &bench.cfg.resume {
        Some(path) => resumed(path, fresh)?,
        None => fresh,
    };
    for (subject, image) in &bench.cfg.images {
        let size = bench
            .docker
            .inspect_image(image)
            .await
            .with_context(|| format!("image {image}"))?
            .size
            .unwrap_or(0);
        report.images.insert(subject.clone(), size as u64);
    }
    let result = bench.all(&mut report).await;
    // Whatever happened, the plane gets our CRDs back.
    if let Err(e) = bench.install(Installed::Own).await {
        eprintln!("WARNING: could not restore capd-rs's CRDs: {e:#}");
    }
    result.map(|_| report)
}

impl Bench {
    async fn all(&mut self, report: &mut report::Report) -> Result<()> {
        let mut loads: Vec<Load> = self.cfg.ns.iter().map(|n| Load::Light(*n)).collect();
        if let Some(cfg) = &self.cfg.nodes {
            loads.extend(cfg.shapes.iter().map(|s| Load::Nodes(*s)));
        }
        loads.extend(
            self.cfg
                .in_memory
                .iter()
                .map(|(s, n)| Load::InMemory(*s, *n)),
        );
        let subjects: Vec<&str> = [FLOOR, CAPD_RS, UPSTREAM]
            .into_iter()
            .filter(|s| self.cfg.subjects.iter().any(|c| c == s))
            .collect();
        let mut previous: Option<String> = None;
        for load in loads {
            let subjects: Vec<&str> = subjects
                .iter()
                .copied()
                .filter(|s| *s != FLOOR || matches!(load, Load::Light(_)))
                .collect();
            // An in-memory load runs once: at 1,000 machines and more one phase takes longer
            // than a round of every other load together.
            let rounds = if matches!(load, Load::InMemory(..)) {
                1
            } else {
                self.cfg.rounds.max(1)
            };
            for round in 0..rounds {
                for subject in williams(&subjects, round) {
                    if on_record(report, subject, load, round) {
                        say(&format!(
                            "{subject} {load} round {}: on record, kept",
                            round + 1
                        ));
                        previous = Some(subject.to_string());
                        continue;
                    }
                    // An interrupt ends the phase inside `one`, which still cleans up after itself.
                    self.interrupt.check()?;
                    let run = Run {
                        round,
                        after: previous.replace(subject.to_string()),
                        ..self.one(subject, load, round).await?
                    };
                    say(&format!(
                        "{subject} {load}: all provisioned in {:.1} s (p50 {:.1}, p95 {:.1}), {}, peak RSS {} MiB, {} Docker calls",
                        run.provision_s,
                        run.p50_s,
                        run.p95_s,
                        run.delete_s
                            .map_or("deletion failed".into(), |d| format!("deleted in {d:.1} s")),
                        run.peak_rss_mib.map_or("–".into(), |v| format!("{v:.1}")),
                        run.docker_calls_total()
                    ));
                    report.runs.push(run);
                    // The partial result survives an interrupted or failed run.
                    let json = serde_json::to_string_pretty(report)?;
                    std::fs::write(self.cfg.work_dir.join("partial.json"), json)?;
                }
            }
        }
        Ok(())
    }

    async fn one(&mut self, subject: &str, load: Load, round: usize) -> Result<Run> {
        let id = run_id(subject, load, round, std::process::id());
        say(&format!("=== {subject} {load:?}: run {id}"));
        match (subject, load) {
            (FLOOR, Load::Light(l)) => self.floor(&id, l).await,
            (FLOOR, Load::Nodes(_) | Load::InMemory(..)) => {
                bail!("the floor has only the light workload")
            }
            _ => {
                self.install(if subject == UPSTREAM {
                    Installed::Upstream
                } else {
                    Installed::Own
                })
                .await?;
                let in_memory = matches!(load, Load::InMemory(..));
                let identity = match &self.cfg.audit_log {
                    Some(_) => Some(
                        audit::Identity::create(&self.client, &self.admin, &id, &self.cfg.work_dir)
                            .await?,
                    ),
                    None => None,
                };
                let manager = match self
                    .start_manager(subject, &id, in_memory, identity.as_ref())
                    .await
                {
                    Ok(m) => m,
                    Err(e) => {
                        if let Some(i) = &identity {
                            i.delete(&self.client).await;
                        }
                        return Err(e);
                    }
                };
                if let Err(e) = self.ensure_network(subject, &id).await {
                    manager.stop().await;
                    if let Some(i) = &identity {
                        i.delete(&self.client).await;
                    }
                    return Err(e);
                }
                // One Workload per Cluster: several for a spread light load, else one.
                let clusters = match load {
                    Load::Light(l) => l.clusters,
                    Load::Nodes(_) | Load::InMemory(..) => 1,
                };
                let workloads = Workload::spread(&self.client, &id, clusters, &self.cfg.image);
                let phase = async {
                    match load {
                        Load::Light(l) => {
                            let timeout = Duration::from_secs(120 + 3 * l.n as u64);
                            self.provider(subject, &id, l, &workloads, &manager, timeout)
                                .await
                        }
                        Load::Nodes(shape) => {
                            self.nodes(subject, shape, &workloads[0], &manager).await
                        }
                        Load::InMemory(shape, n) => {
                            self.in_memory(subject, shape, n, &workloads[0], &manager)
                                .await
                        }
                    }
                };
                let result = tokio::select! {
                    r = phase => r,
                    _ = self.interrupt.wait() => Err(anyhow::anyhow!("interrupted")),
                };
                if result.is_err() {
                    say(&format!(
                        "run failed; manager log kept: {}",
                        manager.log.display()
                    ));
                }
                // With the manager still running, so that it honours its finalizers; every
                // namespace at once.
                futures::future::join_all(workloads.iter().map(Workload::teardown)).await;
                manager.stop().await;
                if let Some(i) = &identity {
                    i.delete(&self.client).await;
                }
                let names: Vec<&str> = workloads.iter().map(|w| w.cluster.as_str()).collect();
                self.remove_containers(subject, &id, &names).await;
                self.remove_networks(&id).await;
                result
            }
        }
    }

    /// The provider's phases on a running manager: the Clusters (all at once), the Machines,
    /// then every DockerMachine, timed to each one's bootstrap across all the Clusters; idle;
    /// deletion of every DockerMachine, timed. `ws`: one Workload per Cluster of `load` in run
    /// `id`.
    async fn provider(
        &self,
        subject: &str,
        id: &str,
        load: LightLoad,
        ws: &[Workload],
        manager: &Manager,
        timeout: Duration,
    ) -> Result<Run> {
        let n = load.n;
        let sizes = load.split();
        futures::future::try_join_all(
            ws.iter()
                .map(|w| w.create_cluster(Duration::from_secs(180))),
        )
        .await
        .context("DockerCluster not provisioned")?;
        // Not timed: one Cluster after another, each at the client's parallelism.
        let mut uids = Vec::with_capacity(ws.len());
        for (w, k) in ws.iter().zip(&sizes) {
            uids.push(w.create_machines(*k).await?);
        }
        let settling = Instant::now();
        if objects::wait_machines_at_rest(ws, MACHINES_QUIET, Duration::from_secs(120)).await? {
            say(&format!(
                "{subject}: CAPI at rest with the Machines after {:.1} s",
                settling.elapsed().as_secs_f64()
            ));
        } else {
            say("WARNING: CAPI still changing the Machines after 120 s; measuring anyway");
        }
        quiet(self.cfg.drop_caches, SETTLE).await;
        let before = self.reading(manager).await?;
        let cpu_before = process::host_cpu();
        let condition = "BootstrapCompleted";
        let t0 = Utc::now();
        let (times, created) = tokio::join!(
            objects::wait_docker_machines(ws, n, timeout, |o| objects::condition_true(
                o, condition
            )),
            objects::create_docker_machines(ws, &uids)
        );
        created?;
        let times =
            times.with_context(|| format!("waiting for {condition} on {n} DockerMachines"))?;
        let after = self.reading(manager).await?;
        let host_cpu_s = cpu_delta(&cpu_before, &process::host_cpu());
        tokio::time::sleep(self.cfg.idle).await;
        let idle = self.reading(manager).await?;
        let mut timeline = Vec::with_capacity(n);
        for (w, k) in ws.iter().zip(&sizes) {
            let names: Vec<String> = (0..*k).map(|i| w.machine_name(i)).collect();
            timeline.extend(
                self.check_bootstrapped(subject, id, &w.cluster, &names, t0, &times)
                    .await?,
            );
        }

        let del_before = self.counter.snapshot();
        let start = Instant::now();
        let delete_s = deletion_time(
            objects::delete_docker_machines(ws, timeout)
                .await
                .map(|()| start.elapsed())
                .context("deleting DockerMachines"),
        );
        let del_after = self.counter.snapshot();
        let end = manager.usage();

        let timed = Run {
            clusters: load.spread(),
            delete_s,
            docker_calls: docker_count::delta(&before.docker, &after.docker),
            idle_docker_calls: docker_count::total(&docker_count::delta(
                &after.docker,
                &idle.docker,
            )),
            delete_docker_calls: docker_count::total(&docker_count::delta(&del_before, &del_after)),
            host_cpu_s,
            timeline,
            ..Run::timed(subject, n, &times)
        };
        let idle = Some((&idle, self.cfg.idle));
        let audit = self.audited(manager, &before, &after, idle.map(|(i, _)| i));
        Ok(with_manager(timed, &before, &after, idle, &end, audit))
    }

    /// The real-node phase on a running manager: apply `shape`, all Nodes Ready, delete the
    /// Cluster.
    async fn nodes(
        &self,
        subject: &str,
        shape: NodeShape,
        w: &Workload,
        manager: &Manager,
    ) -> Result<Run> {
        let cfg = self.cfg.nodes.as_ref().context("no real-node settings")?;
        let mut docs = nodes::render(cfg, shape, &self.cfg.kubeconfig, &w.cluster)?;
        if subject == UPSTREAM {
            nodes::use_upstream_lb_template(&mut docs, &w.ns, &w.cluster);
        }
        let manifest = nodes::Manifest::resolve(&self.client, &docs).await?;
        quiet(self.cfg.drop_caches, SETTLE).await;
        let before = self.reading(manager).await?;
        let cpu_before = process::host_cpu();
        let start = Instant::now();
        manifest.apply(&self.client, &w.ns).await?;
        let want = shape.machines();
        let times = nodes::wait_nodes_ready(
            &self.client,
            &w.ns,
            &w.cluster,
            want,
            start,
            shape.ready_timeout(),
        )
        .await?;
        let after = self.reading(manager).await?;
        let host_cpu_s = cpu_delta(&cpu_before, &process::host_cpu());
        let del_before = self.counter.snapshot();
        let delete_s = deletion_time(
            nodes::delete_cluster(w, shape.delete_timeout())
                .await
                .context("deleting the Cluster"),
        );
        let del_after = self.counter.snapshot();
        let end = manager.usage();
        let timed = Run::timed(subject, want, &times);
        let run = Run {
            workload: NODES.into(),
            control_planes: Some(shape.control_planes),
            delete_s,
            docker_calls: docker_count::delta(&before.docker, &after.docker),
            delete_docker_calls: docker_count::total(&docker_count::delta(&del_before, &del_after)),
            host_cpu_s,
            ..timed
        };
        let audit = self.audited(manager, &before, &after, None);
        Ok(with_manager(run, &before, &after, None, &end, audit))
    }

    /// The in-memory phase on a running manager: apply, all Machines Running, idle, delete the
    /// Clusters.
    async fn in_memory(
        &self,
        subject: &str,
        shape: Shape,
        n: usize,
        w: &Workload,
        manager: &Manager,
    ) -> Result<Run> {
        let docs = in_memory::manifest(&w.cluster, shape, n, &self.cfg.in_memory_version);
        let n = shape.machines(n);
        let manifest = nodes::Manifest::resolve(&self.client, &docs).await?;
        // No Machine Running for 5 minutes is stuck; a total bound would have to guess the
        // host's rate (about 2.5 s per machine on two cores, where CAPI saturates the API server).
        let stall = Duration::from_secs(300);
        quiet(self.cfg.drop_caches, IN_MEMORY_SETTLE).await;
        let before = self.reading(manager).await?;
        let cpu_before = process::host_cpu();
        let (times, applied) = tokio::join!(
            in_memory::wait_running(w, n, stall),
            manifest.apply(&self.client, &w.ns)
        );
        applied?;
        let times = times.with_context(|| format!("waiting for {n} in-memory Machines Running"))?;
        let after = self.reading(manager).await?;
        let host_cpu_s = cpu_delta(&cpu_before, &process::host_cpu());
        tokio::time::sleep(self.cfg.idle).await;
        let idle = self.reading(manager).await?;
        let delete_s = deletion_time(
            in_memory::delete_clusters(w, stall)
                .await
                .context("deleting the Clusters"),
        );
        let end = manager.usage();
        let run = Run {
            workload: shape.workload().into(),
            delete_s,
            host_cpu_s,
            ..Run::timed(subject, n, &times)
        };
        let audit = self.audited(manager, &before, &after, Some(&idle));
        Ok(with_manager(
            run,
            &before,
            &after,
            Some((&idle, self.cfg.idle)),
            &end,
            audit,
        ))
    }

    /// The floor's phase of `load`. It has no Clusters: a spread load is the same N containers
    /// on its one network, recorded under the load's Clusters so that its row pairs with the
    /// providers' spread rows.
    async fn floor(&self, id: &str, load: LightLoad) -> Result<Run> {
        let n = load.n;
        let network = id.to_string();
        self.create_network(&network, id).await?;
        let floor = floor::Floor::new(
            &self.counter.docker_host(),
            &self.cfg.image,
            (LABEL_KEY, id),
            &network,
        )?;
        quiet(self.cfg.drop_caches, SETTLE).await;
        let before = self.counter.snapshot();
        let phase = async {
            let cpu_before = process::host_cpu();
            let t0 = Utc::now();
            let times = floor.provision(id, n).await?;
            let host_cpu_s = cpu_delta(&cpu_before, &process::host_cpu());
            let after = self.counter.snapshot();
            let names: Vec<String> = (0..n).map(|i| format!("{id}-{i}")).collect();
            let timeline = self
                .check_bootstrapped(FLOOR, id, id, &names, t0, &times)
                .await?;
            let delete_s = deletion_time(floor.remove(id, n, floor::REMOVALS).await);
            let end = self.counter.snapshot();
            Ok(Run {
                clusters: load.spread(),
                delete_s,
                docker_calls: docker_count::delta(&before, &after),
                delete_docker_calls: docker_count::total(&docker_count::delta(&after, &end)),
                host_cpu_s,
                timeline,
                ..Run::timed(FLOOR, n, &times)
            })
        };
        let result = tokio::select! {
            r = phase => r,
            _ = self.interrupt.wait() => Err(anyhow::anyhow!("interrupted")),
        };
        self.remove_containers(FLOOR, id, &[id]).await;
        self.remove_networks(id).await;
        result
    }

    /// The manager's requests as the API server's audit log has them, in the provisioning window
    /// (`before` to `after`) and the idle one (`after` to `idle`). Read once the phase is over:
    /// the server writes a request's event before it answers it. `None` without an audit log
    /// (or when it cannot be read: said, and the manager's own count stands alone).
    fn audited(
        &self,
        manager: &Manager,
        before: &Reading,
        after: &Reading,
        idle: Option<&Reading>,
    ) -> Option<Audited> {
        let (log, user) = (self.cfg.audit_log.as_ref()?, manager.username.as_ref()?);
        let mut windows = vec![(before.at, after.at)];
        if let Some(i) = idle {
            windows.push((after.at, i.at));
        }
        match audit::count(log, user, &windows) {
            Ok(mut counts) => {
                let idle = (counts.len() > 1).then(|| counts.remove(1));
                Some(Audited {
                    provision: counts.remove(0),
                    idle,
                })
            }
            Err(e) => {
                say(&format!("WARNING: no audit count for {user}: {e:#}"));
                None
            }
        }
    }

    async fn reading(&self, manager: &Manager) -> Result<Reading> {
        let counters = manager.counters().await?;
        Ok(Reading {
            at: chrono::Utc::now(),
            usage: manager.usage(),
            api_total: counters.requests.values().sum(),
            api_by: counters.own_requests,
            errors_total: counters.errors.values().sum(),
            docker: self.counter.snapshot(),
        })
    }

    async fn install(&mut self, want: Installed) -> Result<()> {
        if self.installed == want {
            return Ok(());
        }
        match want {
            Installed::Upstream => crds::install(&self.client, &self.upstream).await?,
            Installed::Own => {
                crds::install(&self.client, &self.own).await?;
                crds::remove_extra(&self.client, &self.upstream, &self.own).await?;
            }
        }
        self.installed = want;
        if let Some(cmd) = &self.cfg.after_crd_swap {
            let status = tokio::process::Command::new("sh")
                .args(["-c", cmd])
                .stdout(std::process::Stdio::null())
                .status()
                .await?;
            if !status.success() {
                bail!("after the CRD swap, `{cmd}` failed: {status}");
            }
        }
        Ok(())
    }

    /// `in_memory`: capd-rs serves the in-memory backend (upstream always does); both listen
    /// for the workload clusters on 127.0.0.1.
    async fn start_manager(
        &self,
        subject: &str,
        id: &str,
        in_memory: bool,
        identity: Option<&audit::Identity>,
    ) -> Result<Manager> {
        let port = process::free_port()?;
        let path = identity.map_or(&self.cfg.kubeconfig, |i| &i.kubeconfig);
        let kubeconfig = format!("--kubeconfig={}", path.display());
        let log = self.cfg.work_dir.join(format!("{id}.log"));
        let env = [
            ("DOCKER_HOST", self.counter.docker_host()),
            ("POD_IP", "127.0.0.1".to_string()),
        ];
        if subject == UPSTREAM {
            let (metrics, webhook) = (process::free_port()?, process::free_port()?);
            let args = vec![
                kubeconfig,
                "--leader-elect=false".into(),
                format!("--watch-filter={id}"),
                format!("--health-addr=127.0.0.1:{port}"),
                format!("--diagnostics-address=127.0.0.1:{metrics}"),
                "--insecure-diagnostics".into(),
                format!("--webhook-port={webhook}"),
                format!("--webhook-cert-dir={}", self.cfg.webhook_cert_dir.display()),
            ];
            Manager::start(
                &self.cfg.upstream_manager,
                &args,
                &env,
                log,
                format!("http://127.0.0.1:{port}/readyz"),
                format!("http://127.0.0.1:{metrics}/metrics"),
            )
            .await
            .map(|m| m.as_user(identity))
        } else {
            // As upstream above: /metrics plain on its own port (the bench reads it, no auth).
            let metrics = process::free_port()?;
            let mut args = vec![
                kubeconfig,
                format!("--watch-filter={id}"),
                format!("--container-label={LABEL_KEY}={id}"),
                format!("--docker-network={id}"),
                format!("--health-addr=127.0.0.1:{port}"),
                format!("--diagnostics-address=127.0.0.1:{metrics}"),
                "--insecure-diagnostics".into(),
                format!("--lb-image={}", self.cfg.lb_image),
            ];
            if in_memory {
                args.push("--in-memory-backend".into());
            }
            Manager::start(
                &self.cfg.capd_rs_manager,
                &args,
                &env,
                log,
                format!("http://127.0.0.1:{port}/readyz"),
                format!("http://127.0.0.1:{metrics}/metrics"),
            )
            .await
            .map(|m| m.as_user(identity))
        }
    }

    /// capd-rs creates its own network (labelled with the run's id, as its containers);
    /// upstream expects `kind` to exist: the bench makes it, labelled, if it is missing.
    async fn ensure_network(&self, subject: &str, id: &str) -> Result<()> {
        if subject != UPSTREAM {
            return Ok(());
        }
        let opts = ListNetworksOptionsBuilder::new()
            .filters(&HashMap::from([("name", vec![UPSTREAM_NETWORK])]))
            .build();
        let exists = self
            .docker
            .list_networks(Some(opts))
            .await?
            .iter()
            .any(|n| n.name.as_deref() == Some(UPSTREAM_NETWORK));
        if !exists {
            self.create_network(UPSTREAM_NETWORK, id).await?;
        }
        Ok(())
    }

    /// The networks labelled with the run's id: the floor's, capd-rs's own, and `kind` when
    /// the bench made it.
    async fn remove_networks(&self, id: &str) {
        let label = format!("{LABEL_KEY}={id}");
        let opts = ListNetworksOptionsBuilder::new()
            .filters(&HashMap::from([("label", vec![label.as_str()])]))
            .build();
        for net in self
            .docker
            .list_networks(Some(opts))
            .await
            .unwrap_or_default()
        {
            let Some(name) = net.name else { continue };
            if let Err(e) = self.docker.remove_network(&name).await {
                say(&format!(
                    "WARNING: network {name} of run {id} not removed: {e}"
                ));
            }
        }
    }

    async fn create_network(&self, name: &str, id: &str) -> Result<()> {
        self.docker
            .create_network(bollard::models::NetworkCreateRequest {
                name: name.to_string(),
                labels: Some(HashMap::from([(LABEL_KEY.to_string(), id.to_string())])),
                ..Default::default()
            })
            .await?;
        Ok(())
    }

    /// Proof that the provider did the work it reported: the bootstrap's file exists in every
    /// machine's container (read on the engine directly, not through the counting relay).
    /// `machines`: those of Cluster `cluster` of run `id`.
    async fn check_bootstrapped(
        &self,
        subject: &str,
        id: &str,
        cluster: &str,
        machines: &[String],
        t0: DateTime<Utc>,
        reported: &BTreeMap<String, Duration>,
    ) -> Result<Vec<MachineTimes>> {
        let containers = self
            .containers(&container_label(subject, id, cluster))
            .await?;
        let container_of = |m: &String| {
            containers
                .iter()
                .find(|c| {
                    *c == m || c.ends_with(&format!("-{m}")) || **c == format!("{cluster}-{m}")
                })
                .cloned()
        };
        let missing: Vec<&String> = machines
            .iter()
            .filter(|m| container_of(m).is_none())
            .collect();
        if !missing.is_empty() {
            bail!(
                "{subject}: no container for {} machine(s), e.g. {}",
                missing.len(),
                missing[0]
            );
        }
        let since = |t: DateTime<Utc>| (t - t0).as_seconds_f64();
        let looked: Vec<(String, Option<MachineTimes>)> = stream::iter(machines)
            .map(|m| {
                let c = container_of(m).unwrap_or_default();
                async move {
                    // The bootstrap's first file and its sentinel, and when each was written.
                    let out = self
                        .exec_out(&c, &format!("test -s {HELLO} && test -f {SENTINEL} && stat -c %.9Y {HELLO} {SENTINEL}"))
                        .await;
                    let started = self
                        .docker
                        .inspect_container(&c, None)
                        .await
                        .ok()
                        .and_then(|i| i.state?.started_at)
                        .and_then(|t| t.parse::<DateTime<Utc>>().ok());
                    let times = out.zip(started).and_then(|(out, started)| {
                        let mut at = out.lines().filter_map(epoch);
                        Some(MachineTimes {
                            machine: m.clone(),
                            container_started_s: since(started),
                            bootstrap_began_s: since(at.next()?),
                            bootstrap_ended_s: since(at.next()?),
                            reported_s: reported.get(m)?.as_secs_f64(),
                        })
                    });
                    (c, times)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let failed: Vec<&String> = looked
            .iter()
            .filter(|(_, t)| t.is_none())
            .map(|(c, _)| c)
            .collect();
        if !failed.is_empty() {
            bail!(
                "{subject}: bootstrap not done in {} container(s), e.g. {}",
                failed.len(),
                failed[0]
            );
        }
        Ok(looked.into_iter().filter_map(|(_, t)| t).collect())
    }

    /// What `script` printed in `container`, if it ran there and exited 0.
    async fn exec_out(&self, container: &str, script: &str) -> Option<String> {
        let exec = self
            .docker
            .create_exec(
                container,
                CreateExecOptions {
                    cmd: Some(vec!["sh", "-c", script]),
                    attach_stdout: Some(true),
                    ..Default::default()
                },
            )
            .await
            .ok()?;
        let mut out = String::new();
        if let Ok(StartExecResults::Attached { mut output, .. }) =
            self.docker.start_exec(&exec.id, None).await
        {
            while let Some(Ok(chunk)) = output.next().await {
                out.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
        }
        let done = self.docker.inspect_exec(&exec.id).await.ok()?;
        (done.exit_code == Some(0)).then_some(out)
    }

    /// Names of the containers that carry `label` (`key=value`).
    async fn containers(&self, label: &str) -> Result<Vec<String>> {
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&HashMap::from([("label", vec![label])]))
            .build();
        Ok(self
            .docker
            .list_containers(Some(opts))
            .await?
            .into_iter()
            .flat_map(|c| c.names.unwrap_or_default())
            .map(|n| n.trim_start_matches('/').to_string())
            .collect())
    }

    /// Anything of run `id`'s Clusters `clusters` the provider left behind.
    async fn remove_containers(&self, subject: &str, id: &str, clusters: &[&str]) {
        let mut labels: Vec<String> = clusters
            .iter()
            .map(|c| container_label(subject, id, c))
            .collect();
        labels.dedup();
        let mut left = Vec::new();
        for label in &labels {
            left.extend(self.containers(label).await.unwrap_or_default());
        }
        if !left.is_empty() && subject != FLOOR {
            say(&format!(
                "WARNING: {subject} left {} container(s) after deletion",
                left.len()
            ));
        }
        for c in left {
            let opts = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            let _ = self.docker.remove_container(&c, Some(opts)).await;
        }
    }
}

/// The label (`key=value`) of Cluster `cluster`'s containers in run `id`: upstream labels them
/// with their Cluster's name (it has no flag for ours), capd-rs and the floor with the run's id
/// (every Cluster's alike).
fn container_label(subject: &str, id: &str, cluster: &str) -> String {
    if subject == UPSTREAM {
        format!("{UPSTREAM_CLUSTER_LABEL}={cluster}")
    } else {
        format!("{LABEL_KEY}={id}")
    }
}

/// The subjects' order in `round`: row `round` of a Williams design. Over every
/// [`williams_rows`] rounds each subject runs in each position equally often and directly after
/// each other subject equally often, so neither a position nor what ran before (a warm cache, an
/// engine still busy removing) favours one subject. Row 0 keeps the given order.
pub fn williams<'a>(subjects: &[&'a str], round: usize) -> Vec<&'a str> {
    let n = subjects.len();
    if n == 0 {
        return Vec::new();
    }
    // The first row 0, 1, n-1, 2, n-2, ...; row r adds r (mod n); with an odd n the second n
    // rows are the first n reversed, which balances the carry-over.
    let first = (0..n).map(|j| match j {
        0 => 0,
        j if j % 2 == 1 => j.div_ceil(2),
        j => n - j / 2,
    });
    let row = round % williams_rows(n);
    let mut order: Vec<&str> = first.map(|k| subjects[(k + row) % n]).collect();
    if row >= n {
        order.reverse();
    }
    order
}

/// How many rounds make a balanced Williams design for `n` subjects: n when n is even, 2n when
/// it is odd (three subjects: six rounds).
pub fn williams_rows(n: usize) -> usize {
    if n % 2 == 1 && n > 1 { 2 * n } else { n.max(1) }
}

/// A phase's deletion time, or `None` when the deletion failed: said, and the run keeps the
/// figures it already has (the phase's teardown then removes what is left). A 500-Cluster
/// in-memory run once lost half an hour of provisioning figures to its deletion's error.
fn deletion_time(deleted: Result<Duration>) -> Option<f64> {
    match deleted {
        Ok(d) => Some(d.as_secs_f64()),
        Err(e) => {
            say(&format!(
                "WARNING: {e:#}; the run is kept without its deletion time"
            ));
            None
        }
    }
}

fn cpu_delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

struct Reading {
    at: chrono::DateTime<chrono::Utc>,
    usage: Usage,
    api_total: u64,
    /// capd-rs's requests by verb and resource (empty for upstream).
    api_by: BTreeMap<String, u64>,
    errors_total: u64,
    docker: BTreeMap<String, u64>,
}

/// A manager's requests by verb and resource, counted at the API server (see [`audit`]).
struct Audited {
    provision: BTreeMap<String, u64>,
    idle: Option<BTreeMap<String, u64>>,
}

/// `run` with its manager's figures: CPU and API requests while provisioning (`before` to
/// `after`), while nothing changed (`after` to `idle`, a window of that length), and its peak
/// RSS and CPU at the `end` of the phase.
fn with_manager(
    run: Run,
    before: &Reading,
    after: &Reading,
    idle: Option<(&Reading, Duration)>,
    end: &Usage,
    audit: Option<Audited>,
) -> Run {
    let (audit_requests_by, idle_audit_requests) = match audit {
        Some(a) => (a.provision, a.idle.map(|i| i.values().sum())),
        None => (BTreeMap::new(), None),
    };
    Run {
        audit_requests: (!audit_requests_by.is_empty()).then(|| audit_requests_by.values().sum()),
        audit_requests_by,
        idle_audit_requests,
        peak_rss_mib: Some(end.peak_rss_mib),
        provision_cpu_s: Some(after.usage.cpu_s - before.usage.cpu_s),
        total_cpu_s: Some(end.cpu_s),
        idle_cpu_pct: idle
            .map(|(i, window)| 100.0 * (i.usage.cpu_s - after.usage.cpu_s) / window.as_secs_f64()),
        api_requests: Some(after.api_total - before.api_total),
        api_requests_by: after
            .api_by
            .iter()
            .map(|(k, v)| (k.clone(), v - before.api_by.get(k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v > 0)
            .collect(),
        idle_api_requests: idle.map(|(i, _)| i.api_total - after.api_total),
        reconcile_errors: Some(after.errors_total - before.errors_total),
        ..run
    }
}

/// Every measured window starts on a quiet host (see [`process::settle`]).
async fn quiet(drop_caches: bool, limit: Duration) {
    let busy = process::settle(limit, drop_caches).await;
    if busy >= process::QUIET_BUSY {
        say(&format!(
            "WARNING: host still {:.0}% busy after {} s; measuring anyway",
            busy * 100.0,
            limit.as_secs()
        ));
    }
}

/// How long a phase waits for the host to be quiet before it measures.
const SETTLE: Duration = Duration::from_secs(30);
/// ... an in-memory phase, which may follow the teardown of hundreds of Clusters: in the pairs
/// load of 1,000 machines, upstream's phase started with the host still 99% busy from capd-rs's
/// teardown after the light loads' 30 s.
const IN_MEMORY_SETTLE: Duration = Duration::from_secs(300);

fn say(msg: &str) {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() % 86_400)
        .unwrap_or(0);
    eprintln!(
        "{:02}:{:02}:{:02} [bench] {msg}",
        t / 3600,
        t / 60 % 60,
        t % 60
    );
}

fn now_rfc3339() -> String {
    std::process::Command::new("date")
        .arg("-Is")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

async fn host_description(docker: &Docker) -> String {
    let engine = docker
        .version()
        .await
        .ok()
        .map(|v| {
            format!(
                "Docker Engine {} (API {})",
                v.version.unwrap_or_default(),
                v.api_version.unwrap_or_default()
            )
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {engine}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DNS label: what namespaces, and hostnames of containers, must be.
    fn dns_label(s: &str) -> bool {
        (1..=63).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    /// A run of `load` as the bench records it.
    fn recorded(subject: &str, load: Load, round: usize) -> Run {
        let base = Run {
            subject: subject.into(),
            round,
            ..Default::default()
        };
        match load {
            Load::Light(l) => Run {
                workload: report::LIGHT.into(),
                n: l.n,
                clusters: l.spread(),
                ..base
            },
            Load::Nodes(s) => Run {
                workload: NODES.into(),
                n: s.control_planes + s.workers,
                control_planes: Some(s.control_planes),
                ..base
            },
            Load::InMemory(shape, n) => Run {
                workload: shape.workload().into(),
                n,
                ..base
            },
        }
    }

    #[test]
    fn a_resumed_run_skips_exactly_the_phases_on_record() {
        let light = Load::Light(LightLoad::one(100));
        let spread = Load::Light(LightLoad {
            n: 100,
            clusters: 10,
        });
        let nodes = |control_planes, workers| {
            Load::Nodes(NodeShape {
                control_planes,
                workers,
            })
        };
        let report = report::Report {
            runs: vec![
                recorded(CAPD_RS, light, 0),
                recorded(UPSTREAM, nodes(3, 5), 1),
                recorded(CAPD_RS, Load::InMemory(Shape::Pairs, 1000), 0),
            ],
            ..Default::default()
        };
        assert!(on_record(&report, CAPD_RS, light, 0));
        assert!(!on_record(&report, CAPD_RS, light, 1), "another round");
        assert!(!on_record(&report, UPSTREAM, light, 0), "another subject");
        assert!(!on_record(&report, CAPD_RS, spread, 0), "the same N spread");
        assert!(on_record(&report, UPSTREAM, nodes(3, 5), 1));
        assert!(
            !on_record(&report, UPSTREAM, nodes(1, 7), 1),
            "the same N, one control plane"
        );
        assert!(on_record(
            &report,
            CAPD_RS,
            Load::InMemory(Shape::Pairs, 1000),
            0
        ));
        assert!(!on_record(
            &report,
            CAPD_RS,
            Load::InMemory(Shape::One, 1000),
            0
        ));
    }

    #[test]
    fn only_a_run_of_the_same_code_and_command_on_the_same_host_is_resumed() {
        let path = std::env::temp_dir().join(format!("bench-resume-{}.json", std::process::id()));
        let old = report::Report {
            date: "2026-12-07T10:00:00Z".into(),
            host: "2 cores, Docker Engine 29.1.2 (API 1.52)".into(),
            command: "BENCH_ROUNDS=6 hack/bench.sh 100".into(),
            code: "c16dcce".into(),
            runs: vec![recorded(CAPD_RS, Load::Light(LightLoad::one(100)), 0)],
            ..Default::default()
        };
        std::fs::write(&path, serde_json::to_string(&old).unwrap()).unwrap();
        let fresh = |code: &str, command: &str, host: &str| report::Report {
            date: "2026-12-08T09:00:00Z".into(),
            host: host.into(),
            command: command.into(),
            code: code.into(),
            ..Default::default()
        };
        let went_on = resumed(&path, fresh("c16dcce", &old.command, &old.host)).unwrap();
        assert_eq!(went_on.runs.len(), 1);
        assert_eq!(went_on.date, old.date);
        assert_eq!(went_on.resumed, ["2026-12-08T09:00:00Z"]);
        let refused = |code: &str, command: &str, host: &str, why: &str| {
            let e = resumed(&path, fresh(code, command, host)).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
        };
        refused("c16dcce", "hack/bench.sh 100", &old.host, "command");
        refused(
            "c16dcce",
            &old.command,
            "4 cores, Docker Engine 29.1.2 (API 1.52)",
            "host",
        );
        refused("1636408", &old.command, &old.host, "code");
        refused("c16dcce-dirty", &old.command, &old.host, "uncommitted");
        refused("", &old.command, &old.host, "not known");
        std::fs::remove_file(&path).unwrap();
        refused("c16dcce", &old.command, &old.host, "reading");
    }

    #[test]
    fn every_load_names_its_run_with_dns_labels_and_apart_from_the_others() {
        let light = |n, clusters| Load::Light(LightLoad { n, clusters });
        let nodes = |control_planes, workers| {
            Load::Nodes(NodeShape {
                control_planes,
                workers,
            })
        };
        assert_eq!(
            run_id(CAPD_RS, light(100, 1), 0, 12_345),
            "bench-rs-n100-r1-2345"
        );
        assert_eq!(
            run_id(UPSTREAM, light(100, 10), 5, 7),
            "bench-up-n100x10-r6-0007"
        );
        assert_eq!(
            run_id(FLOOR, light(100, 10), 0, 7),
            "bench-fl-n100x10-r1-0007"
        );
        assert_eq!(run_id(CAPD_RS, nodes(1, 2), 0, 7), "bench-rs-cp1w2-r1-0007");
        assert_eq!(run_id(CAPD_RS, nodes(3, 5), 0, 7), "bench-rs-cp3w5-r1-0007");
        // The longest names of a large spread run: its last Cluster's namespace and last
        // machine (the containers take the machine's name, which starts with the Cluster's).
        let id = run_id(UPSTREAM, light(5000, 100), 11, 9999);
        let clusters = objects::cluster_names(&id, 100);
        let last = clusters.last().unwrap();
        assert_eq!(last, "bench-up-n5000x100-r12-9999-c99");
        for name in [last.clone(), format!("{last}-w-49"), format!("{last}-lb")] {
            assert!(dns_label(&name), "{name}");
        }
        // One Cluster keeps the run's id as its name and namespace, as before spread loads.
        assert_eq!(objects::cluster_names(&id, 1), [id.as_str()]);
        assert_eq!(objects::cluster_names("r", 3), ["r-c0", "r-c1", "r-c2"]);
    }

    #[test]
    fn a_failed_deletion_is_no_time_and_no_error() {
        assert_eq!(deletion_time(Ok(Duration::from_millis(1500))), Some(1.5));
        assert_eq!(
            deletion_time(Err(anyhow::anyhow!(
                "connection closed before message completed"
            ))),
            None
        );
    }

    #[test]
    fn a_full_williams_cycle_balances_positions_and_predecessors() {
        let s = [FLOOR, CAPD_RS, UPSTREAM];
        assert_eq!(williams(&s, 0), s, "row 0 keeps the order");
        assert_eq!(williams_rows(3), 6);
        assert_eq!(williams(&s, 6), s, "the cycle repeats");
        assert!(williams(&[], 1).is_empty());
        let names = ["a", "b", "c", "d", "e"];
        for n in 1..=5 {
            let subjects = &names[..n];
            let rows = williams_rows(n);
            let mut position = BTreeMap::new();
            let mut follows = BTreeMap::new();
            for round in 0..rows {
                let order = williams(subjects, round);
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, subjects, "each round runs every subject once");
                for (i, s) in order.iter().enumerate() {
                    *position.entry((i, *s)).or_insert(0) += 1;
                }
                for w in order.windows(2) {
                    *follows.entry((w[0], w[1])).or_insert(0) += 1;
                }
            }
            // Every subject in every position, and after every other subject, equally often.
            assert_eq!(position.len(), n * n, "n={n}: {position:?}");
            let once = rows / n;
            assert!(position.values().all(|c| *c == once), "n={n}: {position:?}");
            assert_eq!(follows.len(), n * (n - 1), "n={n}: {follows:?}");
            let counts: Vec<i32> = follows.values().copied().collect();
            assert!(
                counts.windows(2).all(|w| w[0] == w[1]),
                "n={n}: {follows:?}"
            );
        }
    }
}
