//! The Dev* kinds (`DevCluster`, `DevMachine`, their templates and pools): upstream CAPD's
//! successors of the Docker* kinds since v1.13, used by its v1.14 quick-start ClusterClass and
//! e2e data. Each holds the Docker* spec under `spec.backend.docker`; `controlPlaneEndpoint`
//! and `providerID` (the fields of the CAPI contract) stay at the top of `spec`. Status is the
//! Docker* status.
//!
//! This provider serves the `docker` backend only. Upstream's `inMemory` backend (a test
//! double of a cluster, with no containers) is accepted by the schema so that its manifests
//! apply, and gets a condition saying it is not served (see [`UNSERVED_BACKEND`]).
//!
//! The controllers reconcile a Dev* object as a *view*: the Docker* object it describes
//! ([`DevCluster::view`], [`DevMachine::view`], [`DevMachinePool::view`]). Every write goes to
//! the Dev* resource, at paths the two shapes share (metadata, `spec.controlPlaneEndpoint`,
//! `spec.providerID`, `spec.providerIDList`, status).
use std::collections::BTreeMap;

use kube::{CustomResource, api::ObjectMeta as KubeMeta};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    common::{ApiEndpoint, ObjectMeta},
    docker_cluster::{DockerCluster, DockerClusterSpec, DockerClusterStatus},
    docker_machine::{DockerMachine, DockerMachineSpec, DockerMachineStatus},
    docker_machine_pool::{
        DockerMachinePool, DockerMachinePoolMachineTemplate, DockerMachinePoolSpec,
        DockerMachinePoolStatus,
    },
    templates::DockerMachineTemplateStatus,
};

/// Set on a view (never written to the API server) whose object names no backend this
/// provider serves; its value is the backend's name. The controllers then only report it.
pub const UNSERVED_BACKEND: &str = "capd-rs.infrastructure.cluster.x-k8s.io/unserved-backend";

/// The backend a view is marked with ([`UNSERVED_BACKEND`]), if any.
pub fn unserved_backend(meta: &KubeMeta) -> Option<&str> {
    view_mark(meta, UNSERVED_BACKEND)
}

fn view_mark<'a>(meta: &'a KubeMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Set on a view (never written to the API server) of a Dev* object whose backend is
/// `inMemory`, when this manager serves it: its value is `spec.backend.inMemory` as JSON, which
/// the in-memory arms read (`crate::inmemory::spec`).
pub const IN_MEMORY_BACKEND: &str = "capd-rs.infrastructure.cluster.x-k8s.io/in-memory";

/// The `spec.backend.inMemory` a view is marked with ([`IN_MEMORY_BACKEND`]), if any.
pub fn in_memory_backend(meta: &KubeMeta) -> Option<&str> {
    view_mark(meta, IN_MEMORY_BACKEND)
}

/// What the condition of an object with an unserved backend says.
pub fn unserved_message(kind: &str, backend: &str) -> String {
    format!(
        "spec.backend.{backend} is not served by this manager: it was started with \
         --in-memory-backend=false (clusterctl variable CAPD_IN_MEMORY_BACKEND=false); start it \
         without that, or create the {kind} with a docker backend"
    )
}

/// Upstream's in-memory backend: kept as written; acted on unless `--in-memory-backend=false`.
pub(crate) fn in_memory_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "Upstream's in-memory backend: served unless the manager runs with --in-memory-backend=false.",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Desired state of a DevCluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DevCluster",
    plural = "devclusters",
    namespaced,
    status = "DockerClusterStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","description":"Control plane endpoint","jsonPath":".spec.controlPlaneEndpoint.host","priority":10}"#,
    printcolumn = r#"{"name":"Provisioned","type":"string","description":"DevCluster is provisioned","jsonPath":".status.initialization.provisioned"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevCluster","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DevClusterSpec {
    /// Endpoint of the workload cluster's API server. Admission defaults nothing: the docker
    /// backend writes port 6443 when it sets the endpoint, the in-memory backend its listener's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        schema_with = "super::common::endpoint_without_default::<super::common::ApiEndpoint>"
    )]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Where the cluster runs.
    #[serde(default)]
    pub backend: DevClusterBackend,
}

