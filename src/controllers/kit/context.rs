//! What every reconcile shares: clients, settings, metrics, backoff and in-flight work
//! ([`Shared`], one per manager), and what one family of controllers adds ([`Context`]).
use std::{
    collections::{BTreeMap, HashMap},
    ops::Deref,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::channel::mpsc::UnboundedSender;
use kube::{
    Api, Client,
    runtime::{
        events::{Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
};

use super::{
    backoff::{Backoff, Restarts},
    bootstrap_tasks::BootstrapTasks,
    caches::{self, Caches},
    error::Result,
    kinds::Kinds,
    patch::OwnWrites,
    workload::WorkloadClients,
};
use crate::{
    api::{DockerCluster, DockerMachine, dev::DevCluster},
    docker::{ContainerRuntime, NodePrivilege, host_paths::HostPathPolicy},
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
    /// Bootstraps running at once (each is a stream of execs into a node); more wait in line.
    pub max_bootstraps: usize,
    /// Which host paths `spec.extraMounts` may name.
    pub host_paths: HostPathPolicy,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            lb_image: crate::docker::specs::DEFAULT_LB_IMAGE.into(),
            node_privilege: NodePrivilege::Privileged,
            bootstrap_timeout: crate::api::DEFAULT_BOOTSTRAP_TIMEOUT,
            network: "kind".into(),
            extra_labels: BTreeMap::new(),
            resync: Duration::from_secs(600),
            cgroup_v1: false,
            max_bootstraps: 10,
            host_paths: HostPathPolicy::default(),
        }
    }
}

/// What both families of controllers share (one per manager).
pub struct Shared {
    pub client: Client,
    pub runtime: Arc<dyn ContainerRuntime>,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    /// Cluster, Machine and MachinePool as the watches last saw them.
    pub caches: Caches,
    pub backoff: Backoff,
    /// Per object: waits on a condition that persists though the reconcile itself succeeds (a
    /// load balancer without an address, a Node not there yet, a pool not scaled yet). Unlike
    /// [`Self::backoff`], a successful pass does not reset it: only the wait ending does.
    pub waits: Backoff,
    /// Per object: starts of a container that keeps stopping (see [`Restarts`]).
    pub restarts: Restarts,
    pub bootstraps: BootstrapTasks,
    /// Clients for workload clusters (to set Node providerIDs).
    pub workload: WorkloadClients,
    pub lb_locks: LbLocks,
    /// Our last write to each object (see [`OwnWrites`]).
    pub own_writes: OwnWrites,
    /// Publishes Kubernetes Events (see [`super::events`]).
    pub recorder: Recorder,
    /// The in-memory backend, when served (`--in-memory-backend`).
    pub in_memory: Option<Arc<crate::inmemory::Cloud>>,
}

impl Shared {
    pub fn new(
        client: Client,
        runtime: Arc<dyn ContainerRuntime>,
        settings: Settings,
        metrics: Arc<Metrics>,
        caches: Caches,
    ) -> Self {
        let reporter = Reporter {
            controller: "capd-rs".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            runtime,
            bootstraps: BootstrapTasks::new(settings.max_bootstraps),
            settings,
            metrics,
            caches,
            backoff: Backoff::new(Duration::from_secs(2), Duration::from_secs(120)),
            waits: Backoff::new(Duration::from_secs(2), Duration::from_secs(300)),
            restarts: Restarts::default(),
            workload: WorkloadClients::default(),
            lb_locks: LbLocks::default(),
            own_writes: OwnWrites::default(),
            in_memory: None,
        }
    }

    /// How many objects each in-memory map holds (exported as `capd_tracked_objects`: they
    /// must return to zero once the objects are gone, or the manager leaks).
    pub fn tracked(&self) -> Vec<(String, u64)> {
        [
            ("backoff", self.backoff.len()),
            ("waits", self.waits.len()),
            ("restarts", self.restarts.len()),
            ("own_writes", self.own_writes.len()),
            ("bootstraps", self.bootstraps.len()),
            ("workload_clients", self.workload.len()),
            ("lb_locks", self.lb_locks.len()),
        ]
        .into_iter()
        .chain(self.in_memory.iter().flat_map(|c| c.tracked()))
        .map(|(map, n)| (map.to_string(), n as u64))
        .collect()
    }

    /// Remove whatever carries an object's UID: its containers and volumes, a bootstrap task, a
    /// simulated machine. What an object let go without its owners (deleted before it had one,
    /// or of a backend this provider does not serve) may have left.
    pub async fn release(&self, uid: &str) -> Result<()> {
        if let Some(cloud) = &self.in_memory {
            cloud.forget_machine(uid);
        }
        self.bootstraps.cancel(uid);
        crate::docker::remove_owned_by(self.runtime.as_ref(), uid).await?;
        Ok(())
    }

    /// Drop everything kept in memory for an object whose finalizer was just removed.
    pub fn forget(&self, backoff_key: &str, uid: &str) {
        self.backoff.reset(backoff_key);
        self.waits.reset(backoff_key);
        self.restarts.forget(backoff_key);
        self.own_writes.forget(uid);
    }
}

/// The context of one family of controllers ([`Kinds`]): the shared parts, the family's
/// cluster objects (as DockerCluster views) and the channel that wakes its machines.
pub struct Context {
    pub shared: Arc<Shared>,
    pub kinds: Kinds,
    /// The family's cluster objects, as the cluster controller's watch last saw them.
    pub infra_clusters: Store<DockerCluster>,
    /// Wakes a machine's reconcile from background work (a finished bootstrap).
    pub wake: UnboundedSender<ObjectRef<DockerMachine>>,
}

impl Deref for Context {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Context {
    /// The manager's in-memory backend, for an arm of a view marked in-memory. A view is marked
    /// only when the backend is served, so its absence is a wiring fault: reported under
    /// `condition`, never panicked on.
    pub fn in_memory(&self, condition: &'static str) -> Result<&crate::inmemory::Cloud> {
        self.shared.in_memory.as_deref().ok_or_else(|| {
            super::error::Error::blocked(
                condition,
                crate::api::conditions::reasons::BACKEND_NOT_SERVED,
                "the in-memory backend is not served by this manager",
                Duration::from_secs(300),
            )
        })
    }

    /// The family's cluster object `namespace/name` (a DevCluster as its view), from the
    /// cache, or from the API server when the cache has not seen it (yet).
    pub async fn infra_cluster(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<DockerCluster>>> {
        if !self.kinds.is_dev() {
            return caches::get(&self.infra_clusters, &self.client, namespace, name).await;
        }
        if let Some(view) = self
            .infra_clusters
            .get(&ObjectRef::new(name).within(namespace))
        {
            return Ok(Some(view));
        }
        Ok(
            Api::<DevCluster>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await?
                .map(|dc| Arc::new(dc.view_serving(self.in_memory.is_some()))),
        )
    }
}

/// One lock per cluster around haproxy.cfg rewrites, so two machines never interleave them.
/// Locks nobody holds are dropped whenever another is taken: the map stays as small as the
/// number of clusters being synced at that moment.
#[derive(Default)]
pub struct LbLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl LbLocks {
    pub fn lock(&self, namespace: &str, cluster: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks
            .entry(format!("{namespace}/{cluster}"))
            .or_default()
            .clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lb_locks_are_pruned_once_released() {
        let locks = LbLocks::default();
        let a = locks.lock("ns", "a");
        let again = locks.lock("ns", "a");
        assert!(Arc::ptr_eq(&a, &again), "one lock per cluster");
        drop((a, again));
        let _b = locks.lock("ns", "b");
        assert_eq!(locks.len(), 1, "the released lock of cluster a is gone");
    }
}
