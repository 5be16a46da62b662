//! The real-node workload: C control planes and W workers ([`NodeShape`], 1 + 2 unless told
//! otherwise), from the project's default template as `clusterctl generate cluster` renders it, driven by the real CAPI core, CABPK and KCP, on
//! the kind-style node image. Timed from the apply to each Node Ready in the workload cluster's
//! own API (read through the kubeconfig Secret KCP writes), and from deleting the Cluster to the
//! last DockerMachine and DockerCluster gone.
//!
//! Both providers get the same manifest. It carries the kubelet flags a node needs on this host
//! (cgroup v1, swap, kind's `/kubelet` cgroup): capd-rs adds them to kubeadm's configuration by
//! itself, upstream CAPD expects them in the template, as its own templates do.
use std::{
    collections::BTreeMap,
    fmt,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
    config::{KubeConfigOptions, Kubeconfig},
    discovery,
};
use serde_json::{Value, json};
use xtask_figures::upstream::UPSTREAM_HAPROXY_TEMPLATE;

use super::objects::{Workload, wait_gone};

/// How many control-plane and worker machines a real-node run makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeShape {
    pub control_planes: usize,
    pub workers: usize,
}

/// 1 + 2: the shape of `hack/bench.sh nodes`, and of every real-node run recorded before there
/// were others.
impl Default for NodeShape {
    fn default() -> Self {
        Self {
            control_planes: 1,
            workers: 2,
        }
    }
}

impl NodeShape {
    /// `3+5` is 3 control planes and 5 workers.
    pub fn parse(s: &str) -> Result<Self> {
        let Some((c, w)) = s.split_once('+') else {
            bail!("real-node shape {s:?}: want C+W (control planes + workers), e.g. 3+5");
        };
        let count = |v: &str, what: &str| -> Result<usize> {
            v.trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("real-node shape {s:?}: {what} {v:?}: {e}"))
        };
        let shape = Self {
            control_planes: count(c, "control planes")?,
            workers: count(w, "workers")?,
        };
        if shape.control_planes == 0 {
            bail!("real-node shape {s:?}: at least 1 control plane");
        }
        // KCP's webhook refuses it: with etcd stacked on the control planes (the default
        // template's), an even count has no majority to spare over the odd count below it.
        if shape.control_planes.is_multiple_of(2) {
            bail!(
                "real-node shape {s:?}: an even number of control planes (KCP refuses it with stacked etcd)"
            );
        }
        Ok(shape)
    }

    /// Every Node of the shape: what is waited for.
    pub fn machines(self) -> usize {
        self.control_planes + self.workers
    }

    /// How long all Nodes may take to be Ready: 15 minutes for the first three (the 1 + 2 bound
    /// since the bench had real nodes), 2.5 more for each further one (KCP joins control planes
    /// one after another, each after the last is healthy).
    pub fn ready_timeout(self) -> Duration {
        Duration::from_secs(900 + 150 * self.machines().saturating_sub(3) as u64)
    }

    /// How long the Cluster's deletion may take: 5 minutes for three machines, 30 s more for each
    /// further one.
    pub fn delete_timeout(self) -> Duration {
        Duration::from_secs(300 + 30 * self.machines().saturating_sub(3) as u64)
    }
}

/// `1+2`, as given to `hack/bench.sh nodes:C+W`.
impl fmt::Display for NodeShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.control_planes, self.workers)
    }
}

/// What renders the workload.
#[derive(Clone, Debug)]
pub struct NodesConfig {
    pub clusterctl: PathBuf,
    pub template: PathBuf,
    /// `v1.35.4`.
    pub kubernetes_version: String,
    /// The kind-style node image (`kindest/node:v<version>`, built by `hack/node-image.sh`).
    pub image: String,
    /// The shapes to run, in order (each one run per subject).
    pub shapes: Vec<NodeShape>,
}

/// kubelet flags every node needs here, as `kubeletExtraArgs` entries (see the module doc).
const KUBELET_ARGS: [(&str, &str); 3] = [
    ("fail-cgroupv1", "false"),
    ("fail-swap-on", "false"),
    ("cgroup-root", "/kubelet"),
];

