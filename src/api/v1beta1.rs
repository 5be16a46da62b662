//! The `v1beta1` shapes of our four kinds: served for manifests and clients written for CAPD
//! before v1.11, never stored. The API server converts them to and from `v1beta2` (the storage
//! version) through the manager's conversion webhook ([`super::conversion`]).
//!
//! Field shapes follow upstream CAPD's v1beta1 (v1.13.5/v1.14). The API server validates a
//! request against the version it was written in, not the stored one, so the lengths, ranges
//! and CEL rules follow our v1beta2 schema: what v1beta1 admits, v1beta2 can store. Empty values
//! are admitted (a Go v1beta1 client writes `host: ""`, `port: 0`, `metadata: {}` for "not
//! set") and conversion reads them as unset. The image and failure-domain rules come from the
//! same schema functions as v1beta2's ([`super::common`]), so that v1beta1 is no way around
//! them; `schema_rules_match_v1beta2` in [`super::crds`] checks that nothing else drifts.
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{LocalObjectReference, MachineAddress, Mount, V1Beta1Condition};
use super::conditions::Condition;
use super::docker_machine::DURATION_PATTERN;
use super::docker_machine_pool::{
    DockerMachinePoolInstanceStatus, DockerMachinePoolMachineTemplate,
};

/// v1beta1 desired state of a DockerCluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DockerCluster",
    plural = "dockerclusters",
    namespaced,
    status = "DockerClusterStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerCluster","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DockerClusterSpec {
    /// Endpoint of the workload cluster's API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"port": 6443}))]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Failure domains machines may be placed in, by name; copied to status.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "null_domains_are_empty"
    )]
    #[schemars(schema_with = "failure_domain_map")]
    pub failure_domains: Option<BTreeMap<String, FailureDomainSpec>>,
    /// The load-balancer container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<DockerLoadBalancer>,
}

/// v1beta1 `{host, port}`: a Go client writes `{host: "", port: 0}` for "not set yet".
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// The hostname or IP on which the API server is serving ("" = not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub host: Option<String>,
    /// The port on which the API server is serving (0 = not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535), extend("default" = 6443))]
    pub port: Option<i32>,
}

/// v1beta1 failure domains, keyed by name: at most 100 (as v1beta2's list), names bounded by the
/// rule v1beta2 puts on `name`.
fn failure_domain_map(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let value = generator.subschema_for::<FailureDomainSpec>();
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 100,
        "additionalProperties": value,
        "x-kubernetes-validations": [{
            "rule": super::common::failure_domain_keys_rule(),
            "message": super::common::FAILURE_DOMAIN_KEYS_MESSAGE,
        }],
    })
}

/// A failure domain whose value is `null` is an empty one, as Go's decoder reads it. The API
/// server sends such entries: server-side apply's field pruning turns a domain written as `{}`
/// (Go drops `controlPlane: false`) into `null` before converting the object, and refusing it
/// failed every apply of such a DevCluster (upstream's runtimesdk-v1beta1 ClusterClass).
fn null_domains_are_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, FailureDomainSpec>>, D::Error> {
    let map: Option<BTreeMap<String, Option<FailureDomainSpec>>> = Deserialize::deserialize(d)?;
    Ok(map.map(|m| {
        m.into_iter()
            .map(|(name, fd)| (name, fd.unwrap_or_default()))
            .collect()
    }))
}

/// v1beta1 failure domain (its name is the map key).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomainSpec {
    /// Whether the failure domain is suitable for control-plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// Free-form attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
}

/// Settings of the HAProxy load-balancer container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerLoadBalancer {
    /// Image repository of the load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::image_repository")]
    pub image_repository: Option<String>,
    /// Image tag of the load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::image_tag")]
    pub image_tag: Option<String>,
    /// A ConfigMap in the same namespace whose `value` key replaces the generated haproxy.cfg.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "customHAProxyConfigTemplateRef"
    )]
    pub custom_haproxy_config_template_ref: Option<LocalObjectReference>,
}

/// v1beta1 observed state of a DockerCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerClusterStatus {
    /// True once the load balancer is up and the endpoint set.
    #[serde(default)]
    pub ready: bool,
    /// Failure domains, copied from spec.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "null_domains_are_empty"
    )]
    #[schemars(schema_with = "failure_domain_map")]
    pub failure_domains: Option<BTreeMap<String, FailureDomainSpec>>,
    /// Conditions in CAPI's v1beta1 style.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<V1Beta1Condition>>,
    /// The v1beta2 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<V1Beta2Status>,
}

/// `status.v1beta2` of a v1beta1 object: where the v1beta2 conditions are read.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct V1Beta2Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}

