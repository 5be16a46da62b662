//! Shared harness of the integration tests: the real local plane (kube-apiserver + etcd started
//! by `hack/plane.sh up`), the real Docker Engine, and the real manager binary as a child process.
//!
//! Every test gets a unique id. Its objects carry `cluster.x-k8s.io/watch-filter=<id>` (its
//! manager only sees them), its containers and network carry `capd-rs.test/run=<id>`, and cleanup
//! removes exactly what carries that label.
#![allow(dead_code)]

pub mod capi_e2e;
pub mod docker_proxy;
pub mod rbac;
pub mod workload;

use std::{
    collections::BTreeMap,
    future::Future,
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use capd::{
    api::{DockerCluster, DockerMachine},
    docker::{ContainerInfo, ContainerRuntime, engine::BollardRuntime},
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

pub const TEST_LABEL: &str = "capd-rs.test/run";
pub const NODE_IMAGE: &str = "capd-rs/node:light";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The hack/ scripts' cache (binaries, plane state): `$CAPD_RS_CACHE`, else `~/.cache/capd-rs`,
/// as in `hack/lib.sh`.
pub fn cache_dir() -> PathBuf {
    match std::env::var("CAPD_RS_CACHE") {
        Ok(dir) => dir.into(),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
            .join(".cache/capd-rs"),
    }
}

/// The plane's kubeconfig: `$CAPD_RS_KUBECONFIG`, else where `hack/plane.sh up` writes it.
pub fn kubeconfig_path() -> PathBuf {
    if let Ok(p) = std::env::var("CAPD_RS_KUBECONFIG") {
        return p.into();
    }
    let plane = std::env::var("CAPD_RS_PLANE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| cache_dir().join("plane"));
    plane.join("kubeconfig")
}

/// A client for the local plane. Panics (the test fails, never skips) when it is not up.
pub async fn client() -> Client {
    let path = kubeconfig_path();
    let kc = Kubeconfig::read_from(&path).unwrap_or_else(|e| {
        panic!(
            "local plane not set up ({}: {e}); run `hack/plane.sh up` first",
            path.display()
        )
    });
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    let client = Client::try_from(config).expect("client");
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!("local plane API server not answering: {e}; run `hack/plane.sh up`")
    });
    client
}

pub async fn docker() -> BollardRuntime {
    BollardRuntime::connect(engine_host().as_deref())
        .await
        .expect("Docker Engine not reachable; run `hack/docker-engine.sh`")
}

/// The engine the tests and the managers they start talk to: `DOCKER_HOST` when set (e.g.
/// `unix:///run/capd-rs/podman.sock`, Podman's Docker API from `hack/podman.sh`), else the
/// default socket.
pub fn engine_host() -> Option<String> {
    std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty())
}

