//! The one fixture of the act tests: a [`Context`] whose client talks to the in-process
//! [`ApiServer`] and whose runtime is the [`Engine`], with the CAPI caches the watches would
//! fill, plus builders for the objects a scenario seeds. A test seeds objects, calls a
//! `reconcile`, and asserts on what can be observed: the objects as stored, the requests with
//! their bodies, the containers with their labels and files.
use std::sync::{Arc, Mutex};

use k8s_openapi::{
    ByteString,
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{OwnerReference, Time},
};
use kube::{
    Resource, ResourceExt,
    runtime::{reflector, watcher},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use super::{api_server::ApiServer, engine::Engine};
use crate::controllers::kit::lifecycle::{self, Reconciler};
use crate::{
    api::{DockerCluster, DockerMachine, DockerMachinePool, dev},
    capi::{self, Cluster, Machine, MachinePool},
    controllers::{
        CacheWriters, Context, Settings, Shared, caches,
        kit::kinds::{self, Kinds},
    },
    telemetry::Metrics,
};

pub const NS: &str = "ns";

pub struct Scenario {
    pub api: ApiServer,
    pub engine: Arc<Engine>,
    pub ctx: Arc<Context>,
    writers: Mutex<CacheWriters>,
    infra_writer: Mutex<reflector::store::Writer<DockerCluster>>,
    /// Keeps the machines' wake channel open (a finished bootstrap sends on it).
    _woken: futures::channel::mpsc::UnboundedReceiver<reflector::ObjectRef<DockerMachine>>,
}

/// A kind the scenario can seed: where it is stored, and which cache (if any) holds it too.
pub trait Seed: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone {
    fn cache(&self, _s: &Scenario) {}
}

macro_rules! seed_uncached {
    ($($t:ty),*) => { $(impl Seed for $t {})* };
}
seed_uncached!(
    DockerMachine,
    DockerMachinePool,
    dev::DevCluster,
    dev::DevMachine,
    Secret
);

fn apply<K>(writer: &mut reflector::store::Writer<K>, obj: &K)
where
    K: Resource<DynamicType = ()> + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Apply(obj.clone()));
}

impl Seed for Cluster {
    fn cache(&self, s: &Scenario) {
        apply(&mut s.writers.lock().unwrap().clusters, self);
    }
}
impl Seed for Machine {
    fn cache(&self, s: &Scenario) {
        apply(&mut s.writers.lock().unwrap().machines, self);
    }
}
impl Seed for MachinePool {
    fn cache(&self, s: &Scenario) {
        apply(&mut s.writers.lock().unwrap().machine_pools, self);
    }
}
impl Seed for DockerCluster {
    fn cache(&self, s: &Scenario) {
        apply(&mut s.infra_writer.lock().unwrap(), self);
    }
}

impl Scenario {
    /// One reconcile of `obj` by the controller `R`, through the real lifecycle.
    pub async fn reconcile<R: Reconciler>(
        &self,
        obj: R::Object,
    ) -> crate::controllers::kit::error::Result<kube::runtime::controller::Action> {
        lifecycle::reconcile::<R>(std::sync::Arc::new(obj), self.ctx.clone()).await
    }

    /// The Docker* family.
    pub fn docker() -> Self {
        Self::new(kinds::DOCKER)
    }

    /// The Dev* family.
    pub fn dev() -> Self {
        Self::new(kinds::DEV)
    }

    /// The Dev* family, serving the in-memory backend with listeners on 127.0.0.1 in `ports`.
    pub fn dev_in_memory(ports: (u16, u16)) -> Self {
        Self::with(kinds::DEV, Some(ports))
    }

    /// The Docker* family on this engine (one whose execs take a while, say).
    pub fn docker_on(engine: Engine) -> Self {
        Self::on(kinds::DOCKER, None, engine)
    }

    fn new(kinds: Kinds) -> Self {
        Self::with(kinds, None)
    }

    fn with(kinds: Kinds, in_memory: Option<(u16, u16)>) -> Self {
        Self::on(kinds, in_memory, Engine::default())
    }