/// The backends of a DevCluster (exactly one is meant to be set; `docker` when none is).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevClusterBackend {
    /// A DockerCluster's spec, but for `controlPlaneEndpoint` (in the DevCluster's spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerClusterSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "in_memory_schema")]
    pub in_memory: Option<Value>,
}

/// Desired state of a DevMachine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DevMachine",
    plural = "devmachines",
    namespaced,
    status = "DockerMachineStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Provider ID","type":"string","description":"Provider ID","jsonPath":".spec.providerID","priority":10}"#,
    printcolumn = r#"{"name":"Failure domain","type":"string","description":"The failure domain where the DevMachine has been scheduled","jsonPath":".status.failureDomain"}"#,
    printcolumn = r#"{"name":"IP","type":"string","description":"IP of the Machine","jsonPath":".status.addresses[?(@.type==\"InternalIP\")].address","priority":10}"#,
    printcolumn = r#"{"name":"Paused","type":"string","description":"Reconciliation paused","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","priority":10}"#,
    printcolumn = r#"{"name":"Provisioned","type":"string","description":"DevMachine is provisioned","jsonPath":".status.initialization.provisioned"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevMachine","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DevMachineSpec {
    /// `docker:////<container>`; set by the controller.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// Where the machine runs.
    #[serde(default)]
    pub backend: DevMachineBackend,
}

/// The backends of a DevMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevMachineBackend {
    /// A DockerMachine's spec, but for `providerID` (in the DevMachine's spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerMachineSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "in_memory_schema")]
    pub in_memory: Option<Value>,
}

/// Desired state of a DevMachinePool (served in v1beta2 only, as upstream).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DevMachinePool",
    plural = "devmachinepools",
    namespaced,
    status = "DockerMachinePoolStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","description":"Instances (DevMachines) of the pool","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","description":"All replicas have a providerID","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevMachinePool","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DevMachinePoolSpec {
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
    /// What each instance is made from.
    #[serde(default)]
    pub backend: DevMachinePoolBackend,
}

/// The backend of a DevMachinePool (upstream has no in-memory pools).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DevMachinePoolBackend {
    /// What each instance (a DevMachine) is made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerMachinePoolMachineTemplate>,
}

/// Desired state of a DevClusterTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
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

/// Desired state of a DevMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DevMachineTemplate",
    plural = "devmachinetemplates",
    namespaced,
    status = "DockerMachineTemplateStatus",
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

/// Desired state of a DevMachinePoolTemplate (v1beta2 only).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DevMachinePoolTemplate",
    plural = "devmachinepooltemplates",
    namespaced,
    category = "cluster-api",
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DevMachinePoolTemplate","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DevMachinePoolTemplateSpec {
    pub template: DevMachinePoolTemplateResource,
}

/// The DevMachinePool stamped out from the template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DevMachinePoolTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: DevMachinePoolSpec,
}

/// The view's metadata: the object's, marked with its in-memory backend, served
/// ([`IN_MEMORY_BACKEND`]) or not ([`UNSERVED_BACKEND`]). Upstream picks `inMemory` whenever it
/// is set, and `docker` otherwise.
fn view_meta(meta: &KubeMeta, in_memory: Option<&Value>, serve_in_memory: bool) -> KubeMeta {
    let mut meta = meta.clone();
    if let Some(spec) = in_memory {
        let (key, value) = if serve_in_memory {
            (IN_MEMORY_BACKEND, spec.to_string())
        } else {
            (UNSERVED_BACKEND, "inMemory".to_string())
        };
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value);
    }
    meta
}

impl DevCluster {
    /// The DockerCluster this DevCluster describes, by a manager that does not serve the
    /// in-memory backend.
    pub fn view(&self) -> DockerCluster {
        self.view_serving(false)
    }

    /// The DockerCluster this DevCluster describes; `in_memory`: whether the in-memory backend
    /// is served.
    pub fn view_serving(&self, in_memory: bool) -> DockerCluster {
        let backend = &self.spec.backend;
        let mut spec = backend.docker.clone().unwrap_or_default();
        spec.control_plane_endpoint = self.spec.control_plane_endpoint.clone();
        DockerCluster {
            metadata: view_meta(&self.metadata, backend.in_memory.as_ref(), in_memory),
            spec,
            status: self.status.clone(),
        }
    }
}