/// GET the /metrics of a manager's diagnostics server on `port`: HTTPS with `token` as bearer
/// (the certificate is self-signed, made at the manager's start: not verified), else plain HTTP.
pub async fn scrape(port: u16, token: Option<&str>) -> reqwest::Result<reqwest::Response> {
    match token {
        Some(token) => {
            reqwest::Client::builder()
                .danger_accept_invalid_certs(true)
                .build()?
                .get(format!("https://127.0.0.1:{port}/metrics"))
                .bearer_auth(token)
                .send()
                .await
        }
        None => reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await,
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Everything one test owns.
pub struct TestEnv {
    pub id: String,
    pub client: Client,
    pub docker: BollardRuntime,
    pub network: String,
    pub manager: Option<Manager>,
    /// What the manager authenticates with: the shipped ClusterRole's ServiceAccount, unless a
    /// test binds another one.
    pub manager_kubeconfig: PathBuf,
    /// A restarted API server answers 403 until its authorizer has synced: fault tests that
    /// restart it set this, so those refusals do not fail them.
    pub forbidden_expected: bool,
    /// A bearer token allowed to get /metrics: managers started while it is set serve /metrics
    /// as in production (HTTPS, token and access reviews) and are scraped with it; without it
    /// they run with --insecure-diagnostics (plain HTTP, no auth).
    pub metrics_token: Option<String>,
}

/// The manager binary running as a child process for one test.
pub struct Manager {
    pub child: Child,
    pub health_port: u16,
    /// Port of /metrics (--diagnostics-address).
    pub diagnostics_port: u16,
    /// The token its /metrics is scraped with; None: plain HTTP, no auth.
    pub metrics_token: Option<String>,
    pub log: PathBuf,
}

impl Manager {
    /// SIGKILL: no graceful shutdown (for restart tests).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
        None
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Record the Kubernetes requests this manager made (tests/common/rbac.rs); call before it
    /// is killed, or they are lost.
    pub async fn record_rbac_usage(&self) {
        if let Ok(metrics) = scrape(self.diagnostics_port, self.metrics_token.as_deref()).await {
            rbac::record_usage(&metrics.text().await.unwrap_or_default());
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.kill();
    }
}

impl TestEnv {
    pub async fn new(name: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // Short: it goes into container names.
        let id = format!(
            "{}{}{}",
            &name[..name.len().min(6)],
            std::process::id() % 10000,
            n
        );
        let client = client().await;
        let env = Self {
            id: id.clone(),
            manager_kubeconfig: rbac::cluster_role_kubeconfig(&client).await,
            forbidden_expected: false,
            metrics_token: None,
            client,
            docker: docker().await,
            network: format!("capd-rs-test-{id}"),
            manager: None,
        };
        env.cleanup_docker().await;
        env
    }

    /// What a test body gets: the ids, clients and the current manager's health port (0 without
    /// a manager).
    pub fn handle(&self) -> TestEnvRef {
        TestEnvRef {
            id: self.id.clone(),
            client: self.client.clone(),
            network: self.network.clone(),
            health_port: self.manager.as_ref().map_or(0, |m| m.health_port),
            diagnostics_port: self.manager.as_ref().map_or(0, |m| m.diagnostics_port),
            metrics_token: self.metrics_token.clone(),
        }
    }

    /// Start the manager for this test (watch filter = test id, test label on containers).
    pub fn start_manager(&mut self, extra_args: &[&str], docker_host: Option<&str>) {
        let filter = format!("--watch-filter={}", self.id);
        let mut args = vec![filter.as_str()];
        args.extend_from_slice(extra_args);
        self.spawn_manager(&args, docker_host);
    }

    /// A test environment with its own namespace `<id>-ns` and a manager watching only that
    /// namespace (the end-to-end tests, where the real CAPI shares the plane).
    pub async fn with_namespaced_manager(prefix: &str) -> (Self, String) {
        let mut env = Self::new(prefix).await;
        let ns = env.handle().namespace("ns").await;
        env.start_manager_in_namespace(&ns);
        (env, ns)
    }

    /// [`Self::with_namespaced_manager`], the manager started with `extra_args` too.
    pub async fn with_namespaced_manager_args(prefix: &str, extra_args: &[&str]) -> (Self, String) {
        let mut env = Self::new(prefix).await;
        let ns = env.handle().namespace("ns").await;
        let scope = format!("--namespace={ns}");
        let mut args = vec![scope.as_str()];
        args.extend_from_slice(extra_args);
        env.spawn_manager(&args, None);
        (env, ns)
    }

    /// Start the manager watching one namespace (objects CAPI creates carry no watch filter).
    pub fn start_manager_in_namespace(&mut self, namespace: &str) {
        self.spawn_manager(&[&format!("--namespace={namespace}")], None);
    }

    fn spawn_manager(&mut self, extra_args: &[&str], docker_host: Option<&str>) {
        self.manager = Some(self.launch("", extra_args, docker_host));
    }

    /// Another manager process for this test (leader election), with its own log and identity.
    pub fn spawn_another_manager(&self, name: &str, extra_args: &[&str]) -> Manager {
        let filter = format!("--watch-filter={}", self.id);
        let mut args = vec![filter.as_str()];
        args.extend_from_slice(extra_args);
        self.launch(name, &args, None)
    }

    fn launch(&self, name: &str, extra_args: &[&str], docker_host: Option<&str>) -> Manager {
        let (port, diagnostics_port) = (free_port(), free_port());
        let log = std::env::temp_dir().join(format!("capd-rs-manager-{}{name}.log", self.id));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        // CAPD_RS_MANAGER_BIN runs another build (an earlier commit's, for before/after figures).
        let bin = std::env::var("CAPD_RS_MANAGER_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_manager").to_string());
        let mut cmd = Command::new(bin);
        cmd.arg(format!(
            "--kubeconfig={}",
            self.manager_kubeconfig.display()
        ))
        .arg(format!("--health-addr=127.0.0.1:{port}"))
        .arg(format!(
            "--diagnostics-address=127.0.0.1:{diagnostics_port}"
        ))
        .args(
            self.metrics_token
                .is_none()
                .then_some("--insecure-diagnostics"),
        )
        .arg(format!("--docker-network={}", self.network))
        .arg(format!("--container-label={TEST_LABEL}={}", self.id))
        .arg("--log-level=debug")
        .args(extra_args)
        .env_remove("KUBECONFIG")
        .env_remove("DOCKER_HOST")
        // Leader-election Leases live where the test ServiceAccounts may hold them; the
        // identity in a Lease names the process.
        .env("POD_NAMESPACE", rbac::NAMESPACE)
        .env("POD_NAME", format!("{}{name}", self.id))
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file));
        // The test's own engine unless the test names another (a proxy in front of it).
        if let Some(host) = docker_host.map(str::to_string).or_else(engine_host) {
            cmd.env("DOCKER_HOST", host);
        }
        let child = cmd.spawn().expect("start manager");
        Manager {
            child,
            health_port: port,
            diagnostics_port,
            metrics_token: self.metrics_token.clone(),
            log,
        }
    }

    pub fn manager_logs(&self) -> String {
        self.manager.as_ref().map(Manager::logs).unwrap_or_default()
    }

    /// Remove every container and network carrying this test's label.
    pub async fn cleanup_docker(&self) {
        let selector = BTreeMap::from([(TEST_LABEL.to_string(), self.id.clone())]);
        for c in self.docker.list(&selector).await.unwrap_or_default() {
            let _ = self.docker.remove(&c.name).await;
        }
        let _ = Command::new("docker")
            .args([
                "network",
                "ls",
                "-q",
                "--filter",
                &format!("label={TEST_LABEL}={}", self.id),
            ])
            .output()
            .map(|o| {
                for id in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    // Engine 20.10 can keep endpoints of removed containers (moby/moby#42119),
                    // and a network left behind keeps its subnet's NAT rules on the host.
                    let endpoints = Command::new("docker")
                        .args(["network", "inspect", id, "-f"])
                        .arg("{{range $k, $v := .Containers}}{{$k}} {{end}}")
                        .output();
                    for ep in endpoints.iter().flat_map(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .split_whitespace()
                            .map(str::to_string)
                            .collect::<Vec<_>>()
                    }) {
                        let _ = Command::new("docker")
                            .args(["network", "disconnect", "-f", id, &ep])
                            .output();
                    }
                    let _ = Command::new("docker").args(["network", "rm", id]).output();
                }
            });
    }

    /// Delete every object in this test's namespaces (`<id>-*`), finalizers first: with the
    /// manager stopped nobody else would remove them, and a later manager watching all
    /// namespaces (the demo) must not find them. Then the namespaces themselves.
    pub async fn cleanup_objects(&self) {
        let namespaces = Api::<Namespace>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let kinds = [
            ("cluster.x-k8s.io", "v1beta2", "MachinePool"),
            (
                "infrastructure.cluster.x-k8s.io",
                "v1beta2",
                "DockerMachinePool",
            ),
            (
                "infrastructure.cluster.x-k8s.io",
                "v1beta2",
                "DevMachinePool",
            ),
            ("cluster.x-k8s.io", "v1beta2", "MachineDeployment"),
            ("cluster.x-k8s.io", "v1beta2", "MachineSet"),
            (
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmControlPlane",
            ),
            ("cluster.x-k8s.io", "v1beta2", "Machine"),
            ("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfig"),
            (
                "infrastructure.cluster.x-k8s.io",
                "v1beta2",
                "DockerMachine",
            ),
            ("infrastructure.cluster.x-k8s.io", "v1beta2", "DevMachine"),
            (
                "infrastructure.cluster.x-k8s.io",
                "v1beta2",
                "DockerCluster",
            ),
            ("infrastructure.cluster.x-k8s.io", "v1beta2", "DevCluster"),
            ("cluster.x-k8s.io", "v1beta2", "Cluster"),
        ];
        for ns in namespaces
            .iter()
            .map(|n| n.name_any())
            .filter(|n| n.starts_with(&format!("{}-", self.id)))
        {
            for (group, version, kind) in kinds {
                let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
                let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
                for obj in api
                    .list(&Default::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let name = obj.name_any();
                    let _ = api
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                    let _ = api.delete(&name, &DeleteParams::background()).await;
                }
            }
            let _ = Api::<Namespace>::all(self.client.clone())
                .delete(&ns, &DeleteParams::background())
                .await;
        }
    }

    /// Run the test body, then always clean up (containers, network, manager), then report.
    pub async fn run<F, Fut>(self, body: F)
    where
        F: FnOnce(TestEnvRef) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let result = tokio::spawn(body(self.handle())).await;
        self.finish(result.map_err(|e| e.into_panic())).await;
    }

    /// [`Self::run`] for a body that needs the environment itself (it kills and restarts the
    /// manager): the same cleanup and checks afterwards, even when the body panics.
    pub async fn run_mut<F>(mut self, body: F)
    where
        F: for<'a> FnOnce(&'a mut TestEnv) -> futures::future::BoxFuture<'a, ()>,
    {
        use futures::FutureExt;
        let result = std::panic::AssertUnwindSafe(body(&mut self))
            .catch_unwind()
            .await;
        self.finish(result).await;
    }

    async fn finish(mut self, result: std::thread::Result<()>) {
        if let Some(m) = &self.manager {
            m.record_rbac_usage().await;
        }
        let logs = self.manager_logs();
        if let Some(m) = self.manager.as_mut() {
            m.terminate();
        }
        self.cleanup_objects().await;
        self.cleanup_docker().await;
        if let Err(panic) = result {
            eprintln!("---- manager log ({}) ----\n{}", self.id, tail(&logs, 150));
            // Again after the log: a CI summary that keeps only the end of the output (or only
            // its start, cut inside a long backtrace) still shows what failed.
            eprintln!(
                "---- {} failed: {} ----",
                self.id,
                panic_message(panic.as_ref())
            );
            std::panic::resume_unwind(panic);
        }
        // The manager runs as the shipped ServiceAccount: a request its rules do not allow is a
        // bug in config/rbac, whatever the test was about.
        let forbidden: Vec<&str> = logs.lines().filter(|l| l.contains("forbidden")).collect();
        assert!(
            forbidden.is_empty() || self.forbidden_expected,
            "the manager was refused a request under the shipped RBAC:\n{}",
            forbidden.join("\n")
        );
    }
}

