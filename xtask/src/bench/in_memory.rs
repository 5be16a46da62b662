//! The in-memory workload: N DevMachines of `spec.backend.inMemory` (no container; each
//! workload cluster's API server is a listener in the manager itself), driven by the real CAPI
//! core, CABPK and KCP. Two shapes: one cluster of 1 control plane and N-1 workers (KCP and a
//! MachineDeployment), and N/2 clusters of 1 + 1. Timed from the apply to each Machine
//! `Running` (CAPI core found its Node in the workload cluster by providerID), and from
//! deleting the Clusters to the last DevMachine and DevCluster gone.
//!
//! Both providers get the same manifest; the simulated delays are zero, so what is measured
//! is the providers and CAPI, not a sleep. Both listen on 127.0.0.1 (`POD_IP`).
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};

use super::objects::{CLIENT_PARALLELISM, Workload, wait_all, wait_gone};

/// How the N machines are grouped into clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One cluster: 1 control plane and N-1 workers.
    One,
    /// N/2 clusters of 1 control plane and 1 worker.
    Pairs,
}

impl Shape {
    /// The workload's name in the report.
    pub fn workload(self) -> &'static str {
        match self {
            Shape::One => super::report::IN_MEMORY,
            Shape::Pairs => super::report::IN_MEMORY_PAIRS,
        }
    }

    /// (clusters, workers per cluster) for `n` machines; every cluster has one control plane.
    pub fn split(self, n: usize) -> (usize, usize) {
        match self {
            Shape::One => (1, n.saturating_sub(1)),
            Shape::Pairs => ((n / 2).max(1), 1),
        }
    }

    /// How many machines `n` makes in this shape: `n`, but for pairs of an odd `n`, one fewer.
    pub fn machines(self, n: usize) -> usize {
        let (clusters, workers) = self.split(n);
        clusters * (1 + workers)
    }

    /// `1000` is one cluster, `pairs:1000` the pairs.
    pub fn parse(s: &str) -> Result<(Shape, usize)> {
        let (shape, n) = match s.split_once(':') {
            Some(("pairs", n)) => (Shape::Pairs, n),
            Some((other, _)) => bail!("in-memory load {s:?}: unknown shape {other:?} (pairs)"),
            None => (Shape::One, s),
        };
        let n: usize = n
            .parse()
            .map_err(|e| anyhow::anyhow!("in-memory load {s:?}: {e}"))?;
        if n < 2 {
            bail!("in-memory load {s:?}: at least 2 machines (a control plane and a worker)");
        }
        Ok((shape, n))
    }
}

const INFRA: &str = "infrastructure.cluster.x-k8s.io";

