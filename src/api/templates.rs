//! `DockerClusterTemplate` and `DockerMachineTemplate`: used by ClusterClass, KCP and
//! MachineDeployments to stamp out our objects. Only a machine template's status is written (its
//! capacity: see `controllers::machine_template`); nothing reads their specs but CAPI.
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::ObjectMeta;
use super::docker_cluster::DockerClusterSpec;
use super::docker_machine::DockerMachineSpec;

/// Desired state of a DockerClusterTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DockerClusterTemplate",
    plural = "dockerclustertemplates",
    namespaced,
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerClusterTemplate","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DockerClusterTemplateSpec {
    pub template: DockerClusterTemplateResource,
}

/// The DockerCluster stamped out from the template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DockerClusterTemplateResource {
    /// Labels and annotations for the created DockerCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DockerClusterSpec,
}

/// Desired state of a DockerMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DockerMachineTemplate",
    plural = "dockermachinetemplates",
    namespaced,
    status = "DockerMachineTemplateStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerMachineTemplate","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DockerMachineTemplateSpec {
    pub template: DockerMachineTemplateResource,
}

/// The DockerMachine stamped out from the template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DockerMachineTemplateResource {
    /// Labels and annotations for the created DockerMachine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DockerMachineSpec,
}

/// Observed state of a DockerMachineTemplate (capacity, for autoscaling from zero).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DockerMachineTemplateStatus {
    /// Resources of a machine made from this template (`cpu`, `memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, QuantitySchema>>")]
    pub capacity: Option<BTreeMap<String, serde_json::Value>>,
}

/// Schema stand-in for a Kubernetes `resource.Quantity` (int-or-string with the quantity pattern).
#[derive(JsonSchema)]
#[schemars(extend(
    "x-kubernetes-int-or-string" = true,
    "anyOf" = [{"type": "integer"}, {"type": "string"}],
    "pattern" = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
))]
pub struct QuantitySchema;
