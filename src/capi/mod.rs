//! Read-only shims of the CAPI `cluster.x-k8s.io/v1beta2` kinds we read, plus the contract's
//! label and annotation names and the pure decisions built on them (owner, paused, managed-by).
//!
//! Only the fields we read are modelled; every field is optional and unknown fields are ignored,
//! so a Cluster or Machine from a newer CAPI never fails to deserialize.
pub mod cluster;
pub mod machine;
pub mod machine_pool;
pub mod meta;

pub use cluster::*;
pub use machine::*;
pub use machine_pool::*;
pub use meta::*;

pub const GROUP: &str = "cluster.x-k8s.io";

pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Put by `clusterctl move` on each source object right before it deletes it (and strips its
/// finalizers): the object lives on in the target management cluster.
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
/// On the infrastructure machines of a MachinePool (and their Machines): the pool's name.
pub const MACHINE_POOL_NAME_LABEL: &str = "cluster.x-k8s.io/pool-name";
/// On a Machine: delete this one first when scaling down.
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";

/// A v1beta2 contract reference: `{apiGroup, kind, name}` (same namespace as the referrer).
#[derive(serde::Deserialize, serde::Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContractRef {
    #[serde(default)]
    pub api_group: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

impl ContractRef {
    /// The referenced name if the reference points at `group`/`kind`.
    pub fn name_if(&self, group: &str, kind: &str) -> Option<&str> {
        let group_ok = self.api_group.as_deref().is_none_or(|g| g == group);
        (group_ok && self.kind.as_deref() == Some(kind))
            .then_some(self.name.as_deref())
            .flatten()
    }
}

/// A `metav1.Condition` as CAPI writes it, read leniently.
#[derive(serde::Deserialize, serde::Serialize, Clone, Debug, Default, PartialEq)]
pub struct CapiCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}