/// The rendered manifest of one run of `shape`, its objects labelled for the manager's watch
/// filter.
pub fn render(
    cfg: &NodesConfig,
    shape: NodeShape,
    kubeconfig: &std::path::Path,
    id: &str,
) -> Result<Vec<Value>> {
    let out = std::process::Command::new(&cfg.clusterctl)
        .args(["generate", "cluster", id, "--from"])
        .arg(&cfg.template)
        .args(["--kubernetes-version", &cfg.kubernetes_version])
        .args([
            "--control-plane-machine-count",
            &shape.control_planes.to_string(),
        ])
        .args(["--worker-machine-count", &shape.workers.to_string()])
        .args(["--target-namespace", id])
        .env("KUBECONFIG", kubeconfig)
        .env("DOCKER_NODE_IMAGE", &cfg.image)
        .output()
        .with_context(|| format!("running {}", cfg.clusterctl.display()))?;
    if !out.status.success() {
        bail!(
            "clusterctl generate cluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if v.is_object() {
            docs.push(v);
        }
    }
    for doc in &mut docs {
        label_for_filter(doc, id);
        add_kubelet_args(doc);
        default_endpoint_port(doc);
    }
    Ok(docs)
}

/// For upstream: a ConfigMap in `ns` with [`UPSTREAM_HAPROXY_TEMPLATE`] and the DockerCluster's
/// reference to it.
pub fn use_upstream_lb_template(docs: &mut Vec<Value>, ns: &str, cluster: &str) {
    let name = format!("{cluster}-haproxy");
    for doc in docs.iter_mut().filter(|d| d["kind"] == "DockerCluster") {
        if let Some(lb) = ensure_object(doc, "/spec/loadBalancer") {
            lb["customHAProxyConfigTemplateRef"] = json!({ "name": name });
        }
    }
    docs.insert(
        0,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns},
            "data": {"value": UPSTREAM_HAPROXY_TEMPLATE}
        }),
    );
}

/// The DockerCluster's endpoint port, 6443, as upstream's defaulting webhook sets it (the bench
/// does not register upstream's webhooks; capd-rs's CRD schema defaults it the same way).
/// Without a port, CAPI never copies the endpoint and KCP never writes the kubeconfig.
fn default_endpoint_port(doc: &mut Value) {
    if doc["kind"] != "DockerCluster" {
        return;
    }
    if let Some(endpoint) = ensure_object(doc, "/spec/controlPlaneEndpoint")
        && endpoint.get("port").is_none()
    {
        endpoint["port"] = json!(6443);
    }
}

/// The watch-filter label on the object and on every template whose copies a provider reads
/// (DockerMachines cloned by KCP and MachineSets carry the template's and the machine
/// template's labels).
fn label_for_filter(doc: &mut Value, filter: &str) {
    let mut targets = vec!["/metadata"];
    match doc["kind"].as_str() {
        Some("DockerMachineTemplate" | "MachineDeployment") => {
            targets.push("/spec/template/metadata")
        }
        Some("KubeadmControlPlane") => targets.push("/spec/machineTemplate/metadata"),
        _ => {}
    }
    for t in targets {
        if let Some(labels) = ensure(doc, &format!("{t}/labels"), json!({})) {
            labels["cluster.x-k8s.io/watch-filter"] = json!(filter);
        }
    }
}

/// The object at `path` (`/a/b`), created empty where missing.
fn ensure_object<'a>(doc: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    ensure(doc, path, json!({}))
}

/// The value at `path` (`/a/b`): missing parents are created as empty objects and a missing
/// last part as `empty`. `None` if something of another type is in the way.
fn ensure<'a>(doc: &'a mut Value, path: &str, empty: Value) -> Option<&'a mut Value> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut cur = doc;
    for (i, part) in parts.iter().enumerate() {
        let missing = if i + 1 == parts.len() {
            empty.clone()
        } else {
            json!({})
        };
        cur = cur.as_object_mut()?.entry(*part).or_insert(missing);
    }
    (std::mem::discriminant(cur) == std::mem::discriminant(&empty)).then_some(cur)
}