impl DevMachine {
    /// The DockerMachine this DevMachine describes, by a manager that does not serve the
    /// in-memory backend.
    pub fn view(&self) -> DockerMachine {
        self.view_serving(false)
    }

    /// The DockerMachine this DevMachine describes; `in_memory`: whether the in-memory backend
    /// is served.
    pub fn view_serving(&self, in_memory: bool) -> DockerMachine {
        let backend = &self.spec.backend;
        let mut spec = backend.docker.clone().unwrap_or_default();
        spec.provider_id = self.spec.provider_id.clone();
        DockerMachine {
            metadata: view_meta(&self.metadata, backend.in_memory.as_ref(), in_memory),
            spec,
            status: self.status.clone(),
        }
    }

    /// The DevMachine that describes `dm` (a pool's new instance).
    pub fn from_view(dm: DockerMachine) -> Self {
        let mut docker = dm.spec;
        let provider_id = docker.provider_id.take();
        DevMachine {
            metadata: dm.metadata,
            spec: DevMachineSpec {
                provider_id,
                backend: DevMachineBackend {
                    docker: Some(docker),
                    in_memory: None,
                },
            },
            status: dm.status,
        }
    }
}

impl DevMachinePool {
    /// The DockerMachinePool this DevMachinePool describes.
    pub fn view(&self) -> DockerMachinePool {
        DockerMachinePool {
            metadata: self.metadata.clone(),
            spec: DockerMachinePoolSpec {
                template: self.spec.backend.docker.clone().unwrap_or_default(),
                provider_id: self.spec.provider_id.clone(),
                provider_id_list: self.spec.provider_id_list.clone(),
            },
            status: self.status.clone(),
        }
    }
}

/// The kind `kind` describes in the Docker* shape (for conversion), if it is a Dev* kind.
pub fn docker_kind(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "DevCluster" => "DockerCluster",
        "DevMachine" => "DockerMachine",
        "DevClusterTemplate" => "DockerClusterTemplate",
        "DevMachineTemplate" => "DockerMachineTemplate",
        _ => return None,
    })
}

/// The field of a Dev* spec that is not under `backend` (the contract's field).
fn top_level_field(kind: &str) -> &'static str {
    if kind.starts_with("DevCluster") {
        "controlPlaneEndpoint"
    } else {
        "providerID"
    }
}

/// What [`to_docker_shape`] set aside, for [`from_docker_shape`] to put back.
#[derive(Clone, Debug, Default)]
pub struct Backend {
    docker: bool,
    others: Map<String, Value>,
}

/// A Dev* object's `spec` (`template.spec` for a template) in the Docker* shape: the docker
/// backend's fields lifted next to the contract field. The other backends are set aside.
pub fn to_docker_shape(kind: &str, body: &mut Map<String, Value>) -> Backend {
    let Some(spec) = spec_mut(kind, body) else {
        return Backend::default();
    };
    let mut others = match spec.remove("backend") {
        Some(Value::Object(b)) => b,
        _ => Map::new(),
    };
    let docker = others.remove("docker");
    let present = docker.is_some();
    if let Some(Value::Object(fields)) = docker {
        spec.extend(fields);
    }
    Backend {
        docker: present,
        others,
    }
}

/// The inverse of [`to_docker_shape`].
pub fn from_docker_shape(kind: &str, body: &mut Map<String, Value>, backend: Backend) {
    let Some(spec) = spec_mut(kind, body) else {
        return;
    };
    let top = top_level_field(kind);
    let docker: Map<String, Value> = std::mem::take(spec)
        .into_iter()
        .filter_map(|(k, v)| {
            if k == top {
                spec.insert(k, v);
                None
            } else {
                Some((k, v))
            }
        })
        .collect();
    let mut b = backend.others;
    if backend.docker || !docker.is_empty() {
        b.insert("docker".into(), Value::Object(docker));
    }
    spec.insert("backend".into(), Value::Object(b));
}