/// Every object of the workload, labelled for the manager's watch filter `filter` (and each
/// template whose copies a provider reads).
pub fn manifest(filter: &str, shape: Shape, n: usize, version: &str) -> Vec<Value> {
    let (clusters, workers) = shape.split(n);
    let labels = json!({"cluster.x-k8s.io/watch-filter": filter});
    let meta = |name: &str| json!({"name": name, "labels": labels});
    // No simulated delay: the time measured is the providers' and CAPI's.
    let in_memory = json!({
        "vm": {"provisioning": {"startupDuration": "0s"}},
        "node": {"provisioning": {"startupDuration": "0s"}},
        "apiServer": {"provisioning": {"startupDuration": "0s"}},
        "etcd": {"provisioning": {"startupDuration": "0s"}},
    });
    let template = |name: &str| {
        json!({
            "apiVersion": format!("{INFRA}/v1beta2"), "kind": "DevMachineTemplate",
            "metadata": meta(name),
            "spec": {"template": {"metadata": {"labels": labels},
                "spec": {"backend": {"inMemory": in_memory}}}},
        })
    };
    let mut docs = vec![];
    for c in 0..clusters {
        let name = format!("{filter}-{c}");
        // Templates of its own, as `clusterctl generate cluster` makes them: a template shared
        // by 50 Clusters is patched by each (its owner references) and became the load's
        // hottest object, answering 504s.
        docs.push(template(&format!("{name}-cp")));
        docs.push(template(&format!("{name}-md")));
        docs.push(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": meta(&format!("{name}-md")),
            "spec": {"template": {"spec": {"format": "cloud-config"}}},
        }));
        docs.push(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": meta(&name),
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                "infrastructureRef": {"apiGroup": INFRA, "kind": "DevCluster", "name": name},
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                    "kind": "KubeadmControlPlane", "name": name},
            },
        }));
        // An annotation, any: upstream v1.14's in-memory DevCluster reconciler writes its
        // listener annotation into the object's map without making one, and panics on a
        // DevCluster that has none (ClusterClass-made ones always do).
        let mut dev_cluster = meta(&name);
        dev_cluster["annotations"] = json!({"capd-rs.bench/shape": format!("{shape:?}")});
        docs.push(json!({
            "apiVersion": format!("{INFRA}/v1beta2"), "kind": "DevCluster",
            "metadata": dev_cluster,
            "spec": {"backend": {"inMemory": {}}},
        }));
        docs.push(json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": meta(&name),
            "spec": {
                "replicas": 1,
                "version": version,
                "machineTemplate": {
                    "metadata": {"labels": labels},
                    "spec": {"infrastructureRef": {"apiGroup": INFRA,
                        "kind": "DevMachineTemplate", "name": format!("{name}-cp")}},
                },
                "kubeadmConfigSpec": {"format": "cloud-config"},
            },
        }));
        let selector = json!({"cluster.x-k8s.io/cluster-name": name});
        let mut template_labels = selector.clone();
        template_labels["cluster.x-k8s.io/watch-filter"] = json!(filter);
        docs.push(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": meta(&name),
            "spec": {
                "clusterName": name,
                "replicas": workers,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": template_labels},
                    "spec": {
                        "clusterName": name,
                        "version": version,
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfigTemplate", "name": format!("{name}-md")}},
                        "infrastructureRef": {"apiGroup": INFRA, "kind": "DevMachineTemplate",
                            "name": format!("{name}-md")},
                    },
                },
            },
        }));
    }
    docs
}

