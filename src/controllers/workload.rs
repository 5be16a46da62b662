//! Clients for workload clusters, and the one thing we write there: the Node's `providerID`.
//!
//! CAPI core sets `Machine.status.nodeRef` by matching `Node.spec.providerID` with the Machine's;
//! a kind-style node's kubelet has no cloud provider to set it, so the infrastructure provider
//! does (as upstream CAPD). The client comes from the `<cluster>-kubeconfig` Secret that the
//! control-plane provider writes; its server is the cluster's control-plane endpoint, i.e. our
//! load balancer. Clients are kept per cluster, rebuilt when the Secret changes, and dropped when
//! the DockerCluster goes.
use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Node, Secret, Taint};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::json;

/// The taint a kubelet started with an external cloud provider carries until one initialises it.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// How long a request to a workload cluster may take: it sits on a reconcile's path.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the Node could not be updated (yet). Never holds kubeconfig content.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("kubeconfig Secret {0} not found")]
    KubeconfigMissing(String),
    #[error("kubeconfig Secret {0} is unusable: {1}")]
    KubeconfigInvalid(String, String),
    #[error("Node {0} is not registered in the workload cluster yet")]
    NodeMissing(String),
    #[error("workload cluster API: {0}")]
    Api(#[source] kube::Error),
}

struct Cached {
    /// The Secret's resourceVersion the client was built from.
    version: String,
    client: Client,
    used: Instant,
}

/// Workload-cluster clients, keyed by `namespace/cluster`.
#[derive(Default)]
pub struct WorkloadClients {
    clients: Mutex<HashMap<String, Cached>>,
}

impl WorkloadClients {
    /// A client for the workload cluster `namespace/cluster`, from its kubeconfig Secret (read
    /// through `mgmt`); cached until the Secret's resourceVersion changes.
    pub async fn client(
        &self,
        mgmt: &Client,
        namespace: &str,
        cluster: &str,
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
        if let Some(c) = self.lock().get_mut(&key).filter(|c| c.version == version) {
            c.used = Instant::now();
            return Ok(c.client.clone());
        }
        let client = client_from_secret(&secret)
            .await
            .map_err(|e| WorkloadError::KubeconfigInvalid(id, e))?;
        self.lock().insert(
            key,
            Cached {
                version,
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

/// A client from the Secret's `value` key (CAPI's kubeconfig Secret format). Errors name what is
/// wrong, never the content.
async fn client_from_secret(secret: &Secret) -> Result<Client, String> {
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .ok_or("no key \"value\"")?;
    let text = std::str::from_utf8(&raw.0).map_err(|_| "the value is not UTF-8".to_string())?;
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|_| "the value is not a kubeconfig".to_string())?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("cannot build a client configuration: {}", error_kind(&e)))?;
    config.connect_timeout = Some(TIMEOUT);
    config.read_timeout = Some(TIMEOUT);
    config.write_timeout = Some(TIMEOUT);
    Client::try_from(config).map_err(|e| format!("cannot build a client: {}", error_kind(&e)))
}

/// The variant of a kubeconfig error without its payload (it may quote the file).
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

    #[tokio::test]
    async fn a_kubeconfig_secret_without_value_is_named_not_quoted() {
        let s = Secret::default();
        assert_eq!(
            client_from_secret(&s).await.err().unwrap(),
            "no key \"value\""
        );
        let s = Secret {
            data: Some(
                [(
                    "value".to_string(),
                    k8s_openapi::ByteString(b"token: s3cr3t-not-a-kubeconfig: [".to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let e = client_from_secret(&s).await.err().unwrap();
        assert!(!e.contains("s3cr3t"), "{e}");
    }
}