fn spec_mut<'a>(
    kind: &str,
    body: &'a mut Map<String, Value>,
) -> Option<&'a mut Map<String, Value>> {
    let spec = body.get_mut("spec")?.as_object_mut()?;
    if kind.ends_with("Template") {
        spec.get_mut("template")?
            .as_object_mut()?
            .get_mut("spec")?
            .as_object_mut()
    } else {
        Some(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_view_lifts_the_docker_backend_and_keeps_the_contract_fields() {
        let dc: DevCluster = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"controlPlaneEndpoint": {"host": "1.2.3.4", "port": 6443},
                     "backend": {"docker": {"loadBalancer": {"imageTag": "v1"},
                                            "failureDomains": [{"name": "a"}]}}}
        }))
        .unwrap();
        let v = dc.view();
        assert_eq!(
            v.spec.control_plane_endpoint.unwrap().host.unwrap(),
            "1.2.3.4"
        );
        assert_eq!(v.spec.load_balancer.unwrap().image_tag.unwrap(), "v1");
        assert_eq!(v.spec.failure_domains.unwrap()[0].name, "a");
        assert!(v.metadata.annotations.is_none(), "served: no mark");

        let dm: DevMachine = serde_json::from_value(json!({
            "metadata": {"name": "m"},
            "spec": {"providerID": "docker:////c-m", "backend": {"docker": {"customImage": "img:1"}}}
        }))
        .unwrap();
        let v = dm.view();
        assert_eq!(v.spec.provider_id.as_deref(), Some("docker:////c-m"));
        assert_eq!(v.spec.custom_image.as_deref(), Some("img:1"));
        let back = DevMachine::from_view(v);
        assert_eq!(
            (back.metadata, back.spec),
            (dm.metadata, dm.spec),
            "a pool instance round-trips"
        );
    }

    #[test]
    fn no_backend_means_docker_and_in_memory_is_marked_unserved() {
        let empty: DevCluster =
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {"backend": {}}}))
                .unwrap();
        assert!(empty.view().metadata.annotations.is_none());
        // Upstream runs the in-memory backend whenever it is set, even beside docker.
        let both: DevMachine = serde_json::from_value(json!({
            "metadata": {"name": "m"},
            "spec": {"backend": {"docker": {}, "inMemory": {"vm": {"provisioning": {"startupDuration": "10s"}}}}}
        }))
        .unwrap();
        assert_eq!(
            both.view().metadata.annotations.unwrap()[UNSERVED_BACKEND],
            "inMemory"
        );
        // Served: the view carries the in-memory spec instead, and no unserved mark.
        let served = both.view_serving(true);
        assert_eq!(
            in_memory_backend(&served.metadata),
            Some(r#"{"vm":{"provisioning":{"startupDuration":"10s"}}}"#)
        );
        assert!(unserved_backend(&served.metadata).is_none());
        assert!(
            empty.view_serving(true).metadata.annotations.is_none(),
            "a docker object is not marked"
        );
    }

    #[test]
    fn docker_shape_round_trips_every_backend() {
        for (kind, obj) in [
            (
                "DevCluster",
                json!({"spec": {"controlPlaneEndpoint": {"host": "h"}, "backend": {"docker": {"loadBalancer": {}}}}}),
            ),
            ("DevCluster", json!({"spec": {"backend": {"docker": {}}}})),
            (
                "DevMachine",
                json!({"spec": {"providerID": "p", "backend": {"inMemory": {"vm": {}}}}}),
            ),
            (
                "DevMachineTemplate",
                json!({"spec": {"template": {"spec": {"backend": {"docker": {"customImage": "i"}}}}}}),
            ),
        ] {
            let Value::Object(mut body) = obj.clone() else {
                unreachable!()
            };
            let backend = to_docker_shape(kind, &mut body);
            assert!(
                spec_mut(kind, &mut body).unwrap().get("backend").is_none(),
                "{kind}: lifted"
            );
            from_docker_shape(kind, &mut body, backend);
            assert_eq!(Value::Object(body), obj, "{kind}");
        }
    }
}