/// What a test body gets (cheap to clone, `Send`).
#[derive(Clone)]
pub struct TestEnvRef {
    pub id: String,
    pub client: Client,
    pub network: String,
    /// Port of the manager's /healthz and /readyz (0 without a manager).
    pub health_port: u16,
    /// Port of the manager's /metrics (0 without a manager).
    pub diagnostics_port: u16,
    /// The token /metrics is scraped with (None: the manager serves it plain, without auth).
    pub metrics_token: Option<String>,
}

/// The text a panic was raised with (`panic!`/`assert!` give a `String` or a `&str`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(a panic without a message)")
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Poll `f` until it returns `Some`, or fail with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Assert that `f` stays `false` for `period`.
pub async fn never<F, Fut>(period: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < period {
        assert!(!f().await, "{what}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

pub fn capi(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind))
}

impl TestEnvRef {
    /// Wait until the manager's /readyz answers 200 (it reached the engine and the API server).
    pub async fn manager_ready(&self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.health_port);
        eventually(Duration::from_secs(90), "manager ready", || async {
            reqwest::get(&url).await.ok().filter(|r| r.status() == 200)
        })
        .await;
    }

    /// Create Cluster + DockerCluster and wait until the DockerCluster is provisioned; then play
    /// CAPI core and mark the Cluster's infrastructure provisioned. Returns the DockerCluster.
    pub async fn provisioned_cluster(&self, ns: &str, name: &str) -> DockerCluster {
        let cluster = self.create_cluster(ns, name, false).await;
        self.create_docker_cluster(ns, &cluster, json!({})).await;
        let dc = eventually(
            Duration::from_secs(90),
            "DockerCluster provisioned",
            || async {
                self.docker_cluster(ns, name)
                    .await
                    .filter(|dc| cluster_provisioned(dc.status.as_ref()))
            },
        )
        .await;
        self.mark_infrastructure_provisioned(ns, name).await;
        dc
    }

    /// Total reconciles the manager has run, from its /metrics.
    pub async fn reconciles(&self) -> u64 {
        self.metric("capd_reconcile_total{").await
    }

    /// The sum of the manager's /metrics samples whose line starts with `prefix` (a metric name
    /// and the start of its label set, e.g. `capd_kube_api_requests_total{verb="get"`).
    pub async fn metric(&self, prefix: &str) -> u64 {
        let text = scrape(self.diagnostics_port, self.metrics_token.as_deref())
            .await
            .expect("metrics endpoint")
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Reconciles of the object named `name` so far, from the manager's debug log (each one
    /// logs "reconciled" with the object's reference, or "reconcile failed" with it in the error).
    pub fn reconciles_of(&self, name: &str) -> usize {
        let (debug_ref, display_ref) = (format!("name: \"{name}\""), format!("/{name}."));
        self.manager_log()
            .lines()
            .filter(|l| {
                (l.contains("reconciled") && l.contains(&debug_ref))
                    || (l.contains("reconcile failed") && l.contains(&display_ref))
            })
            .count()
    }

    pub fn manager_log(&self) -> String {
        std::fs::read_to_string(
            std::env::temp_dir().join(format!("capd-rs-manager-{}.log", self.id)),
        )
        .unwrap_or_default()
    }

    pub async fn namespace(&self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.id);
        let ns: Value =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &serde_json::from_value(ns).unwrap())
            .await
            .expect("create namespace");
        name
    }

    fn filter_labels(&self, extra: Value) -> Value {
        let mut labels = json!({ "cluster.x-k8s.io/watch-filter": self.id });
        if let (Some(l), Some(e)) = (labels.as_object_mut(), extra.as_object()) {
            l.extend(e.clone());
        }
        labels
    }

    /// A CAPI Cluster pointing at a DockerCluster of the same name.
    pub async fn create_cluster(&self, ns: &str, name: &str, paused: bool) -> DynamicObject {
        self.create_cluster_of(ns, name, paused, "DockerCluster")
            .await
    }

    /// A Cluster whose `infrastructureRef` names `infra_kind`: the watch on Clusters maps an
    /// unpause to that kind only, so a DevCluster's Cluster must say DevCluster.
    pub async fn create_cluster_of(
        &self,
        ns: &str,
        name: &str,
        paused: bool,
        infra_kind: &str,
    ) -> DynamicObject {
        let obj = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns, "labels": self.filter_labels(json!({}))},
            "spec": {
                "paused": paused,
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "services": {"cidrBlocks": ["10.128.0.0/12"]}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": infra_kind, "name": name}
            }
        });
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &capi("Cluster"));
        api.create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .expect("create Cluster")
    }

    /// A DockerCluster owned by `cluster`, as CAPI core would set it up (owner ref + label).
    pub async fn create_docker_cluster(
        &self,
        ns: &str,
        cluster: &DynamicObject,
        extra: Value,
    ) -> DockerCluster {
        let name = cluster.name_any();
        let mut obj = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerCluster",
            "metadata": {
                "name": name, "namespace": ns,
                "labels": self.filter_labels(json!({"cluster.x-k8s.io/cluster-name": name})),
                "ownerReferences": [owner_ref(cluster, "Cluster")]
            },
            "spec": {}
        });
        merge(&mut obj, extra);
        Api::<DockerCluster>::namespaced(self.client.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .expect("create DockerCluster")
    }

    /// A DevCluster owned by `cluster`, with `backend` as its spec.backend.
    pub async fn create_dev_cluster(
        &self,
        ns: &str,
        cluster: &DynamicObject,
        backend: Value,
    ) -> capd::api::dev::DevCluster {
        let name = cluster.name_any();
        let obj = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DevCluster",
            "metadata": {
                "name": name, "namespace": ns,
                "labels": self.filter_labels(json!({"cluster.x-k8s.io/cluster-name": name})),
                "ownerReferences": [owner_ref(cluster, "Cluster")]
            },
            "spec": {"backend": backend}
        });
        Api::<capd::api::dev::DevCluster>::namespaced(self.client.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .expect("create DevCluster")
    }

    /// Play CAPI core: mark the Cluster's infrastructure provisioned.
    pub async fn mark_infrastructure_provisioned(&self, ns: &str, cluster: &str) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &capi("Cluster"));
        let patch = json!({"status": {"initialization": {"infrastructureProvisioned": true}}});
        api.patch_status(cluster, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch Cluster status");
    }

    pub async fn set_cluster_paused(&self, ns: &str, cluster: &str, paused: bool) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &capi("Cluster"));
        api.patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": paused}})),
        )
        .await
        .expect("patch Cluster paused");
    }

    /// A bootstrap data Secret (`value` and, when given, `format`).
    pub async fn create_secret(
        &self,
        ns: &str,
        name: &str,
        value: Option<&str>,
        format: Option<&str>,
    ) {
        self.create_secret_of_type(ns, name, value, format, "cluster.x-k8s.io/secret")
            .await;
    }

    pub async fn create_secret_of_type(
        &self,
        ns: &str,
        name: &str,
        value: Option<&str>,
        format: Option<&str>,
        type_: &str,
    ) {
        let mut data = serde_json::Map::new();
        if let Some(v) = value {
            data.insert("value".into(), json!(v));
        }
        if let Some(f) = format {
            data.insert("format".into(), json!(f));
        }
        let obj = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": "x"}}, "type": type_, "stringData": data});
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .expect("create Secret");
    }

    /// A Machine and its DockerMachine (owner ref + labels as CAPI would set them).
    pub async fn create_machine(
        &self,
        ns: &str,
        cluster: &str,
        name: &str,
        control_plane: bool,
        data_secret: Option<&str>,
        dm_spec: Value,
    ) -> (DynamicObject, DockerMachine) {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
        if control_plane {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        let mut bootstrap = json!({"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}});
        if let Some(s) = data_secret {
            bootstrap = json!({"dataSecretName": s});
        }
        let machine = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns, "labels": self.filter_labels(labels.clone())},
            "spec": {
                "clusterName": cluster, "version": "v1.35.0", "bootstrap": bootstrap,
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name}
            }
        });
        let mapi: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &capi("Machine"));
        let machine = mapi
            .create(
                &PostParams::default(),
                &serde_json::from_value(machine).unwrap(),
            )
            .await
            .expect("create Machine");
        let dm = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
            "metadata": {"name": name, "namespace": ns, "labels": self.filter_labels(labels),
                         "ownerReferences": [owner_ref(&machine, "Machine")]},
            "spec": dm_spec
        });
        let dm = Api::<DockerMachine>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &serde_json::from_value(dm).unwrap())
            .await
            .expect("create DockerMachine");
        (machine, dm)
    }

    pub async fn set_machine_secret(&self, ns: &str, machine: &str, secret: &str) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &capi("Machine"));
        api.patch(
            machine,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"bootstrap": {"dataSecretName": secret}}})),
        )
        .await
        .expect("patch Machine");
    }

    pub async fn docker_cluster(&self, ns: &str, name: &str) -> Option<DockerCluster> {
        Api::<DockerCluster>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .expect("get DockerCluster")
    }

    pub async fn docker_machine(&self, ns: &str, name: &str) -> Option<DockerMachine> {
        Api::<DockerMachine>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .expect("get DockerMachine")
    }

    pub async fn delete<K>(&self, api: Api<K>, name: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }

    pub async fn delete_capi(&self, ns: &str, kind: &str, name: &str) {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &capi(kind));
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