/// [`KUBELET_ARGS`] into every `nodeRegistration` of the KCP and the KubeadmConfigTemplate,
/// after the template's own (which they do not repeat).
fn add_kubelet_args(doc: &mut Value) {
    let paths: &[&str] = match doc["kind"].as_str() {
        Some("KubeadmControlPlane") => &[
            "/spec/kubeadmConfigSpec/initConfiguration/nodeRegistration",
            "/spec/kubeadmConfigSpec/joinConfiguration/nodeRegistration",
        ],
        Some("KubeadmConfigTemplate") => {
            &["/spec/template/spec/joinConfiguration/nodeRegistration"]
        }
        _ => &[],
    };
    for p in paths {
        let Some(list) =
            ensure(doc, &format!("{p}/kubeletExtraArgs"), json!([])).and_then(Value::as_array_mut)
        else {
            continue;
        };
        for (name, value) in KUBELET_ARGS {
            if !list.iter().any(|a| a["name"] == name) {
                list.push(json!({"name": name, "value": value}));
            }
        }
    }
}

/// Where a kind goes in the apply order: what others refer to first, the Cluster last, so that
/// no CAPI controller meets a missing template and backs off (a MachineDeployment applied before
/// its templates waited 40 s in CAPI's backoff, more than the whole provisioning).
fn apply_rank(kind: &str) -> u8 {
    match kind {
        "Cluster" => 3,
        "KubeadmControlPlane" | "MachineDeployment" => 2,
        "DockerCluster" => 1,
        _ => 0,
    }
}

/// The objects of a rendered manifest, each with its API resource resolved, in
/// [`apply_rank`] order.
pub struct Manifest(Vec<(String, ApiResource, DynamicObject)>);

impl Manifest {
    /// Resolves every kind (discovery requests: not part of what is timed).
    pub async fn resolve(client: &Client, docs: &[Value]) -> Result<Self> {
        let mut objects = Vec::new();
        for doc in docs {
            let obj: DynamicObject = serde_json::from_value(doc.clone())?;
            let types = obj.types.clone().context("apiVersion and kind")?;
            let gvk = GroupVersionKind::try_from(&types)?;
            let (resource, _) = discovery::pinned_kind(client, &gvk).await?;
            objects.push((gvk.kind, resource, obj));
        }
        objects.sort_by_key(|o| apply_rank(&o.0));
        Ok(Self(objects))
    }

    /// The namespace, then one server-side apply per object.
    pub async fn apply(&self, client: &Client, ns: &str) -> Result<()> {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        let pp = PatchParams::apply("capd-rs-bench").force();
        for (kind, resource, obj) in &self.0 {
            let name = obj.metadata.name.clone().context("name")?;
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource)
                .patch(&name, &pp, &Patch::Apply(obj))
                .await
                .with_context(|| format!("applying {kind} {name}"))?;
        }
        Ok(())
    }
}