/// v1beta1 desired state of a DockerMachine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DockerMachine",
    plural = "dockermachines",
    namespaced,
    status = "DockerMachineStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Machine","type":"string","description":"Machine object which owns this DockerMachine","jsonPath":".metadata.ownerReferences[?(@.kind==\"Machine\")].name"}"#,
    printcolumn = r#"{"name":"ProviderID","type":"string","description":"Provider ID","jsonPath":".spec.providerID"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","description":"Machine ready status","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerMachine","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachineSpec {
    /// `docker:////<container>`; set by the controller ("" = not set).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    #[schemars(length(max = 512))]
    pub provider_id: Option<String>,
    /// Node image to use instead of the one chosen from the Machine's Kubernetes version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::image_reference")]
    pub custom_image: Option<String>,
    /// Images saved from the host's Docker Engine and imported into the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_load_images: Option<Vec<String>>,
    /// Host paths to mount into the node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_mounts: Option<Vec<Mount>>,
    /// Set by the controller once bootstrap succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrapped: Option<bool>,
    /// How long bootstrap may take (Go duration, default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub bootstrap_timeout: Option<String>,
}

/// v1beta1 observed state of a DockerMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachineStatus {
    /// True once the container runs and bootstrap succeeded.
    #[serde(default)]
    pub ready: bool,
    /// Whether this control-plane node has been added to the load balancer.
    #[serde(default)]
    pub load_balancer_configured: bool,
    /// Hostname and IPs of the node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// Conditions in CAPI's v1beta1 style.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<V1Beta1Condition>>,
    /// The v1beta2 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<V1Beta2Status>,
}

/// v1beta1 desired state of a DockerClusterTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
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
    /// Labels and annotations for the created DockerCluster (`{}` = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DockerClusterSpec,
}

/// v1beta1 desired state of a DockerMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DockerMachineTemplate",
    plural = "dockermachinetemplates",
    namespaced,
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerMachineTemplate","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DockerMachineTemplateSpec {
    pub template: DockerMachineTemplateResource,
}

/// The DockerMachine stamped out from the template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DockerMachineTemplateResource {
    /// Labels and annotations for the created DockerMachine (`{}` = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DockerMachineSpec,
}

/// v1beta1 labels and annotations of objects created from a template; may be empty.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::template_labels")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::template_annotations")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// v1beta1 desired state of a DockerMachinePool (the same fields as v1beta2).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DockerMachinePool",
    plural = "dockermachinepools",
    namespaced,
    status = "DockerMachinePoolStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerMachinePool","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachinePoolSpec {
    #[serde(default)]
    pub template: DockerMachinePoolMachineTemplate,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerIDList"
    )]
    pub provider_id_list: Option<Vec<String>>,
}

/// v1beta1 observed state of a DockerMachinePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachinePoolStatus {
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<DockerMachinePoolInstanceStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_machine_kind: Option<String>,
    /// Conditions in CAPI's v1beta1 style.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<V1Beta1Condition>>,
    /// The v1beta2 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<V1Beta2Status>,
}

/// v1beta1 desired state of a DockerMachinePoolTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
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
    /// Labels and annotations for the created DockerMachinePool (`{}` = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DockerMachinePoolSpec,
}

/// v1beta1 desired state of a DevCluster (the backend layout of v1beta2).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DevCluster",
    plural = "devclusters",
    namespaced,
    status = "DockerClusterStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevCluster","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DevClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::endpoint_without_default::<ApiEndpoint>")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    #[serde(default)]
    pub backend: DevClusterBackend,
}

/// v1beta1 backends of a DevCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevClusterBackend {
    /// A v1beta1 DockerCluster's spec, but for `controlPlaneEndpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerClusterSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::dev::in_memory_schema")]
    pub in_memory: Option<serde_json::Value>,
}

/// v1beta1 desired state of a DevMachine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DevMachine",
    plural = "devmachines",
    namespaced,
    status = "DockerMachineStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Machine","type":"string","description":"Machine object which owns this DevMachine","jsonPath":".metadata.ownerReferences[?(@.kind==\"Machine\")].name"}"#,
    printcolumn = r#"{"name":"ProviderID","type":"string","description":"Provider ID","jsonPath":".spec.providerID"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","description":"Machine ready status","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevMachine","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DevMachineSpec {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    #[schemars(length(max = 512))]
    pub provider_id: Option<String>,
    #[serde(default)]
    pub backend: DevMachineBackend,
}

/// v1beta1 backends of a DevMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevMachineBackend {
    /// A v1beta1 DockerMachine's spec, but for `providerID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerMachineSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::dev::in_memory_schema")]
    pub in_memory: Option<serde_json::Value>,
}

/// v1beta1 desired state of a DevClusterTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DevClusterTemplate",
    plural = "devclustertemplates",
    namespaced,
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevClusterTemplate","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DevClusterTemplateSpec {
    pub template: DevClusterTemplateResource,
}

/// The DevCluster stamped out from the template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DevClusterTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DevClusterSpec,
}

/// v1beta1 desired state of a DevMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "DevMachineTemplate",
    plural = "devmachinetemplates",
    namespaced,
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevMachineTemplate","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DevMachineTemplateSpec {
    pub template: DevMachineTemplateResource,
}

/// The DevMachine stamped out from the template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DevMachineTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DevMachineSpec,
}
