//! The workload clusters of the end-to-end tests: kubectl with their kubeconfig, and waiting
//! for Machines whose Nodes are Ready with our providerID.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::Value;

use super::{capi_e2e::*, *};

/// Generous: two cores build three nodes' worth of containers and kubelets.
pub const NODES_READY: Duration = Duration::from_secs(600);

/// kubectl against the workload cluster; `Err` carries stderr (for polling).
pub fn wl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    kubectl_at(kubeconfig, args, stdin)
}

pub fn wl_json(kubeconfig: &Path, args: &[&str]) -> Option<Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&wl(kubeconfig, &a, None).ok()?).ok()
}

/// Names of the Nodes that are Ready.
pub fn ready_nodes(kubeconfig: &Path) -> Option<BTreeSet<String>> {
    let nodes = wl_json(kubeconfig, &["get", "nodes"])?;
    Some(
        nodes["items"]
            .as_array()?
            .iter()
            .filter(|n| {
                n["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
            .collect(),
    )
}

/// The Machines of the cluster: (name, is control plane, nodeRef name, providerID).
pub async fn machines(
    env: &TestEnvRef,
    ns: &str,
) -> Vec<(String, bool, Option<String>, Option<String>)> {
    capi_api(env, ns, "cluster.x-k8s.io", "Machine")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| {
            (
                m.name_any(),
                m.labels().contains_key("cluster.x-k8s.io/control-plane"),
                m.data["status"]["nodeRef"]["name"]
                    .as_str()
                    .map(str::to_string),
                m.data["spec"]["providerID"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// Waits until the cluster has exactly `cp` control-plane and `workers` worker Machines, each
/// with a nodeRef to a Ready Node whose providerID is ours; returns the Ready node names.
pub async fn wait_for_nodes(
    env: &TestEnvRef,
    ns: &str,
    kubeconfig: &Path,
    cp: usize,
    workers: usize,
    what: &str,
) -> BTreeSet<String> {
    let t0 = Instant::now();
    let nodes = eventually(NODES_READY, what, || async {
        let ms = machines(env, ns).await;
        let (cps, wks) = ms.iter().partition::<Vec<_>, _>(|m| m.1);
        if cps.len() != cp || wks.len() != workers {
            return None;
        }
        let ready = ready_nodes(kubeconfig)?;
        if ready.len() != cp + workers {
            return None;
        }
        for (_, _, node_ref, provider_id) in &ms {
            let node = node_ref.as_ref()?;
            if !ready.contains(node)
                || provider_id.as_deref() != Some(&format!("docker:////{node}"))
            {
                return None;
            }
        }
        Some(ready)
    })
    .await;
    eprintln!("{what}: {:.0}s", t0.elapsed().as_secs_f64());
    nodes
}

/// The workload cluster's kubeconfig, from the Secret KCP writes, in a file for kubectl.
pub async fn workload_kubeconfig(env: &TestEnvRef, ns: &str, cluster: &str) -> PathBuf {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), ns);
    let secret = eventually(NODES_READY, "the workload kubeconfig Secret", || async {
        secrets
            .get_opt(&format!("{cluster}-kubeconfig"))
            .await
            .ok()?
    })
    .await;
    let value = secret.data.unwrap()["value"].0.clone();
    let path = std::env::temp_dir().join(format!("capd-rs-{}-{cluster}.kubeconfig", env.id));
    std::fs::write(&path, value).unwrap();
    path
}