    fn on(kinds: Kinds, in_memory: Option<(u16, u16)>, engine: Engine) -> Self {
        let (api, client) = ApiServer::start();
        let engine = Arc::new(engine);
        let (caches, writers) = caches::caches();
        let mut shared = Shared::new(
            client,
            engine.clone(),
            Settings::default(),
            Arc::new(Metrics::default()),
            caches,
        );
        shared.in_memory =
            in_memory.map(|ports| Arc::new(crate::inmemory::Cloud::new("127.0.0.1", ports)));
        let (infra_clusters, infra_writer) = reflector::store();
        let (wake, woken) = futures::channel::mpsc::unbounded();
        let ctx = Arc::new(Context {
            shared: Arc::new(shared),
            kinds,
            infra_clusters,
            wake,
        });
        Scenario {
            api,
            engine,
            ctx,
            writers: Mutex::new(writers),
            infra_writer: Mutex::new(infra_writer),
            _woken: woken,
        }
    }

    fn path<K: Resource<DynamicType = ()>>(name: &str) -> String {
        format!("{}/{name}", K::url_path(&(), Some(NS)))
    }

    /// Store `obj` in namespace [`NS`] (and in its cache), as created: returns it with its
    /// uid and resourceVersion.
    pub fn put<K: Seed>(&self, mut obj: K) -> K {
        obj.meta_mut().namespace = Some(NS.into());
        let value = serde_json::to_value(&obj).expect("serializable");
        let stored = self.api.put(&K::url_path(&(), Some(NS)), value);
        let obj: K = serde_json::from_value(stored).expect("stored as it was sent");
        obj.cache(self);
        obj
    }

    /// `name` of kind `K` as stored now (`None`: it is gone).
    pub fn get<K: Seed>(&self, name: &str) -> Option<K> {
        let value = self.api.get(&Self::path::<K>(name))?;
        Some(serde_json::from_value(value).expect("stored objects parse"))
    }

    /// Like [`Self::get`], as JSON.
    pub fn json<K: Seed>(&self, name: &str) -> Value {
        self.api.get(&Self::path::<K>(name)).unwrap_or(Value::Null)
    }

    /// Overwrite `obj` (as another client's update would: a new resourceVersion) and put it
    /// in its cache; returns it as stored.
    pub fn update<K: Seed>(&self, obj: K) -> K {
        let value = serde_json::to_value(&obj).expect("serializable");
        let stored = self.api.replace(&Self::path::<K>(&obj.name_any()), value);
        let obj: K = serde_json::from_value(stored).expect("stored as it was sent");
        obj.cache(self);
        obj
    }

    /// Put `name` in its cache as it is stored now (as its watch event would).
    pub fn sync_cache<K: Seed>(&self, name: &str) {
        if let Some(obj) = self.get::<K>(name) {
            obj.cache(self);
        }
    }

    /// Mark `name` deleted as the API server would on a DELETE with finalizers: a
    /// deletionTimestamp, nothing removed.
    pub fn delete<K: Seed>(&self, name: &str) -> K {
        let mut obj = self.get::<K>(name).expect("exists");
        let now = k8s_openapi::jiff::Timestamp::now();
        obj.meta_mut().deletion_timestamp = Some(Time(now));
        self.update(obj)
    }
}

/// (status, reason) of condition `type_` in a stored object's `status.conditions`.
pub fn condition(obj: &Value, type_: &str) -> Option<(String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"))
        })
}

/// The message of condition `type_` in a stored object's `status.conditions`.
pub fn condition_message(obj: &Value, type_: &str) -> Option<String> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    }
}

/// Cluster `name` whose infrastructure is the `infra_kind` of the same name, provisioned
/// (CAPI core copies that from the infrastructure object; here it is simply so).
pub fn cluster(name: &str, infra_kind: &str) -> Cluster {
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-cluster-uid")},
        "spec": {"infrastructureRef": {
            "apiGroup": crate::api::GROUP, "kind": infra_kind, "name": name}},
        "status": {"initialization": {"infrastructureProvisioned": true}},
    }))
    .expect("a Cluster")
}

/// DockerCluster `name` owned by Cluster `name`.
pub fn docker_cluster(name: &str) -> DockerCluster {
    let mut dc = DockerCluster::new(name, Default::default());
    dc.metadata.owner_references = Some(vec![owner(
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        name,
        &format!("{name}-cluster-uid"),
    )]);
    dc.metadata.labels = Some([(capi::CLUSTER_NAME_LABEL.to_string(), name.to_string())].into());
    dc
}

