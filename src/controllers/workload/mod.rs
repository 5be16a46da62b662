//! Clients for workload clusters, and the one thing we write there: the Node's `providerID`.
//!
//! CAPI core sets `Machine.status.nodeRef` by matching `Node.spec.providerID` with the Machine's;
//! a kind-style node's kubelet has no cloud provider to set it, so the infrastructure provider
//! does (as upstream CAPD). The client comes from the `<cluster>-kubeconfig` Secret that the
//! control-plane provider writes, read as inline data only and pinned to the DockerCluster's
//! control-plane endpoint, i.e. our load balancer ([`kubeconfig`] says why). Clients are kept per
//! cluster, rebuilt when the Secret or the endpoint changes, and dropped when the DockerCluster
//! goes.
use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

pub mod kubeconfig;

use k8s_openapi::api::core::v1::{Node, Secret, Taint};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

pub use kubeconfig::{Endpoint, Refused};

/// The taint a kubelet started with an external cloud provider carries until one initialises it.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// How long a request to a workload cluster may take: it sits on a reconcile's path.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the Node could not be updated (yet). Never holds kubeconfig content.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("kubeconfig Secret {0} not found")]
    KubeconfigMissing(String),
    /// The Secret asks for more than inline data, or for another server: it is not used.
    #[error("kubeconfig Secret {0} is not used: {1}")]
    KubeconfigRefused(String, Refused),
    #[error("kubeconfig Secret {0}: cannot build a client: {1}")]
    Client(String, String),
    #[error("Node {0} is not registered in the workload cluster yet")]
    NodeMissing(String),
    #[error("workload cluster API: {0}")]
    Api(#[source] kube::Error),
}

struct Cached {
    /// The Secret's resourceVersion and the endpoint the client was built for.
    version: String,
    endpoint: Endpoint,
    client: Client,
    used: Instant,
}

/// Workload-cluster clients, keyed by `namespace/cluster`.
#[derive(Default)]
pub struct WorkloadClients {
    clients: Mutex<HashMap<String, Cached>>,
}

impl WorkloadClients {
    /// A client for the workload cluster `namespace/cluster` at `endpoint` (its control-plane
    /// endpoint), from its kubeconfig Secret (read through `mgmt`); cached until the Secret's
    /// resourceVersion or the endpoint changes.
    pub async fn client(
        &self,
        mgmt: &Client,
        namespace: &str,
        cluster: &str,
        endpoint: &Endpoint,
    ) -> Result<Client, WorkloadError> {
        let name = format!("{cluster}-kubeconfig");
        let id = format!("{namespace}/{name}");
        let secret = Api::<Secret>::namespaced(mgmt.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(WorkloadError::Api)?
            .ok_or_else(|| WorkloadError::KubeconfigMissing(id.clone()))?;
        let version = secret.resource_version().unwrap_or_default();
        let key = format!("{namespace}/{cluster}");
        if let Some(c) = self
            .lock()
            .get_mut(&key)
            .filter(|c| c.version == version && &c.endpoint == endpoint)
        {
            c.used = Instant::now();
            return Ok(c.client.clone());
        }
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(|v| v.0.as_slice());
        let config = kubeconfig::config(value, endpoint)
            .map_err(|e| WorkloadError::KubeconfigRefused(id.clone(), e))?;
        let client = Client::try_from(kubeconfig::with_timeouts(config, TIMEOUT))
            .map_err(|e| WorkloadError::Client(id, error_kind(&e)))?;
        self.lock().insert(
            key,
            Cached {
                version,
                endpoint: endpoint.clone(),
                client: client.clone(),
                used: Instant::now(),
            },
        );
        Ok(client)
    }

    /// Drop the client of a cluster that is going away.
    pub fn forget(&self, namespace: &str, cluster: &str) {
        self.lock().remove(&format!("{namespace}/{cluster}"));
    }

    /// Clusters with a cached client.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The variant of a client error without its payload (it may quote key material).
fn error_kind(e: &dyn std::error::Error) -> String {
    let text = format!("{e:?}");
    text.split(['(', ' ', '{'])
        .next()
        .unwrap_or("error")
        .to_string()
}

/// What a Node needs from us: the patch that sets its providerID and removes the uninitialized
/// taint, or `None` when it is already right. Pure, so the rules are unit-tested.
pub fn node_patch(node: &Node, provider_id: &str) -> Option<serde_json::Value> {
    let spec = node.spec.as_ref();
    let id_ok = spec.and_then(|s| s.provider_id.as_deref()) == Some(provider_id);
    let taints: Vec<Taint> = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    let tainted = taints.iter().any(|t| t.key == UNINITIALIZED_TAINT);
    if id_ok && !tainted {
        return None;
    }
    let mut patch = json!({ "spec": { "providerID": provider_id } });
    if tainted {
        let kept: Vec<&Taint> = taints
            .iter()
            .filter(|t| t.key != UNINITIALIZED_TAINT)
            .collect();
        patch["spec"]["taints"] = json!(kept);
    }
    Some(patch)
}

/// Set `providerID` on the Node named `node` (the container's hostname) and remove the
/// uninitialized taint. Returns whether anything changed.
pub async fn set_provider_id(
    client: &Client,
    node: &str,
    provider_id: &str,
) -> Result<bool, WorkloadError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = nodes
        .get_opt(node)
        .await
        .map_err(WorkloadError::Api)?
        .ok_or_else(|| WorkloadError::NodeMissing(node.to_string()))?;
    let Some(patch) = node_patch(&current, provider_id) else {
        return Ok(false);
    };
    // A merge patch carrying the resourceVersion fails on a concurrent change instead of
    // overwriting the kubelet's taints.
    let mut patch = patch;
    patch["metadata"] = json!({ "resourceVersion": current.resource_version() });
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(WorkloadError::Api)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;

    fn node(provider_id: Option<&str>, taints: &[&str]) -> Node {
        Node {
            spec: Some(NodeSpec {
                provider_id: provider_id.map(str::to_string),
                taints: Some(
                    taints
                        .iter()
                        .map(|k| Taint {
                            key: k.to_string(),
                            effect: "NoSchedule".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const ID: &str = "docker:////c1-cp-abc";

    #[test]
    fn sets_a_missing_provider_id() {
        let p = node_patch(&node(None, &[]), ID).unwrap();
        assert_eq!(p, json!({"spec": {"providerID": ID}}));
    }

    #[test]
    fn nothing_to_do_when_already_set_and_untainted() {
        assert_eq!(node_patch(&node(Some(ID), &["other"]), ID), None);
    }

    #[test]
    fn removes_only_the_uninitialized_taint() {
        let p = node_patch(
            &node(
                Some(ID),
                &[UNINITIALIZED_TAINT, "node-role.kubernetes.io/control-plane"],
            ),
            ID,
        )
        .unwrap();
        let taints = p["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0]["key"], "node-role.kubernetes.io/control-plane");
    }
}