/// Waits until `want` Nodes of the workload cluster are Ready; returns when each first was, by
/// name, measured from `start`.
pub async fn wait_nodes_ready(
    client: &Client,
    ns: &str,
    cluster: &str,
    want: usize,
    start: Instant,
    timeout: Duration,
) -> Result<BTreeMap<String, Duration>> {
    let deadline = start + timeout;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut workload: Option<Client> = None;
    let mut ready = BTreeMap::new();
    let mut last_error = String::from("no kubeconfig Secret yet");
    while Instant::now() < deadline {
        if workload.is_none()
            && let Some(s) = secrets.get_opt(&format!("{cluster}-kubeconfig")).await?
        {
            workload = Some(workload_client(&s).await?);
        }
        if let Some(wc) = &workload {
            match Api::<Node>::all(wc.clone())
                .list(&ListParams::default())
                .await
            {
                Ok(nodes) => {
                    for node in nodes.items.iter().filter(|n| node_ready(n)) {
                        if let Some(name) = &node.metadata.name {
                            ready.entry(name.clone()).or_insert_with(|| start.elapsed());
                        }
                    }
                    if ready.len() >= want {
                        return Ok(ready);
                    }
                    last_error = format!("{} of {want} Nodes Ready", ready.len());
                }
                // The API server behind the load balancer is not up yet.
                Err(e) => last_error = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    bail!("Nodes not Ready after {timeout:?}: {last_error}")
}

async fn workload_client(secret: &Secret) -> Result<Client> {
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .context("kubeconfig Secret without value")?;
    let kubeconfig = Kubeconfig::from_yaml(std::str::from_utf8(&value.0)?)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.connect_timeout = Some(Duration::from_secs(3));
    config.read_timeout = Some(Duration::from_secs(5));
    Ok(Client::try_from(config)?)
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Deletes the Cluster (CAPI deletes the rest) and waits until no DockerMachine or
/// DockerCluster of the run is left; the namespace goes afterwards with
/// [`Workload::teardown`].
pub async fn delete_cluster(w: &Workload, timeout: Duration) -> Result<Duration> {
    let start = Instant::now();
    w.clusters()
        .delete(&w.cluster, &DeleteParams::background())
        .await?;
    let apis = [w.docker_machines(), w.docker_clusters()];
    wait_gone(&apis, "DockerMachines/DockerClusters", start, timeout).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_as_control_planes_plus_workers_and_bad_ones_say_why() {
        assert_eq!(
            NodeShape::parse("3+5").unwrap(),
            NodeShape {
                control_planes: 3,
                workers: 5
            }
        );
        assert_eq!(NodeShape::parse("1+2").unwrap(), NodeShape::default());
        assert_eq!(NodeShape::parse("1+0").unwrap().machines(), 1);
        let err = |s: &str| NodeShape::parse(s).unwrap_err().to_string();
        assert_eq!(
            err("0+2"),
            "real-node shape \"0+2\": at least 1 control plane"
        );
        assert!(
            err("2+2").contains("an even number of control planes"),
            "{}",
            err("2+2")
        );
        assert!(err("3").contains("want C+W"), "{}", err("3"));
        assert!(err("3+x").contains("workers \"x\""), "{}", err("3+x"));
        assert!(err("-1+2").contains("control planes"), "{}", err("-1+2"));
        assert_eq!(NodeShape::parse("3+5").unwrap().to_string(), "3+5");
        // The 1 + 2 bounds are the ones the bench always had; a larger shape gets more.
        assert_eq!(
            NodeShape::default().ready_timeout(),
            Duration::from_secs(900)
        );
        assert_eq!(
            NodeShape::default().delete_timeout(),
            Duration::from_secs(300)
        );
        let big = NodeShape::parse("3+5").unwrap();
        assert_eq!(big.ready_timeout(), Duration::from_secs(900 + 5 * 150));
        assert_eq!(big.delete_timeout(), Duration::from_secs(300 + 5 * 30));
    }

    #[test]
    fn templates_carry_the_filter_label_and_the_kubelet_flags_once() {
        let mut dmt = json!({"kind": "DockerMachineTemplate", "metadata": {"name": "x"},
            "spec": {"template": {"spec": {}}}});
        label_for_filter(&mut dmt, "run1");
        assert_eq!(
            dmt["metadata"]["labels"]["cluster.x-k8s.io/watch-filter"],
            "run1"
        );
        assert_eq!(
            dmt["spec"]["template"]["metadata"]["labels"]["cluster.x-k8s.io/watch-filter"],
            "run1"
        );
        let mut kct = json!({"kind": "KubeadmConfigTemplate", "spec": {"template": {"spec": {
            "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [
                {"name": "fail-swap-on", "value": "true"}]}}}}}});
        add_kubelet_args(&mut kct);
        let args = kct["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
            ["kubeletExtraArgs"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(args.len(), 3, "{args:?}");
        assert_eq!(
            args[0],
            json!({"name": "fail-swap-on", "value": "true"}),
            "the template's own wins"
        );
        assert!(args.iter().any(|a| a["name"] == "fail-cgroupv1"));
        let mut dc = json!({"kind": "DockerCluster", "spec": {}});
        default_endpoint_port(&mut dc);
        assert_eq!(dc["spec"]["controlPlaneEndpoint"], json!({"port": 6443}));
        let mut kcp = json!({"kind": "KubeadmControlPlane", "spec": {"kubeadmConfigSpec": {}}});
        add_kubelet_args(&mut kcp);
        assert_eq!(
            kcp["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]
                ["kubeletExtraArgs"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
}
