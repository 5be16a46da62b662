//! What every reconcile shares: clients, settings, metrics, backoff and in-flight work.
use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::channel::mpsc::UnboundedSender;
use kube::{Client, runtime::reflector::ObjectRef};

use super::{backoff::Backoff, bootstrap_tasks::BootstrapTasks, workload::WorkloadClients};
use crate::{
    api::DockerMachine,
    docker::{ContainerRuntime, NodePrivilege},
    telemetry::Metrics,
};

/// Settings the controllers act on (from the manager's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Default LB image (`repository/haproxy:tag`), overridable per DockerCluster.
    pub lb_image: String,
    pub node_privilege: NodePrivilege,
    /// Default bootstrap timeout, overridable per DockerMachine.
    pub bootstrap_timeout: Duration,
    /// Docker network every container joins (created if missing).
    pub network: String,
    /// Extra labels on every container and network (e.g. a test-run id).
    pub extra_labels: BTreeMap<String, String>,
    /// Requeue period of healthy objects.
    pub resync: Duration,
    /// The engine's host runs cgroup v1 (read from the engine at start, not a flag): kubelets in
    /// nodes must be told to accept it.
    pub cgroup_v1: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            lb_image: "kindest/haproxy:v20230606-42a2262b".into(),
            node_privilege: NodePrivilege::Privileged,
            bootstrap_timeout: crate::api::DEFAULT_BOOTSTRAP_TIMEOUT,
            network: "kind".into(),
            extra_labels: BTreeMap::new(),
            resync: Duration::from_secs(600),
            cgroup_v1: false,
        }
    }
}

pub struct Context {
    pub client: Client,
    pub runtime: Arc<dyn ContainerRuntime>,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    pub bootstraps: BootstrapTasks,
    /// Clients for workload clusters (to set Node providerIDs).
    pub workload: WorkloadClients,
    /// Wakes a DockerMachine's reconcile from background work (a finished bootstrap).
    pub wake: UnboundedSender<ObjectRef<DockerMachine>>,
    /// One lock per cluster around haproxy.cfg rewrites, so two machines never interleave them.
    lb_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Context {
    pub fn new(
        client: Client,
        runtime: Arc<dyn ContainerRuntime>,
        settings: Settings,
        metrics: Arc<Metrics>,
        wake: UnboundedSender<ObjectRef<DockerMachine>>,
    ) -> Self {
        Self {
            client,
            runtime,
            settings,
            metrics,
            backoff: Backoff::new(Duration::from_secs(2), Duration::from_secs(120)),
            bootstraps: BootstrapTasks::default(),
            workload: WorkloadClients::default(),
            wake,
            lb_locks: Mutex::new(HashMap::new()),
        }
    }

    pub fn lb_lock(&self, namespace: &str, cluster: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.lb_locks.lock().unwrap_or_else(|p| p.into_inner());
        locks
            .entry(format!("{namespace}/{cluster}"))
            .or_default()
            .clone()
    }
}
