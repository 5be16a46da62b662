//! `cluster.x-k8s.io/v1beta2` Machine, the fields we read.
use kube::{CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};

use super::{CONTROL_PLANE_LABEL, CapiCondition, ContractRef};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    namespaced,
    status = "MachineStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    #[serde(default)]
    pub cluster_name: Option<String>,
    #[serde(default)]
    pub bootstrap: Option<Bootstrap>,
    #[serde(default)]
    pub infrastructure_ref: Option<ContractRef>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default, rename = "providerID")]
    pub provider_id: Option<String>,
    #[serde(default)]
    pub failure_domain: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    #[serde(default)]
    pub config_ref: Option<ContractRef>,
    #[serde(default)]
    pub data_secret_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MachineStatus {
    #[serde(default)]
    pub conditions: Option<Vec<CapiCondition>>,
}

impl Machine {
    /// The cluster this Machine belongs to: the cluster-name label, else `spec.clusterName`.
    pub fn cluster_name(&self) -> Option<&str> {
        super::cluster_name(&self.metadata, self.spec.cluster_name.as_deref())
    }

    pub fn is_control_plane(&self) -> bool {
        self.labels().contains_key(CONTROL_PLANE_LABEL)
    }

    pub fn data_secret_name(&self) -> Option<&str> {
        self.spec
            .bootstrap
            .as_ref()
            .and_then(|b| b.data_secret_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    pub fn failure_domain(&self) -> Option<&str> {
        self.spec
            .failure_domain
            .as_deref()
            .filter(|f| !f.is_empty())
    }
}