/// Whether CAPI core says the Machine runs (its Node found in the workload cluster).
pub fn machine_running(m: &kube::api::DynamicObject) -> bool {
    m.data.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

/// Waits until `n` Machines of the run are Running (giving up after `stall` with none newly
/// Running); when each first was, by name, from the call.
pub async fn wait_running(
    w: &Workload,
    n: usize,
    stall: Duration,
) -> Result<BTreeMap<String, Duration>> {
    wait_all(&w.machines(), n, stall, machine_running).await
}

/// Deletes every Cluster of the run (CAPI deletes the rest) and waits until no DevMachine or
/// DevCluster is left (giving up after `stall` with none gone). One request per Cluster, a few
/// at a time: one request for all 500 Clusters of `pairs:1000` outlasted the API server's
/// request timeout on a loaded 2-core host, and the connection closed under it.
pub async fn delete_clusters(w: &Workload, stall: Duration) -> Result<Duration> {
    let start = Instant::now();
    let clusters = w.clusters();
    let names: Vec<String> = clusters
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    stream::iter(names)
        .map(|name| {
            let clusters = clusters.clone();
            async move {
                match clusters.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(CLIENT_PARALLELISM)
        .try_collect::<Vec<()>>()
        .await?;
    let apis = [w.dev_machines(), w.dev_clusters()];
    wait_gone(&apis, "DevMachines/DevClusters", start, stall).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(docs: &[Value], kind: &str) -> Vec<Value> {
        docs.iter().filter(|d| d["kind"] == kind).cloned().collect()
    }

    #[test]
    fn one_cluster_holds_every_machine_and_pairs_split_them_two_by_two() {
        assert_eq!(Shape::parse("1000").unwrap(), (Shape::One, 1000));
        assert_eq!(Shape::parse("pairs:100").unwrap(), (Shape::Pairs, 100));
        assert!(Shape::parse("pairs:1").is_err());
        assert!(Shape::parse("rows:10").is_err());
        assert!(Shape::parse("x").is_err());

        assert_eq!(Shape::One.machines(7), 7);
        assert_eq!(
            Shape::Pairs.machines(7),
            6,
            "what is waited for is what is made"
        );

        let one = manifest("run1", Shape::One, 100, "v1.35.4");
        assert_eq!(kinds(&one, "Cluster").len(), 1);
        assert_eq!(kinds(&one, "KubeadmControlPlane")[0]["spec"]["replicas"], 1);
        assert_eq!(kinds(&one, "MachineDeployment")[0]["spec"]["replicas"], 99);

        let pairs = manifest("run1", Shape::Pairs, 100, "v1.35.4");
        let mds = kinds(&pairs, "MachineDeployment");
        assert_eq!(kinds(&pairs, "Cluster").len(), 50);
        assert_eq!(kinds(&pairs, "DevCluster").len(), 50);
        assert!(mds.iter().all(|m| m["spec"]["replicas"] == 1));
        // Each MachineDeployment selects its own cluster's machines only.
        assert_eq!(
            mds[7]["spec"]["selector"]["matchLabels"]["cluster.x-k8s.io/cluster-name"],
            "run1-7"
        );
        // Each cluster copies templates of its own.
        assert_eq!(kinds(&pairs, "DevMachineTemplate").len(), 100);
        assert_eq!(kinds(&pairs, "KubeadmConfigTemplate").len(), 50);
        let md = &mds[7]["spec"]["template"]["spec"];
        assert_eq!(md["infrastructureRef"]["name"], "run1-7-md");
        assert_eq!(md["bootstrap"]["configRef"]["name"], "run1-7-md");
        let kcp = &kinds(&pairs, "KubeadmControlPlane")[7];
        assert_eq!(
            kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"],
            "run1-7-cp"
        );
    }

    #[test]
    fn every_object_and_every_copied_template_carries_the_watch_filter() {
        let docs = manifest("run1", Shape::Pairs, 4, "v1.35.4");
        for d in &docs {
            assert_eq!(
                d["metadata"]["labels"]["cluster.x-k8s.io/watch-filter"], "run1",
                "{d}"
            );
        }
        let filter = |d: &Value, ptr: &str| {
            d.pointer(ptr)
                .and_then(|l| l.get("cluster.x-k8s.io/watch-filter"))
                .cloned()
        };
        for d in kinds(&docs, "DevCluster") {
            assert!(
                d["metadata"]["annotations"].is_object(),
                "upstream panics without: {d}"
            );
        }
        for d in kinds(&docs, "DevMachineTemplate") {
            assert_eq!(
                filter(&d, "/spec/template/metadata/labels"),
                Some(json!("run1"))
            );
            assert!(d["spec"]["template"]["spec"]["backend"]["inMemory"].is_object());
        }
        for d in kinds(&docs, "KubeadmControlPlane") {
            assert_eq!(
                filter(&d, "/spec/machineTemplate/metadata/labels"),
                Some(json!("run1"))
            );
        }
        for d in kinds(&docs, "MachineDeployment") {
            assert_eq!(
                filter(&d, "/spec/template/metadata/labels"),
                Some(json!("run1"))
            );
        }
    }

    #[test]
    fn a_machine_counts_when_capi_says_running() {
        let m = |phase: &str| -> kube::api::DynamicObject {
            serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine", "metadata": {"name": "m"}, "status": {"phase": phase}}))
            .unwrap()
        };
        assert!(machine_running(&m("Running")));
        assert!(!machine_running(&m("Provisioned")));
    }
}