pub fn owner_ref(owner: &DynamicObject, kind: &str) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": owner.name_any(), "uid": owner.uid().unwrap()})
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// The status and reason of a condition on an object's status.
pub fn condition<'a>(
    conditions: Option<&'a Vec<capd::api::conditions::Condition>>,
    type_: &str,
) -> Option<&'a capd::api::conditions::Condition> {
    conditions.and_then(|cs| cs.iter().find(|c| c.type_ == type_))
}

pub fn is_true(conditions: Option<&Vec<capd::api::conditions::Condition>>, type_: &str) -> bool {
    condition(conditions, type_)
        .is_some_and(|c| c.status == capd::api::conditions::ConditionStatus::True)
}

/// The non-empty output lines of a `docker` CLI call (ids, names) in the kind tests.
pub fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Seconds since the epoch (what `docker events --since/--until` take).
pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The engine's container events of one action (`create`, `start`) for the containers matching
/// a filter, recorded as they happen. Asked afterwards (`docker events --since --until`), the
/// engine answers from the last 256 events it keeps, and a busy suite (every exec is three
/// events) pushes a minute's worth out of that buffer: a count then reads 0.
pub struct ContainerEvents {
    child: std::process::Child,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(i64, String)>>>,
}

impl ContainerEvents {
    /// Start recording events of `action` for the containers matching `filter` (a
    /// `docker events --filter` value such as `container=<name>` or `label=<k>=<v>`).
    pub fn record(filter: &str, action: &str) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new("docker")
            .args([
                "events",
                "--since",
                &unix_now().to_string(),
                "--filter",
                "type=container",
                "--filter",
                filter,
                "--filter",
                &format!("event={action}"),
                "--format",
                "{{.Time}} {{.Actor.Attributes.name}}",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker events");
        let out = child.stdout.take().expect("piped");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Some((t, name)) = line.split_once(' ')
                    && let Ok(t) = t.parse()
                {
                    sink.lock().unwrap().push((t, name.to_string()));
                }
            }
        });
        Self { child, seen }
    }

    /// The names of the containers of the events from `since` to `until` (seconds since the
    /// epoch), one entry per event; waits until the stream has passed `until`.
    pub async fn between(&self, since: i64, until: i64) -> Vec<String> {
        while unix_now() <= until + 1 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| (since..=until).contains(t))
            .map(|(_, name)| name.clone())
            .collect()
    }
}

