//! The workload as Cluster API objects: one Cluster with its DockerCluster, a bootstrap Secret,
//! N Machines and their DockerMachines (machine 0 is a control plane); or the same N machines
//! spread over several such Clusters, each in a namespace of its own ([`LightLoad`]). The same
//! manifests serve both providers; they are created in parallel so that the client is not what
//! is measured.
use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};

const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta2";

/// How many creates or deletes are in flight at once.
pub const CLIENT_PARALLELISM: usize = 32;

/// The bootstrap data every machine runs: a file and a command, and the sentinel both providers
/// look for.
const BOOTSTRAP: &str = "#cloud-config
write_files:
- path: /etc/capd-bench/hello.txt
  permissions: \"0644\"
  content: |
    written by the capd-rs bench
runcmd:
- [sh, -c, \"mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\"]
";

/// A light load: N machines over `clusters` Clusters, each Cluster in a namespace of its own
/// (1: the plain light load, one Cluster holding all N).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LightLoad {
    pub n: usize,
    pub clusters: usize,
}

impl LightLoad {
    /// N machines in one Cluster.
    pub fn one(n: usize) -> Self {
        Self { n, clusters: 1 }
    }

    /// `100` is 100 machines in one Cluster, `clusters:10:100` the same 100 over 10 Clusters.
    pub fn parse(s: &str) -> Result<Self> {
        let count = |v: &str, what: &str| -> Result<usize> {
            v.parse()
                .map_err(|e| anyhow::anyhow!("light load {s:?}: {what} {v:?}: {e}"))
        };
        let load = match s.split(':').collect::<Vec<_>>()[..] {
            [n] => Self::one(count(n, "N")?),
            ["clusters", k, n] => Self {
                n: count(n, "N")?,
                clusters: count(k, "Cluster count")?,
            },
            _ => bail!("light load {s:?}: want N or clusters:K:N"),
        };
        if load.n == 0 {
            bail!("light load {s:?}: at least 1 machine");
        }
        if load.clusters == 0 {
            bail!("light load {s:?}: at least 1 Cluster");
        }
        // A Cluster without a machine measures nothing but its load balancer.
        if load.n < load.clusters {
            bail!(
                "light load {s:?}: fewer machines ({}) than Clusters ({}); each Cluster needs one",
                load.n,
                load.clusters
            );
        }
        Ok(load)
    }

    /// How many Clusters, when more than one: what a run records (none: the one-Cluster load,
    /// as every run recorded before the spread load existed).
    pub fn spread(self) -> Option<usize> {
        (self.clusters > 1).then_some(self.clusters)
    }

    /// How many of the N machines each Cluster holds: as evenly as they go, the remainder one
    /// each to the first Clusters (10 over 4: 3, 3, 2, 2).
    pub fn split(self) -> Vec<usize> {
        let k = self.clusters.max(1);
        (0..k)
            .map(|c| self.n / k + usize::from(c < self.n % k))
            .collect()
    }
}

/// A bare N is the one-Cluster load, as it always was.
impl From<usize> for LightLoad {
    fn from(n: usize) -> Self {
        Self::one(n)
    }
}

/// As the report names the load after "N=": `100`, or `100 over 10 clusters`.
impl fmt::Display for LightLoad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.spread() {
            None => write!(f, "{}", self.n),
            Some(k) => write!(f, "{} over {k} clusters", self.n),
        }
    }
}