/// DevCluster `name` owned by Cluster `name`, on `backend` (`{"inMemory": {}}`, ...).
pub fn dev_cluster(name: &str, backend: Value) -> dev::DevCluster {
    let mut dc: dev::DevCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DevCluster",
        "metadata": {"name": name},
        "spec": {"backend": backend},
    }))
    .expect("a DevCluster");
    dc.metadata.owner_references = docker_cluster(name).metadata.owner_references;
    dc
}

/// Machine `name` of cluster `cluster`, infrastructure `infra_kind` `name`, bootstrapped from
/// Secret `<name>-bootstrap`.
pub fn machine(cluster: &str, name: &str, infra_kind: &str, control_plane: bool) -> Machine {
    let mut labels = json!({ capi::CLUSTER_NAME_LABEL: cluster });
    if control_plane {
        labels[capi::CONTROL_PLANE_LABEL] = json!("");
    }
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": labels,
            "uid": format!("{name}-machine-uid")},
        "spec": {
            "clusterName": cluster,
            "version": "v1.35.0",
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {"apiGroup": crate::api::GROUP, "kind": infra_kind, "name": name},
        },
    }))
    .expect("a Machine")
}

/// DockerMachine `name` owned by Machine `name` of cluster `cluster`.
pub fn docker_machine(cluster: &str, name: &str) -> DockerMachine {
    let mut dm = DockerMachine::new(name, Default::default());
    dm.metadata.owner_references = Some(vec![owner(
        "cluster.x-k8s.io/v1beta2",
        "Machine",
        name,
        &format!("{name}-machine-uid"),
    )]);
    dm.metadata.labels = Some([(capi::CLUSTER_NAME_LABEL.to_string(), cluster.to_string())].into());
    dm
}

/// DevMachine `name` owned by Machine `name`, on `backend`.
pub fn dev_machine(cluster: &str, name: &str, backend: Value) -> dev::DevMachine {
    let mut dm: dev::DevMachine = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DevMachine",
        "metadata": {"name": name},
        "spec": {"backend": backend},
    }))
    .expect("a DevMachine");
    let docker = docker_machine(cluster, name);
    dm.metadata.owner_references = docker.metadata.owner_references;
    dm.metadata.labels = docker.metadata.labels;
    dm
}

/// The bootstrap data Secret `<machine>-bootstrap`: a cloud-config with one command.
pub fn bootstrap_secret(machine: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(format!("{machine}-bootstrap"));
    s.type_ = Some("cluster.x-k8s.io/secret".into());
    s.data = Some(
        [
            ("format".to_string(), ByteString(b"cloud-config".to_vec())),
            (
                "value".to_string(),
                ByteString(b"#cloud-config\nruncmd:\n- echo act-test > /tmp/act-test\n".to_vec()),
            ),
        ]
        .into(),
    );
    s
}

/// MachinePool `name` of cluster `cluster` with `replicas`, infrastructure `infra_kind` `name`,
/// bootstrap data Secret `<name>-bootstrap`.
pub fn machine_pool(cluster: &str, name: &str, infra_kind: &str, replicas: i32) -> MachinePool {
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-pool-uid"),
            "labels": { capi::CLUSTER_NAME_LABEL: cluster }},
        "spec": {"clusterName": cluster, "replicas": replicas, "template": {"spec": {
            "version": "v1.35.0",
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {"apiGroup": crate::api::GROUP, "kind": infra_kind, "name": name},
        }}},
    }))
    .expect("a MachinePool")
}

/// DockerMachinePool `name` owned by MachinePool `name`.
pub fn docker_machine_pool(cluster: &str, name: &str) -> DockerMachinePool {
    let mut dmp = DockerMachinePool::new(name, Default::default());
    dmp.metadata.owner_references = Some(vec![owner(
        "cluster.x-k8s.io/v1beta2",
        "MachinePool",
        name,
        &format!("{name}-pool-uid"),
    )]);
    dmp.metadata.labels =
        Some([(capi::CLUSTER_NAME_LABEL.to_string(), cluster.to_string())].into());
    dmp
}
