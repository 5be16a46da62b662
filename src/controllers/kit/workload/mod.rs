//! Clients for workload clusters, and the one thing we write there: the Node (its `providerID`,
//! and for a Node waiting for an external cloud provider its addresses and taint).
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

use k8s_openapi::api::core::v1::{Node, NodeAddress, Secret, Taint};

use crate::api::{MachineAddress, MachineAddressType};
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

/// What a Node needs from us, or `None` when it is already right. Pure, so the rules are
/// unit-tested.
#[derive(Debug, PartialEq)]
pub struct NodePatch {
    /// Merge patch of the Node: its providerID, and its taints without the uninitialized one.
    pub spec: serde_json::Value,
    /// Merge patch of the Node's status: `addresses` with the machine's InternalIPs appended,
    /// for a Node that waits for an external cloud provider (tainted uninitialized); `None` when
    /// there is nothing to add.
    pub status: Option<serde_json::Value>,
}

/// As upstream CAPD's node step: the providerID, and for a Node the kubelet registered with
/// `cloud-provider: external` (it carries the uninitialized taint; the dual-stack flavors) the
/// work of the cloud provider there is none of: the machine's InternalIP addresses appended to
/// the Node's (existing ones kept, in order: the kubelet expects new ones only appended), and the
/// taint removed. Other address types are not added, as upstream and kind.
pub fn node_patch(
    node: &Node,
    provider_id: &str,
    machine_addresses: &[MachineAddress],
) -> Option<NodePatch> {
    let spec = node.spec.as_ref();
    let id_ok = spec.and_then(|s| s.provider_id.as_deref()) == Some(provider_id);
    let taints: Vec<Taint> = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    let tainted = taints.iter().any(|t| t.key == UNINITIALIZED_TAINT);
    if id_ok && !tainted {
        return None;
    }
    let mut patch = json!({ "spec": { "providerID": provider_id } });
    let mut status = None;
    if tainted {
        let kept: Vec<&Taint> = taints
            .iter()
            .filter(|t| t.key != UNINITIALIZED_TAINT)
            .collect();
        patch["spec"]["taints"] = json!(kept);
        let mut addresses: Vec<NodeAddress> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default();
        let before = addresses.len();
        for a in machine_addresses {
            if a.type_ != MachineAddressType::InternalIp {
                continue;
            }
            let wanted = NodeAddress {
                type_: "InternalIP".to_string(),
                address: a.address.clone(),
            };
            if !addresses.contains(&wanted) {
                addresses.push(wanted);
            }
        }
        if addresses.len() > before {
            // A merge patch replaces the list: it carries the whole of it.
            status = Some(json!({ "status": { "addresses": addresses } }));
        }
    }
    Some(NodePatch {
        spec: patch,
        status,
    })
}

/// Set `providerID` on the Node named `node` (the container's hostname), and for a Node waiting
/// for a cloud provider its addresses and the removal of the uninitialized taint (see
/// [`node_patch`]). Returns whether anything changed.
pub async fn set_provider_id(
    client: &Client,
    node: &str,
    provider_id: &str,
    machine_addresses: &[MachineAddress],
) -> Result<bool, WorkloadError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = nodes
        .get_opt(node)
        .await
        .map_err(WorkloadError::Api)?
        .ok_or_else(|| WorkloadError::NodeMissing(node.to_string()))?;
    let Some(NodePatch { spec, status }) = node_patch(&current, provider_id, machine_addresses)
    else {
        return Ok(false);
    };
    // Each merge patch carries the resourceVersion: a concurrent change (the kubelet's status,
    // its taints) makes it fail instead of being overwritten. The addresses go first: once the
    // taint is gone the Node no longer says it waits for them, and a failed second write would
    // never be retried.
    let mut rv = current.resource_version();
    if let Some(mut status) = status {
        status["metadata"] = json!({ "resourceVersion": rv });
        let patched = nodes
            .patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(WorkloadError::Api)?;
        rv = patched.resource_version();
    }
    let mut spec = spec;
    spec["metadata"] = json!({ "resourceVersion": rv });
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&spec))
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
        let p = node_patch(&node(None, &[]), ID, &addrs()).unwrap();
        assert_eq!(p.spec, json!({"spec": {"providerID": ID}}));
        // Not waiting for a cloud provider: the kubelet's addresses are left alone.
        assert_eq!(p.status, None);
    }

    #[test]
    fn nothing_to_do_when_already_set_and_untainted() {
        assert_eq!(node_patch(&node(Some(ID), &["other"]), ID, &addrs()), None);
    }

    #[test]
    fn removes_only_the_uninitialized_taint() {
        let p = node_patch(
            &node(
                Some(ID),
                &[UNINITIALIZED_TAINT, "node-role.kubernetes.io/control-plane"],
            ),
            ID,
            &[],
        )
        .unwrap();
        let taints = p.spec["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0]["key"], "node-role.kubernetes.io/control-plane");
    }

    fn addrs() -> Vec<MachineAddress> {
        let a = |type_, address: &str| MachineAddress {
            type_,
            address: address.to_string(),
        };
        vec![
            a(MachineAddressType::Hostname, "c1-cp-abc"),
            a(MachineAddressType::InternalIp, "172.18.0.5"),
            a(MachineAddressType::ExternalIp, "172.18.0.5"),
            a(MachineAddressType::InternalIp, "fc00:f853:ccd:e793::5"),
            a(MachineAddressType::ExternalIp, "fc00:f853:ccd:e793::5"),
        ]
    }

    #[test]
    fn external_cloud_provider_node_gets_internal_ips_appended_and_untainted() {
        let mut n = node(None, &[UNINITIALIZED_TAINT]);
        // The kubelet registered one address already; it stays first.
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "172.18.0.5".into(),
            }]),
            ..Default::default()
        });
        let p = node_patch(&n, ID, &addrs()).unwrap();
        assert_eq!(p.spec, json!({"spec": {"providerID": ID, "taints": []}}));
        assert_eq!(
            p.status,
            Some(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "172.18.0.5"},
                {"type": "InternalIP", "address": "fc00:f853:ccd:e793::5"}
            ]}}))
        );
        // Every InternalIP there already: only the spec changes.
        n.status
            .as_mut()
            .unwrap()
            .addresses
            .as_mut()
            .unwrap()
            .push(NodeAddress {
                type_: "InternalIP".into(),
                address: "fc00:f853:ccd:e793::5".into(),
            });
        let p = node_patch(&n, ID, &addrs()).unwrap();
        assert_eq!(p.status, None);
        assert_eq!(p.spec["spec"]["taints"], json!([]));
    }
}
