//! `DockerMachinePool` and `DockerMachinePoolTemplate`: the infrastructure of a CAPI
//! MachinePool. Its instances are DockerMachines (CAPI's "MachinePool Machines"): the pool
//! controller keeps one per replica, CAPI core gives each a Machine, and the DockerMachine
//! controller makes each a node container.
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Deprecated, MachineAddress, Mount, ObjectMeta};
use super::conditions::Condition;

/// What every instance of the pool is made from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachinePoolMachineTemplate {
    /// Node image instead of the one chosen from the MachinePool's Kubernetes version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub custom_image: Option<String>,
    /// Images saved from the host's Docker Engine and imported into each node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_load_images: Option<Vec<String>>,
    /// Host paths to mount into each node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_mounts: Option<Vec<Mount>>,
}

/// Desired state of a DockerMachinePool.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DockerMachinePool",
    plural = "dockermachinepools",
    namespaced,
    status = "DockerMachinePoolStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","description":"Instances (DockerMachines) of the pool","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","description":"All replicas have a providerID","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerMachinePool","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachinePoolSpec {
    /// What each instance is made from.
    #[serde(default)]
    pub template: DockerMachinePoolMachineTemplate,
    /// `docker:////<cluster>-dmp-<name>`; set by the controller.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    /// The providerIDs of the instances (sorted); set by the controller, read by CAPI core.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerIDList"
    )]
    pub provider_id_list: Option<Vec<String>>,
}

/// Observed state of a DockerMachinePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachinePoolStatus {
    /// Conditions: Ready, Paused, ReplicasReady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// True when every replica has an instance with a providerID (CAPI core waits for it).
    #[serde(default)]
    pub ready: bool,
    /// Instances (DockerMachines) that exist and are not being deleted.
    #[serde(default)]
    pub replicas: i32,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Per instance (kept for readers of the older shape; the DockerMachines say more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<DockerMachinePoolInstanceStatus>>,
    /// `DockerMachine`: tells CAPI core to give each instance a Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_machine_kind: Option<String>,
    /// Fields of the v1beta1 contract (not written by this provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated>,
}

/// One instance of the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachinePoolInstanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_name: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrapped: Option<bool>,
}

/// Desired state of a DockerMachinePoolTemplate (ClusterClass worker pools).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DockerMachinePoolTemplate",
    plural = "dockermachinepooltemplates",
    namespaced,
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerMachinePoolTemplate","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DockerMachinePoolTemplateSpec {
    pub template: DockerMachinePoolTemplateResource,
}

/// The DockerMachinePool stamped out from the template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DockerMachinePoolTemplateResource {
    /// Labels and annotations for the created DockerMachinePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DockerMachinePoolSpec,
}
