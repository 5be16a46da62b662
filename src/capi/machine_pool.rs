//! `cluster.x-k8s.io/v1beta2` MachinePool, the fields we read.
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{Bootstrap, ContractRef};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachinePool",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolSpec {
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// Unset means 1 (CAPI's webhook defaults it; upstream CAPD reads it so too).
    #[serde(default)]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub template: Option<MachineTemplate>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MachineTemplate {
    #[serde(default)]
    pub spec: Option<MachineTemplateSpec>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    #[serde(default)]
    pub bootstrap: Option<Bootstrap>,
    #[serde(default)]
    pub infrastructure_ref: Option<ContractRef>,
    #[serde(default)]
    pub version: Option<String>,
}

impl MachinePool {
    /// As [`super::cluster_name`].
    pub fn cluster_name(&self) -> Option<&str> {
        super::cluster_name(&self.metadata, self.spec.cluster_name.as_deref())
    }

    pub fn replicas(&self) -> usize {
        usize::try_from(self.spec.replicas.unwrap_or(1)).unwrap_or(0)
    }

    fn template_spec(&self) -> Option<&MachineTemplateSpec> {
        self.spec.template.as_ref()?.spec.as_ref()
    }

    /// The bootstrap data every instance boots from (one Secret for the whole pool).
    pub fn data_secret_name(&self) -> Option<&str> {
        self.template_spec()?
            .bootstrap
            .as_ref()?
            .data_secret_name
            .as_deref()
            .filter(|n| !n.is_empty())
    }

    pub fn version(&self) -> Option<&str> {
        self.template_spec()?
            .version
            .as_deref()
            .filter(|v| !v.is_empty())
    }

    pub fn infrastructure_ref(&self) -> Option<&ContractRef> {
        self.template_spec()?.infrastructure_ref.as_ref()
    }
}