/// The Clusters (and namespaces) of a run `id` with `clusters` Clusters: one keeps the run's id,
/// as before the spread load existed; several are `<id>-c0`, `<id>-c1`, ... (valid DNS labels
/// as long as the id leaves room for the suffix).
pub fn cluster_names(id: &str, clusters: usize) -> Vec<String> {
    if clusters <= 1 {
        return vec![id.to_string()];
    }
    (0..clusters).map(|k| format!("{id}-c{k}")).collect()
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').expect("group/version");
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// One run's objects, all in namespace `ns` and labelled for the manager's watch filter.
pub struct Workload {
    client: Client,
    pub ns: String,
    pub cluster: String,
    filter: String,
    image: String,
}

impl Workload {
    /// One Workload per Cluster of run `id` ([`cluster_names`]), all under the run's watch
    /// filter, so that one manager serves them all.
    pub fn spread(client: &Client, id: &str, clusters: usize, image: &str) -> Vec<Self> {
        cluster_names(id, clusters)
            .iter()
            .map(|name| Self::named(client.clone(), name, id, image))
            .collect()
    }

    /// Cluster and namespace `name`, under watch filter `filter`.
    fn named(client: Client, name: &str, filter: &str, image: &str) -> Self {
        Self {
            client,
            ns: name.to_string(),
            cluster: name.to_string(),
            filter: filter.to_string(),
            image: image.to_string(),
        }
    }

    fn api(&self, api_version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &resource(api_version, kind, plural),
        )
    }
    pub fn clusters(&self) -> Api<DynamicObject> {
        self.api(CAPI, "Cluster", "clusters")
    }
    pub fn machines(&self) -> Api<DynamicObject> {
        self.api(CAPI, "Machine", "machines")
    }
    pub fn docker_clusters(&self) -> Api<DynamicObject> {
        self.api(INFRA, "DockerCluster", "dockerclusters")
    }
    pub fn docker_machines(&self) -> Api<DynamicObject> {
        self.api(INFRA, "DockerMachine", "dockermachines")
    }
    pub fn dev_clusters(&self) -> Api<DynamicObject> {
        self.api(INFRA, "DevCluster", "devclusters")
    }
    pub fn dev_machines(&self) -> Api<DynamicObject> {
        self.api(INFRA, "DevMachine", "devmachines")
    }

    fn labels(&self, control_plane: bool) -> Value {
        let mut l = json!({
            "cluster.x-k8s.io/watch-filter": self.filter,
            "cluster.x-k8s.io/cluster-name": self.cluster,
        });
        if control_plane {
            l["cluster.x-k8s.io/control-plane"] = json!("");
        }
        l
    }

    pub fn machine_name(&self, i: usize) -> String {
        if i == 0 {
            format!("{}-cp-0", self.cluster)
        } else {
            format!("{}-w-{i}", self.cluster)
        }
    }

    /// Namespace, Cluster, DockerCluster and the bootstrap Secret; waits for the DockerCluster
    /// provisioned (its load balancer) and marks the Cluster's infrastructure provisioned, as
    /// the core Cluster controller would.
    pub async fn create_cluster(&self, timeout: Duration) -> Result<Duration> {
        let pp = PostParams::default();
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": self.ns}}))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&pp, &ns)
            .await?;
        let cluster = obj(json!({
            "apiVersion": CAPI, "kind": "Cluster",
            "metadata": {"name": self.cluster, "namespace": self.ns, "labels": self.labels(false)},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "services": {"cidrBlocks": ["10.128.0.0/12"]}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": self.cluster}
            }
        }))?;
        let cluster = self.clusters().create(&pp, &cluster).await?;
        let uid = cluster.metadata.uid.context("Cluster uid")?;
        let start = Instant::now();
        let dc = obj(json!({
            "apiVersion": INFRA, "kind": "DockerCluster",
            "metadata": {
                "name": self.cluster, "namespace": self.ns, "labels": self.labels(false),
                "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": self.cluster, "uid": uid}]
            },
            "spec": {}
        }))?;
        self.docker_clusters().create(&pp, &dc).await?;
        let provisioned = |o: &DynamicObject| {
            o.data.pointer("/status/initialization/provisioned") == Some(&json!(true))
        };
        wait_all(&self.docker_clusters(), 1, timeout, |o| provisioned(o)).await?;
        let took = start.elapsed();
        self.clusters()
            .patch_status(
                &self.cluster,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
                ),
            )
            .await?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": self.secret_name(), "namespace": self.ns,
                         "labels": {"cluster.x-k8s.io/cluster-name": self.cluster}},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"format": "cloud-config", "value": BOOTSTRAP}
        }))?;
        Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .create(&pp, &secret)
            .await?;
        Ok(took)
    }

    fn secret_name(&self) -> String {
        format!("{}-bootstrap", self.cluster)
    }

    /// N Machines in parallel; returns their UIDs by name.
    pub async fn create_machines(&self, n: usize) -> Result<HashMap<String, String>> {
        let api = self.machines();
        let objs = (0..n)
            .map(|i| {
                let name = self.machine_name(i);
                obj(json!({
                    "apiVersion": CAPI, "kind": "Machine",
                    "metadata": {"name": name, "namespace": self.ns, "labels": self.labels(i == 0)},
                    "spec": {
                        "clusterName": self.cluster, "version": "v1.35.0",
                        "bootstrap": {"dataSecretName": self.secret_name()},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name}
                    }
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        let created: Vec<DynamicObject> = stream::iter(objs)
            .map(|o| {
                let api = api.clone();
                async move { api.create(&PostParams::default(), &o).await }
            })
            .buffer_unordered(CLIENT_PARALLELISM)
            .try_collect()
            .await?;
        Ok(created
            .into_iter()
            .filter_map(|m| Some((m.metadata.name?, m.metadata.uid?)))
            .collect())
    }

    /// The DockerMachines of the Machines `uids` (by name), as CAPI's Machine controller would
    /// leave them, in machine order.
    fn docker_machine_objects(&self, uids: &HashMap<String, String>) -> Result<Vec<DynamicObject>> {
        (0..uids.len())
            .map(|i| {
                let name = self.machine_name(i);
                let uid = uids
                    .get(&name)
                    .with_context(|| format!("Machine {name} uid"))?;
                obj(json!({
                    "apiVersion": INFRA, "kind": "DockerMachine",
                    "metadata": {
                        "name": name, "namespace": self.ns, "labels": self.labels(i == 0),
                        // As CAPI's Machine controller leaves it (a controller reference): with
                        // anything less it patches every DockerMachine once, racing the
                        // provider's first writes (409s, about 0.7 requests per machine).
                        "ownerReferences": [{"apiVersion": CAPI, "kind": "Machine", "name": name,
                            "uid": uid, "controller": true, "blockOwnerDeletion": true}]
                    },
                    "spec": {"customImage": self.image}
                }))
            })
            .collect()
    }

    /// Deletes every object of `api` in the namespace with one request and waits until none is
    /// left.
    pub async fn delete_all(&self, api: &Api<DynamicObject>, timeout: Duration) -> Result<()> {
        api.delete_collection(&DeleteParams::background(), &ListParams::default())
            .await?;
        wait_empty(api, &ListParams::default(), timeout).await
    }

    /// Everything the run created, also after a failure: what is still there after a grace
    /// period loses its finalizers (this namespace only), then the namespace goes.
    pub async fn teardown(&self) {
        // The provider's objects get a minute (the manager removes its containers and then
        // its finalizers); CAPI's own only a few seconds: with no workload cluster, the core
        // controllers can hold a Machine's deletion much longer, and that is not measured here.
        // The real-node and in-memory workloads add CAPI's own owners of Machines: they go first, or they
        // would make new Machines while the old ones go (and their finalizers would hold the
        // namespace after a failed run). The light workload has none of them.
        let apis = [
            (
                self.api(CAPI, "MachineDeployment", "machinedeployments"),
                10,
            ),
            (
                self.api(
                    "controlplane.cluster.x-k8s.io/v1beta2",
                    "KubeadmControlPlane",
                    "kubeadmcontrolplanes",
                ),
                10,
            ),
            (self.api(CAPI, "MachineSet", "machinesets"), 10),
            (self.docker_machines(), 60),
            (self.docker_clusters(), 60),
            (self.dev_machines(), 60),
            (self.dev_clusters(), 60),
            (self.machines(), 10),
            (self.clusters(), 10),
        ];
        for (api, secs) in &apis {
            if self
                .delete_all(api, Duration::from_secs(*secs))
                .await
                .is_err()
            {
                strip_finalizers(api).await;
            }
        }
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

/// An API that sees the DockerMachines of every Workload in `ws`, and the selector of `ws`'s run
/// among them (the watch-filter label all of them carry): one watch or list sees every
/// Cluster's. One Workload keeps to its namespace, as the one-Cluster load always did; several
/// take every namespace.
fn run_docker_machines(ws: &[Workload]) -> Result<(Api<DynamicObject>, String)> {
    let first = ws.first().context("a load without a Cluster")?;
    let api = if ws.len() == 1 {
        first.docker_machines()
    } else {
        Api::all_with(
            first.client.clone(),
            &resource(INFRA, "DockerMachine", "dockermachines"),
        )
    };
    Ok((
        api,
        format!("cluster.x-k8s.io/watch-filter={}", first.filter),
    ))
}

/// The DockerMachines of every Workload's Machines (`uids[k]`: Workload k's, by name), created
/// in parallel. The Clusters take turns (each one's first machine, then each one's second, ...),
/// so that no Cluster's machines wait behind another's, and at most [`CLIENT_PARALLELISM`]
/// creates are in flight in all, as with one Cluster.
pub async fn create_docker_machines(
    ws: &[Workload],
    uids: &[HashMap<String, String>],
) -> Result<()> {
    if ws.len() != uids.len() {
        bail!("{} Clusters but Machines of {}", ws.len(), uids.len());
    }
    let per_cluster = ws
        .iter()
        .zip(uids)
        .map(|(w, u)| {
            let api = w.docker_machines();
            Ok(w.docker_machine_objects(u)?
                .into_iter()
                .map(|o| (api.clone(), o))
                .collect())
        })
        .collect::<Result<Vec<Vec<_>>>>()?;
    stream::iter(take_turns(per_cluster))
        .map(|(api, o)| async move { api.create(&PostParams::default(), &o).await })
        .buffer_unordered(CLIENT_PARALLELISM)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// The lists' items taking turns: the first of each list, then the second of each, ...
pub fn take_turns<T>(lists: Vec<Vec<T>>) -> Vec<T> {
    let total = lists.iter().map(Vec::len).sum();
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        out.extend(iters.iter_mut().filter_map(Iterator::next));
    }
    out
}

/// Waits until `n` DockerMachines of `ws`'s run, in any of its namespaces, satisfy `done` (see
/// [`wait_all`]): one watch, so that every machine is timed from the same start.
pub async fn wait_docker_machines(
    ws: &[Workload],
    n: usize,
    stall: Duration,
    done: impl Fn(&DynamicObject) -> bool,
) -> Result<BTreeMap<String, Duration>> {
    let (api, selector) = run_docker_machines(ws)?;
    wait_watched(
        &api,
        watcher::Config::default().labels(&selector),
        n,
        stall,
        done,
    )
    .await
}

/// Deletes the DockerMachines of every Workload (one request per namespace, all at once) and
/// waits until none of the run's is left in any namespace (one list each time, by the watch
/// filter, rather than one per namespace).
pub async fn delete_docker_machines(ws: &[Workload], timeout: Duration) -> Result<()> {
    futures::future::try_join_all(ws.iter().map(|w| async move {
        w.docker_machines()
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
    }))
    .await?;
    let (api, selector) = run_docker_machines(ws)?;
    wait_empty(&api, &ListParams::default().labels(&selector), timeout).await
}

/// Waits until `api` lists nothing that `lp` selects.
async fn wait_empty(api: &Api<DynamicObject>, lp: &ListParams, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = api.list_metadata(lp).await?.items.len();
        if left == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{left} objects left after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until no object of `apis` is left (`what` names them in the error); the time from
/// `start`. Gives up once `stall` passes with no object gone: a large load on a saturated host
/// is slow, not stuck, while a deletion that stops is.
pub async fn wait_gone(
    apis: &[Api<DynamicObject>],
    what: &str,
    start: Instant,
    stall: Duration,
) -> Result<Duration> {
    let mut progress = Progress::new(stall);
    loop {
        let mut left = 0;
        for api in apis {
            left += api.list_metadata(&ListParams::default()).await?.items.len();
        }
        if left == 0 {
            return Ok(start.elapsed());
        }
        // Progress counts up: fewer left is more done.
        progress.at(usize::MAX - left);
        if progress.stalled() {
            bail!(
                "{left} {what} left after {:?}, none gone in the last {stall:?}",
                start.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// CAPI core's finalizer on a Machine it has taken in.
const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";

/// Whether CAPI core has reconciled this Machine's current generation (its finalizer is on and
/// its status observed the generation).
fn machine_taken_in(m: &DynamicObject) -> bool {
    let finalized = m
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == MACHINE_FINALIZER);
    let observed = m
        .data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    finalized && observed.is_some() && observed == m.metadata.generation
}

/// When a set of objects last changed, to tell a controller still at work from one at rest.
#[derive(Debug)]
struct Rest {
    seen: Option<Vec<(String, String)>>,
    since: Instant,
}

impl Rest {
    fn new(now: Instant) -> Self {
        Rest {
            seen: None,
            since: now,
        }
    }

    /// Records the objects' (name, resourceVersion) at `now`; whether they are `ready` and have
    /// not changed for `quiet`.
    fn at_rest(
        &mut self,
        now: Instant,
        mut versions: Vec<(String, String)>,
        ready: bool,
        quiet: Duration,
    ) -> bool {
        versions.sort();
        if self.seen.as_ref() != Some(&versions) {
            (self.seen, self.since) = (Some(versions), now);
        }
        ready && now.duration_since(self.since) >= quiet
    }
}

/// Waits until CAPI core is done with the new Machines of `ws`: each taken in, and none
/// changed for `quiet` (its Machine controller patches a new Machine several times, with
/// conflicts and retries, for seconds after the create). A phase timed before that would pay
/// for CAPI's digestion of the setup, which the floor never does. Gives up after `limit`
/// (returns false), leaving the caller to say so.
pub async fn wait_machines_at_rest(
    ws: &[Workload],
    quiet: Duration,
    limit: Duration,
) -> Result<bool> {
    let start = Instant::now();
    let mut rest = Rest::new(start);
    loop {
        let mut versions = vec![];
        let mut ready = true;
        for w in ws {
            for m in w.machines().list(&ListParams::default()).await? {
                ready &= machine_taken_in(&m);
                versions.push((
                    format!("{}/{}", w.ns, m.metadata.name.unwrap_or_default()),
                    m.metadata.resource_version.unwrap_or_default(),
                ));
            }
        }
        if rest.at_rest(Instant::now(), versions, ready, quiet) {
            return Ok(true);
        }
        if start.elapsed() >= limit {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// When a count last grew, to tell a slow load from a stuck one.
struct Progress {
    count: usize,
    since: Instant,
    stall: Duration,
}

impl Progress {
    fn new(stall: Duration) -> Self {
        Progress {
            count: 0,
            since: Instant::now(),
            stall,
        }
    }

    /// The count now; a higher one than before restarts the stall clock.
    fn at(&mut self, count: usize) {
        if count > self.count {
            (self.count, self.since) = (count, Instant::now());
        }
    }

    /// How long until the load counts as stuck.
    fn left(&self) -> Duration {
        self.stall.saturating_sub(self.since.elapsed())
    }

    fn stalled(&self) -> bool {
        self.left().is_zero()
    }
}

async fn strip_finalizers(api: &Api<DynamicObject>) {
    let Ok(list) = api.list_metadata(&ListParams::default()).await else {
        return;
    };
    for o in list.items {
        if let Some(name) = o.metadata.name {
            let _ = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
        }
    }
}

fn obj(v: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(v)?)
}

/// Whether condition `type_` of an object is True.
pub fn condition_true(o: &DynamicObject, type_: &str) -> bool {
    o.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// Waits until `n` objects of `api` satisfy `done`; returns when each first did, by name,
/// measured from the call. Gives up once `stall` passes with no new object done.
pub async fn wait_all(
    api: &Api<DynamicObject>,
    n: usize,
    stall: Duration,
    done: impl Fn(&DynamicObject) -> bool,
) -> Result<BTreeMap<String, Duration>> {
    wait_watched(api, watcher::Config::default(), n, stall, done).await
}

/// [`wait_all`] over the objects a watch of `api` with `config` sees.
async fn wait_watched(
    api: &Api<DynamicObject>,
    config: watcher::Config,
    n: usize,
    stall: Duration,
    done: impl Fn(&DynamicObject) -> bool,
) -> Result<BTreeMap<String, Duration>> {
    let start = Instant::now();
    let mut seen = BTreeMap::new();
    let mut progress = Progress::new(stall);
    let events = watcher(api.clone(), config).applied_objects();
    let mut events = std::pin::pin!(events);
    while seen.len() < n {
        let Ok(event) = tokio::time::timeout(progress.left(), events.try_next()).await else {
            bail!(
                "{} of {n} done after {:?}, none in the last {stall:?}",
                seen.len(),
                start.elapsed()
            );
        };
        let Some(o) = event? else {
            bail!("watch ended")
        };
        if let Some(name) = o.metadata.name.clone().filter(|_| done(&o)) {
            seen.entry(name).or_insert_with(|| start.elapsed());
            progress.at(seen.len());
        }
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_are_at_rest_once_taken_in_and_unchanged_for_the_quiet_time() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let quiet = Duration::from_secs(3);
        let v = |rv: &str| {
            vec![
                ("b".to_string(), rv.to_string()),
                ("a".to_string(), "1".to_string()),
            ]
        };
        let mut rest = Rest::new(t0);
        assert!(!rest.at_rest(s(0), v("1"), true, quiet));
        // Unchanged but not all taken in: not at rest, however long.
        assert!(!rest.at_rest(s(5), v("1"), false, quiet));
        // A change restarts the clock.
        assert!(!rest.at_rest(s(6), v("2"), true, quiet));
        assert!(!rest.at_rest(s(8), v("2"), true, quiet));
        assert!(rest.at_rest(s(9), v("2"), true, quiet));
        // Order does not count as a change.
        let mut rev = v("2");
        rev.reverse();
        assert!(rest.at_rest(s(10), rev, true, quiet));
    }

    #[test]
    fn a_machine_is_taken_in_with_capis_finalizer_and_its_generation_observed() {
        let m = |finalizers: Value, observed: Value| {
            obj(json!({"apiVersion": CAPI, "kind": "Machine",
                "metadata": {"name": "m", "generation": 2, "finalizers": finalizers},
                "status": {"observedGeneration": observed}}))
            .unwrap()
        };
        assert!(machine_taken_in(&m(json!([MACHINE_FINALIZER]), json!(2))));
        assert!(!machine_taken_in(&m(json!([MACHINE_FINALIZER]), json!(1))));
        assert!(!machine_taken_in(&m(
            json!([MACHINE_FINALIZER]),
            Value::Null
        )));
        assert!(!machine_taken_in(&m(json!(["other"]), json!(2))));
    }

    #[test]
    fn machines_spread_evenly_with_the_remainder_on_the_first_clusters() {
        let split = |n, clusters| LightLoad { n, clusters }.split();
        assert_eq!(split(100, 10), [10; 10]);
        assert_eq!(split(10, 4), [3, 3, 2, 2]);
        assert_eq!(split(103, 10), [11, 11, 11, 10, 10, 10, 10, 10, 10, 10]);
        assert_eq!(split(7, 1), [7]);
        assert_eq!(split(3, 3), [1, 1, 1]);
        for (n, k) in [(500, 10), (499, 7), (1, 1), (64, 63)] {
            let s = split(n, k);
            assert_eq!(s.len(), k);
            assert_eq!(s.iter().sum::<usize>(), n, "{n} over {k}: {s:?}");
            assert!(
                s.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1),
                "{s:?}"
            );
        }
    }

    #[test]
    fn light_loads_parse_as_n_or_clusters_k_n_and_bad_ones_say_why() {
        assert_eq!(LightLoad::parse("100").unwrap(), LightLoad::one(100));
        assert_eq!(
            LightLoad::parse("clusters:10:100").unwrap(),
            LightLoad {
                n: 100,
                clusters: 10
            }
        );
        assert_eq!(
            LightLoad::parse("clusters:1:100").unwrap(),
            LightLoad::one(100),
            "one Cluster is the plain load"
        );
        let err = |s: &str| LightLoad::parse(s).unwrap_err().to_string();
        assert_eq!(
            err("clusters:0:10"),
            "light load \"clusters:0:10\": at least 1 Cluster"
        );
        assert_eq!(err("0"), "light load \"0\": at least 1 machine");
        assert_eq!(
            err("clusters:10:5"),
            "light load \"clusters:10:5\": fewer machines (5) than Clusters (10); each Cluster needs one"
        );
        assert!(err("clusters:10").contains("want N or clusters:K:N"));
        assert!(err("pods:10:100").contains("want N or clusters:K:N"));
        assert!(
            err("clusters:x:100").contains("Cluster count \"x\""),
            "{}",
            err("clusters:x:100")
        );
        assert!(err("-5").contains("N \"-5\""), "{}", err("-5"));

        assert_eq!(LightLoad::one(100).to_string(), "100");
        assert_eq!(LightLoad::one(100).spread(), None);
        let spread = LightLoad::parse("clusters:10:100").unwrap();
        assert_eq!(spread.to_string(), "100 over 10 clusters");
        assert_eq!(spread.spread(), Some(10));
    }

    #[test]
    fn the_clusters_take_turns_and_nothing_is_lost() {
        let lists = vec![vec!["a0", "a1", "a2"], vec!["b0"], vec!["c0", "c1"]];
        assert_eq!(take_turns(lists), ["a0", "b0", "c0", "a1", "c1", "a2"]);
        assert!(take_turns(Vec::<Vec<u8>>::new()).is_empty());
        assert_eq!(take_turns(vec![vec![1, 2], vec![]]), [1, 2]);
    }

    #[test]
    fn only_a_higher_count_restarts_the_stall_clock() {
        let mut p = Progress::new(Duration::from_millis(200));
        p.at(3);
        std::thread::sleep(Duration::from_millis(120));
        p.at(3);
        p.at(2);
        std::thread::sleep(Duration::from_millis(120));
        assert!(p.stalled(), "no new object in 240 ms of a 200 ms allowance");
        p.at(4);
        assert!(!p.stalled() && p.left() > Duration::from_millis(100));
    }

    #[test]
    fn conditions_are_read_by_type_and_status() {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": INFRA, "kind": "DockerMachine", "metadata": {"name": "m"},
            "status": {"conditions": [
                {"type": "CGroupsReady", "status": "False"},
                {"type": "BootstrapCompleted", "status": "True"}
            ]}
        }))
        .unwrap();
        assert!(condition_true(&o, "BootstrapCompleted"));
        assert!(!condition_true(&o, "CGroupsReady"));
        assert!(!condition_true(&o, "Ready"));
    }
}