impl Drop for ContainerEvents {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A DockerCluster's (or DevCluster's) status says provisioned.
pub fn cluster_provisioned(status: Option<&capd::api::DockerClusterStatus>) -> bool {
    status
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        == Some(true)
}

/// Condition lookups on our objects' status.
pub trait Conditioned {
    fn conditions(&self) -> Option<&Vec<capd::api::conditions::Condition>>;

    fn cond(&self, type_: &str) -> Option<&capd::api::conditions::Condition> {
        condition(self.conditions(), type_)
    }

    fn cond_true(&self, type_: &str) -> bool {
        is_true(self.conditions(), type_)
    }

    /// Whether condition `type_` has reason `reason`.
    fn has_reason(&self, type_: &str, reason: &str) -> bool {
        self.cond(type_).is_some_and(|c| c.reason == reason)
    }
}

impl Conditioned for capd::api::DockerCluster {
    fn conditions(&self) -> Option<&Vec<capd::api::conditions::Condition>> {
        self.status.as_ref().and_then(|s| s.conditions.as_ref())
    }
}

impl Conditioned for capd::api::dev::DevCluster {
    fn conditions(&self) -> Option<&Vec<capd::api::conditions::Condition>> {
        self.status.as_ref().and_then(|s| s.conditions.as_ref())
    }
}

