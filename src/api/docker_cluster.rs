//! `DockerCluster`: the cluster infrastructure (an HAProxy load-balancer container).
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ApiEndpoint, Deprecated, FailureDomain, Initialization, LocalObjectReference};
use super::conditions::Condition;

/// Desired state of a DockerCluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DockerCluster",
    plural = "dockerclusters",
    namespaced,
    status = "DockerClusterStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","description":"Control plane endpoint","jsonPath":".spec.controlPlaneEndpoint.host","priority":10}"#,
    printcolumn = r#"{"name":"Provisioned","type":"string","description":"DockerCluster is provisioned","jsonPath":".status.initialization.provisioned"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","description":"Reconciliation paused","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","priority":10}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerCluster","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DockerClusterSpec {
    /// Endpoint of the workload cluster's API server. Admission defaults the port to 6443 (as
    /// upstream's webhook does); the controller fills an empty host with the load balancer's
    /// address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"port": 6443}))]
    pub control_plane_endpoint: Option<ApiEndpoint>,

    /// Failure domains machines may be placed in; copied to status. In any order, as upstream
    /// accepts them: a CEL rule requiring them sorted rejected upstream's manifests and, using
    /// `sort()`, which Kubernetes 1.34's CEL lacks, kept the CRD off older management clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["name"]
    ))]
    pub failure_domains: Option<Vec<FailureDomain>>,

    /// The load-balancer container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<DockerLoadBalancer>,
}

/// Settings of the HAProxy load-balancer container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerLoadBalancer {
    /// Image repository of the load balancer (default: the manager's `--lb-image` repository,
    /// `kindest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::image_repository")]
    pub image_repository: Option<String>,
    /// Image tag of the load balancer (default: the manager's `--lb-image` tag).
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

/// Observed state of a DockerCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerClusterStatus {
    /// Conditions: Ready, Paused, LoadBalancerAvailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// Provisioning state of the v1beta2 contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Kept equal to `initialization.provisioned` for readers of the older contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Failure domains, copied from spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// Fields of the v1beta1 contract (not written by this provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated>,
}