impl Conditioned for capd::api::DockerMachine {
    fn conditions(&self) -> Option<&Vec<capd::api::conditions::Condition>> {
        self.status.as_ref().and_then(|s| s.conditions.as_ref())
    }
}

/// A DockerMachine is fully provisioned: providerID in spec (written first) and the status that
/// follows it (provisioned, Ready).
pub fn fully_provisioned(dm: &capd::api::DockerMachine) -> bool {
    let status = dm.status.as_ref();
    dm.spec.provider_id.is_some()
        && status
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.provisioned)
            == Some(true)
        && is_true(status.and_then(|s| s.conditions.as_ref()), "Ready")
}

/// The docker CLI's stdout, trimmed; panics when it fails.
pub fn docker_cli_output(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(out.status.success(), "docker {args:?} failed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Run the docker CLI; the command must succeed.
pub fn docker_cli(args: &[&str]) {
    let status = std::process::Command::new("docker")
        .args(args)
        .status()
        .expect("docker CLI");
    assert!(status.success(), "docker {args:?} failed");
}

/// Run a shell command in a container and return stdout (trimmed).
/// The load balancer's haproxy.cfg, through the engine's archive (the LB image, as kind's, has
/// no shell to `cat` it with), trimmed; empty when there is none.
pub async fn lb_config(docker: &BollardRuntime, lb: &str) -> String {
    docker
        .read_file(lb, "/usr/local/etc/haproxy/haproxy.cfg", 1 << 20)
        .await
        .expect("read haproxy.cfg")
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default()
}

pub async fn exec(docker: &BollardRuntime, container: &str, script: &str) -> (i64, String) {
    let out = docker
        .exec(
            container,
            &["/bin/sh".to_string(), "-c".to_string(), script.to_string()],
            None,
        )
        .await
        .expect("exec");
    (
        out.exit_code,
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

pub async fn inspect(docker: &BollardRuntime, name: &str) -> Option<ContainerInfo> {
    docker.inspect(name).await.expect("inspect")
}
