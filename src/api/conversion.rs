//! Conversion between `v1beta1` (served) and `v1beta2` (stored), for the conversion webhook.
//!
//! Pure functions over whole objects as JSON. `metadata` passes through untouched but for one
//! annotation: a `v1beta2` object that `v1beta1` cannot hold in full is converted down with its
//! `v1beta2` body saved in [`DATA_ANNOTATION`] (upstream's key and format: the object without
//! metadata), and converting back up restores it, so a `v1beta1` client's read-modify-write
//! loses nothing. The annotation is only added where it is needed: an object written as
//! `v1beta1` reads back as `v1beta1` exactly as written.
use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use super::{
    common::{
        ApiEndpoint, Deprecated, DeprecatedV1Beta1, FailureDomain, Initialization, ObjectMeta,
    },
    docker_cluster::{DockerClusterSpec, DockerClusterStatus, DockerLoadBalancer},
    docker_machine::{DockerMachineSpec, DockerMachineStatus},
    docker_machine_pool::{
        DockerMachinePoolSpec, DockerMachinePoolStatus, DockerMachinePoolTemplateResource,
        DockerMachinePoolTemplateSpec,
    },
    templates::{
        DockerClusterTemplateResource, DockerClusterTemplateSpec, DockerMachineTemplateResource,
        DockerMachineTemplateSpec, DockerMachineTemplateStatus,
    },
    v1beta1 as old,
};

/// Where a `v1beta2` object's body is kept while it is read as `v1beta1`.
pub const DATA_ANNOTATION: &str = "cluster.x-k8s.io/conversion-data";
pub const V1BETA1: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
pub const V1BETA2: &str = "infrastructure.cluster.x-k8s.io/v1beta2";

/// The largest saved body we read back. The API server caps all annotations of an object at
/// 256 KiB together, so a larger one did not come through it; it is dropped unread.
pub const MAX_SAVED_BYTES: usize = 256 * 1024;

/// Why an object could not be converted (the API server then fails the request with this).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConversionError {
    #[error("cannot convert {kind} from {from} to {to}: not a version this provider serves")]
    Version {
        kind: String,
        from: String,
        to: String,
    },
    #[error("cannot convert kind {0:?}: not one of this provider's kinds")]
    Kind(String),
    #[error("{kind} {name}: {message}")]
    Body {
        kind: String,
        name: String,
        message: String,
    },
}

/// Convert one object to `desired` (`infrastructure.cluster.x-k8s.io/v1beta1` or `/v1beta2`).
pub fn convert(object: Value, desired: &str) -> Result<Value, ConversionError> {
    let Value::Object(mut object) = object else {
        return Err(ConversionError::Kind("(not an object)".into()));
    };
    let text = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (kind, from) = (text("kind"), text("apiVersion"));
    if from == desired {
        return Ok(Value::Object(object));
    }
    let up = match (from.as_str(), desired) {
        (V1BETA1, V1BETA2) => true,
        (V1BETA2, V1BETA1) => false,
        _ => {
            return Err(ConversionError::Version {
                kind,
                from,
                to: desired.into(),
            });
        }
    };
    let mut metadata = object
        .remove("metadata")
        .unwrap_or(Value::Object(Map::new()));
    // A Dev* kind converts as the Docker* kind it holds under `spec.backend.docker` (the
    // annotation too); its other backends are the same in both versions and set aside.
    let dev = super::dev::docker_kind(&kind);
    let backend = dev.map(|_| {
        edit_saved(&mut metadata, |saved| {
            super::dev::to_docker_shape(&kind, saved);
        });
        super::dev::to_docker_shape(&kind, &mut object)
    });
    let result = match dev.unwrap_or(kind.as_str()) {
        "DockerCluster" => convert_body::<DockerClusterKind>(&object, &mut metadata, up),
        "DockerMachine" => convert_body::<DockerMachineKind>(&object, &mut metadata, up),
        "DockerClusterTemplate" => {
            convert_body::<DockerClusterTemplateKind>(&object, &mut metadata, up)
        }
        "DockerMachineTemplate" => {
            convert_body::<DockerMachineTemplateKind>(&object, &mut metadata, up)
        }
        "DockerMachinePool" => convert_body::<DockerMachinePoolKind>(&object, &mut metadata, up),
        "DockerMachinePoolTemplate" => {
            convert_body::<DockerMachinePoolTemplateKind>(&object, &mut metadata, up)
        }
        _ => return Err(ConversionError::Kind(kind)),
    };
    let mut body = result.map_err(|message| ConversionError::Body {
        name: metadata
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        kind: kind.clone(),
        message,
    })?;
    if let Some(backend) = backend {
        edit_saved(&mut metadata, |saved| {
            super::dev::from_docker_shape(&kind, saved, backend.clone());
        });
        super::dev::from_docker_shape(&kind, &mut body, backend);
    }
    body.insert("apiVersion".into(), Value::String(desired.into()));
    body.insert("kind".into(), Value::String(kind));
    body.insert("metadata".into(), metadata);
    Ok(Value::Object(body))
}

/// Apply `edit` to the body saved in [`DATA_ANNOTATION`], if there is one that parses.
fn edit_saved(metadata: &mut Value, edit: impl FnOnce(&mut Map<String, Value>)) {
    let Some(slot) = metadata
        .get_mut("annotations")
        .and_then(|a| a.get_mut(DATA_ANNOTATION))
    else {
        return;
    };
    if let Some(Value::Object(mut saved)) = slot.as_str().and_then(|s| serde_json::from_str(s).ok())
    {
        edit(&mut saved);
        *slot = Value::String(Value::Object(saved).to_string());
    }
}

/// `spec` and `status` of one version of a kind (what conversion changes).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Body<S, T> {
    #[serde(default)]
    pub spec: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<T>,
}

/// One kind's two versions and the map between them.
trait Versions {
    type Old: Serialize + DeserializeOwned + PartialEq;
    type New: Serialize + DeserializeOwned + PartialEq;
    fn up(old: &Self::Old) -> Self::New;
    fn down(new: &Self::New) -> Self::Old;
    /// Copy from `saved` (the annotation of an object a `v1beta1` client changed) what `v1beta1`
    /// cannot express, so that the change does not erase it.
    fn keep(new: &mut Self::New, saved: Self::New);
    /// The v1beta2 CRD of the kind, whose schema a restored body must meet.
    fn crd() -> CustomResourceDefinition;
}

/// Read the body saved in the annotation as a v1beta1 client sent it back, trusting none of it:
/// the API server validated the v1beta1 object, not what the annotation restores. Too large or
/// unparsable: dropped. Every value the v1beta2 schema would refuse (pattern, length, enum,
/// range, unknown field) is pruned first, by the rules of the generated schema itself.
fn restore<K: Versions>(saved: Option<&Value>) -> Option<K::New> {
    let text = saved?.as_str()?;
    if text.len() > MAX_SAVED_BYTES {
        tracing::warn!(
            bytes = text.len(),
            "conversion-data annotation too large; converting from the v1beta1 fields alone"
        );
        return None;
    }
    let mut body: Value = serde_json::from_str(text).ok()?;
    let crd = K::crd();
    let schema = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == super::VERSION)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())?;
    let removed = super::prune::prune(&mut body, schema);
    if !removed.is_empty() {
        // Field paths only: the values may be anything a client wrote.
        tracing::warn!(fields = ?removed, "conversion-data annotation: dropped invalid fields");
    }
    serde_json::from_value(body).ok()
}

fn convert_body<K: Versions>(
    object: &Map<String, Value>,
    metadata: &mut Value,
    up: bool,
) -> Result<Map<String, Value>, String> {
    let body = Value::Object(object.clone());
    let annotations = metadata
        .as_object_mut()
        .ok_or("metadata is not an object")?
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    let annotations = annotations
        .as_object_mut()
        .ok_or("metadata.annotations is not an object")?;
    let saved = annotations.remove(DATA_ANNOTATION);
    let converted = if up {
        let old: K::Old = serde_json::from_value(body).map_err(|e| e.to_string())?;
        let mut new = K::up(&old);
        // An annotation that does not parse (edited by hand) is dropped: the object still
        // converts, from what v1beta1 holds. What it restores is only what v1beta1 cannot
        // express: taken whole only when it agrees with every field the v1beta1 object carries,
        // else field by field (`keep`).
        if let Some(saved) = restore::<K>(saved.as_ref()) {
            if K::down(&saved) == old {
                new = saved;
            } else {
                K::keep(&mut new, saved);
            }
        }
        serde_json::to_value(new)
    } else {
        let new: K::New = serde_json::from_value(body.clone()).map_err(|e| e.to_string())?;
        let old = K::down(&new);
        if K::up(&old) != new {
            let mut saved = object.clone();
            saved.insert("apiVersion".into(), Value::String(V1BETA2.into()));
            annotations.insert(
                DATA_ANNOTATION.into(),
                Value::String(Value::Object(saved).to_string()),
            );
        }
        serde_json::to_value(old)
    }
    .map_err(|e| e.to_string())?;
    if annotations.is_empty() {
        metadata.as_object_mut().map(|m| m.remove("annotations"));
    }
    match converted {
        Value::Object(m) => Ok(m),
        _ => Err("converted body is not an object".into()),
    }
}

/// Empty strings are how a Go `v1beta1` client writes "unset".
fn non_empty(s: &Option<String>) -> Option<String> {
    s.clone().filter(|s| !s.is_empty())
}

/// `ready` (v1beta1, a plain bool) as the optional flags of v1beta2: only `true` is written by
/// the controllers, so `false` is "not yet".
fn flag(ready: bool) -> Option<bool> {
    ready.then_some(true)
}

/// A `false` saved in the annotation, where v1beta1's `false` read as unset.
fn keep_flag(new: &mut Option<bool>, saved: Option<bool>) {
    if new.unwrap_or(false) == saved.unwrap_or(false) {
        *new = saved;
    }
}

fn endpoint_up(e: &old::ApiEndpoint) -> Option<ApiEndpoint> {
    let e = ApiEndpoint {
        host: non_empty(&e.host),
        port: e.port.filter(|p| *p > 0),
    };
    (e.host.is_some() || e.port.is_some()).then_some(e)
}

fn domains_up(d: &Option<BTreeMap<String, old::FailureDomainSpec>>) -> Option<Vec<FailureDomain>> {
    let d = d.as_ref().filter(|d| !d.is_empty())?;
    // BTreeMap order: sorted by name, as v1beta2 requires.
    Some(
        d.iter()
            .map(|(name, fd)| FailureDomain {
                name: name.clone(),
                control_plane: fd.control_plane,
                attributes: fd.attributes.clone(),
            })
            .collect(),
    )
}

fn domains_down(
    d: &Option<Vec<FailureDomain>>,
) -> Option<BTreeMap<String, old::FailureDomainSpec>> {
    d.as_ref().map(|d| {
        d.iter()
            .map(|fd| {
                (
                    fd.name.clone(),
                    old::FailureDomainSpec {
                        control_plane: fd.control_plane,
                        attributes: fd.attributes.clone(),
                    },
                )
            })
            .collect()
    })
}

fn deprecated_up(c: &Option<Vec<super::common::V1Beta1Condition>>) -> Option<Deprecated> {
    c.as_ref().map(|c| Deprecated {
        v1beta1: Some(DeprecatedV1Beta1 {
            conditions: Some(c.clone()),
        }),
    })
}

fn deprecated_down(d: &Option<Deprecated>) -> Option<Vec<super::common::V1Beta1Condition>> {
    d.as_ref()?.v1beta1.as_ref()?.conditions.clone()
}

fn conditions_down(c: &Option<Vec<super::conditions::Condition>>) -> Option<old::V1Beta2Status> {
    c.as_ref().map(|c| old::V1Beta2Status {
        conditions: Some(c.clone()),
    })
}

fn provisioned(i: &Option<Initialization>) -> Option<bool> {
    i.as_ref().and_then(|i| i.provisioned)
}

fn cluster_spec_up(s: &old::DockerClusterSpec) -> DockerClusterSpec {
    DockerClusterSpec {
        control_plane_endpoint: s.control_plane_endpoint.as_ref().and_then(endpoint_up),
        failure_domains: domains_up(&s.failure_domains),
        load_balancer: s.load_balancer.as_ref().map(|lb| DockerLoadBalancer {
            image_repository: non_empty(&lb.image_repository),
            image_tag: non_empty(&lb.image_tag),
            custom_haproxy_config_template_ref: lb.custom_haproxy_config_template_ref.clone(),
        }),
    }
}

fn cluster_spec_down(s: &DockerClusterSpec) -> old::DockerClusterSpec {
    old::DockerClusterSpec {
        control_plane_endpoint: s.control_plane_endpoint.as_ref().map(|e| old::ApiEndpoint {
            host: e.host.clone(),
            port: e.port,
        }),
        failure_domains: domains_down(&s.failure_domains),
        load_balancer: s.load_balancer.as_ref().map(|lb| old::DockerLoadBalancer {
            image_repository: lb.image_repository.clone(),
            image_tag: lb.image_tag.clone(),
            custom_haproxy_config_template_ref: lb.custom_haproxy_config_template_ref.clone(),
        }),
    }
}

fn machine_spec_up(s: &old::DockerMachineSpec) -> DockerMachineSpec {
    DockerMachineSpec {
        provider_id: non_empty(&s.provider_id),
        custom_image: non_empty(&s.custom_image),
        pre_load_images: s.pre_load_images.clone(),
        extra_mounts: s.extra_mounts.clone(),
        bootstrapped: s.bootstrapped,
        bootstrap_timeout: non_empty(&s.bootstrap_timeout),
    }
}

fn machine_spec_down(s: &DockerMachineSpec) -> old::DockerMachineSpec {
    old::DockerMachineSpec {
        provider_id: s.provider_id.clone(),
        custom_image: s.custom_image.clone(),
        pre_load_images: s.pre_load_images.clone(),
        extra_mounts: s.extra_mounts.clone(),
        bootstrapped: s.bootstrapped,
        bootstrap_timeout: s.bootstrap_timeout.clone(),
    }
}

/// Template metadata: v1beta1 may carry `metadata: {}`; v1beta2 has at least one field or none.
fn template_meta_up(m: &Option<old::ObjectMeta>) -> Option<ObjectMeta> {
    let m = m.as_ref()?;
    (m.labels.is_some() || m.annotations.is_some()).then(|| ObjectMeta {
        labels: m.labels.clone(),
        annotations: m.annotations.clone(),
    })
}

fn template_meta_down(m: &Option<ObjectMeta>) -> Option<old::ObjectMeta> {
    m.as_ref().map(|m| old::ObjectMeta {
        labels: m.labels.clone(),
        annotations: m.annotations.clone(),
    })
}

struct DockerClusterKind;
impl Versions for DockerClusterKind {
    fn crd() -> CustomResourceDefinition {
        <super::DockerCluster as CustomResourceExt>::crd()
    }

    type Old = Body<old::DockerClusterSpec, old::DockerClusterStatus>;
    type New = Body<DockerClusterSpec, DockerClusterStatus>;

    fn up(o: &Self::Old) -> Self::New {
        Body {
            spec: cluster_spec_up(&o.spec),
            status: o.status.as_ref().map(|s| DockerClusterStatus {
                conditions: s.v1beta2.as_ref().and_then(|v| v.conditions.clone()),
                initialization: flag(s.ready).map(|p| Initialization {
                    provisioned: Some(p),
                }),
                ready: flag(s.ready),
                failure_domains: domains_up(&s.failure_domains),
                deprecated: deprecated_up(&s.conditions),
            }),
        }
    }

    fn down(n: &Self::New) -> Self::Old {
        Body {
            spec: cluster_spec_down(&n.spec),
            status: n.status.as_ref().map(|s| old::DockerClusterStatus {
                ready: provisioned(&s.initialization).or(s.ready).unwrap_or(false),
                failure_domains: domains_down(&s.failure_domains),
                conditions: deprecated_down(&s.deprecated),
                v1beta2: conditions_down(&s.conditions),
            }),
        }
    }

    fn keep(new: &mut Self::New, saved: Self::New) {
        if let (Some(n), Some(s)) = (new.status.as_mut(), saved.status) {
            keep_flag(&mut n.ready, s.ready);
            if provisioned(&n.initialization).is_none() && s.initialization.is_some() {
                n.initialization = s.initialization;
            }
        }
    }
}

struct DockerMachineKind;
impl Versions for DockerMachineKind {
    fn crd() -> CustomResourceDefinition {
        <super::DockerMachine as CustomResourceExt>::crd()
    }

    type Old = Body<old::DockerMachineSpec, old::DockerMachineStatus>;
    type New = Body<DockerMachineSpec, DockerMachineStatus>;

    fn up(o: &Self::Old) -> Self::New {
        Body {
            spec: machine_spec_up(&o.spec),
            status: o.status.as_ref().map(|s| DockerMachineStatus {
                conditions: s.v1beta2.as_ref().and_then(|v| v.conditions.clone()),
                initialization: flag(s.ready).map(|p| Initialization {
                    provisioned: Some(p),
                }),
                ready: flag(s.ready),
                load_balancer_configured: s.load_balancer_configured,
                addresses: s.addresses.clone(),
                failure_domain: None,
                deprecated: deprecated_up(&s.conditions),
            }),
        }
    }

    fn down(n: &Self::New) -> Self::Old {
        Body {
            spec: machine_spec_down(&n.spec),
            status: n.status.as_ref().map(|s| old::DockerMachineStatus {
                ready: provisioned(&s.initialization).or(s.ready).unwrap_or(false),
                load_balancer_configured: s.load_balancer_configured,
                addresses: s.addresses.clone(),
                conditions: deprecated_down(&s.deprecated),
                v1beta2: conditions_down(&s.conditions),
            }),
        }
    }

    fn keep(new: &mut Self::New, saved: Self::New) {
        let Some(s) = saved.status else { return };
        let n = new.status.get_or_insert_with(Default::default);
        n.failure_domain = s.failure_domain;
        keep_flag(&mut n.ready, s.ready);
        if provisioned(&n.initialization).is_none() && s.initialization.is_some() {
            n.initialization = s.initialization;
        }
    }
}

/// v1beta1 templates have no status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NoStatus {}

struct DockerClusterTemplateKind;
impl Versions for DockerClusterTemplateKind {
    fn crd() -> CustomResourceDefinition {
        <super::DockerClusterTemplate as CustomResourceExt>::crd()
    }

    type Old = Body<old::DockerClusterTemplateSpec, NoStatus>;
    type New = Body<DockerClusterTemplateSpec, NoStatus>;

    fn up(o: &Self::Old) -> Self::New {
        Body {
            spec: DockerClusterTemplateSpec {
                template: DockerClusterTemplateResource {
                    metadata: template_meta_up(&o.spec.template.metadata),
                    spec: cluster_spec_up(&o.spec.template.spec),
                },
            },
            status: None,
        }
    }

    fn down(n: &Self::New) -> Self::Old {
        Body {
            spec: old::DockerClusterTemplateSpec {
                template: old::DockerClusterTemplateResource {
                    metadata: template_meta_down(&n.spec.template.metadata),
                    spec: cluster_spec_down(&n.spec.template.spec),
                },
            },
            status: None,
        }
    }

    fn keep(_: &mut Self::New, _: Self::New) {}
}

struct DockerMachineTemplateKind;
impl Versions for DockerMachineTemplateKind {
    fn crd() -> CustomResourceDefinition {
        <super::DockerMachineTemplate as CustomResourceExt>::crd()
    }

    type Old = Body<old::DockerMachineTemplateSpec, NoStatus>;
    type New = Body<DockerMachineTemplateSpec, DockerMachineTemplateStatus>;

    fn up(o: &Self::Old) -> Self::New {
        Body {
            spec: DockerMachineTemplateSpec {
                template: DockerMachineTemplateResource {
                    metadata: template_meta_up(&o.spec.template.metadata),
                    spec: machine_spec_up(&o.spec.template.spec),
                },
            },
            status: None,
        }
    }

    fn down(n: &Self::New) -> Self::Old {
        Body {
            spec: old::DockerMachineTemplateSpec {
                template: old::DockerMachineTemplateResource {
                    metadata: template_meta_down(&n.spec.template.metadata),
                    spec: machine_spec_down(&n.spec.template.spec),
                },
            },
            status: None,
        }
    }

    /// The capacity the controller reports is status only v1beta2 has.
    fn keep(new: &mut Self::New, saved: Self::New) {
        new.status = saved.status;
    }
}

fn pool_spec_up(s: &old::DockerMachinePoolSpec) -> DockerMachinePoolSpec {
    DockerMachinePoolSpec {
        template: s.template.clone(),
        provider_id: non_empty(&s.provider_id),
        provider_id_list: s.provider_id_list.clone(),
    }
}

fn pool_spec_down(s: &DockerMachinePoolSpec) -> old::DockerMachinePoolSpec {
    old::DockerMachinePoolSpec {
        template: s.template.clone(),
        provider_id: s.provider_id.clone(),
        provider_id_list: s.provider_id_list.clone(),
    }
}

struct DockerMachinePoolKind;
impl Versions for DockerMachinePoolKind {
    fn crd() -> CustomResourceDefinition {
        <super::DockerMachinePool as CustomResourceExt>::crd()
    }

    type Old = Body<old::DockerMachinePoolSpec, old::DockerMachinePoolStatus>;
    type New = Body<DockerMachinePoolSpec, DockerMachinePoolStatus>;

    fn up(o: &Self::Old) -> Self::New {
        Body {
            spec: pool_spec_up(&o.spec),
            status: o.status.as_ref().map(|s| DockerMachinePoolStatus {
                conditions: s.v1beta2.as_ref().and_then(|v| v.conditions.clone()),
                ready: s.ready,
                replicas: s.replicas,
                observed_generation: s.observed_generation,
                instances: s.instances.clone(),
                infrastructure_machine_kind: s.infrastructure_machine_kind.clone(),
                deprecated: deprecated_up(&s.conditions),
            }),
        }
    }

    fn down(n: &Self::New) -> Self::Old {
        Body {
            spec: pool_spec_down(&n.spec),
            status: n.status.as_ref().map(|s| old::DockerMachinePoolStatus {
                ready: s.ready,
                replicas: s.replicas,
                observed_generation: s.observed_generation,
                instances: s.instances.clone(),
                infrastructure_machine_kind: s.infrastructure_machine_kind.clone(),
                conditions: deprecated_down(&s.deprecated),
                v1beta2: conditions_down(&s.conditions),
            }),
        }
    }

    fn keep(_: &mut Self::New, _: Self::New) {}
}

struct DockerMachinePoolTemplateKind;
impl Versions for DockerMachinePoolTemplateKind {
    fn crd() -> CustomResourceDefinition {
        <super::DockerMachinePoolTemplate as CustomResourceExt>::crd()
    }

    type Old = Body<old::DockerMachinePoolTemplateSpec, NoStatus>;
    type New = Body<DockerMachinePoolTemplateSpec, NoStatus>;

    fn up(o: &Self::Old) -> Self::New {
        Body {
            spec: DockerMachinePoolTemplateSpec {
                template: DockerMachinePoolTemplateResource {
                    metadata: template_meta_up(&o.spec.template.metadata),
                    spec: pool_spec_up(&o.spec.template.spec),
                },
            },
            status: None,
        }
    }

    fn down(n: &Self::New) -> Self::Old {
        Body {
            spec: old::DockerMachinePoolTemplateSpec {
                template: old::DockerMachinePoolTemplateResource {
                    metadata: template_meta_down(&n.spec.template.metadata),
                    spec: pool_spec_down(&n.spec.template.spec),
                },
            },
            status: None,
        }
    }

    fn keep(_: &mut Self::New, _: Self::New) {}
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta() -> Value {
        json!({"name": "c1", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
               "labels": {"cluster.x-k8s.io/cluster-name": "c1"}})
    }

    fn round_trip_from_old(old_obj: Value) {
        let new = convert(old_obj.clone(), V1BETA2).unwrap();
        assert_eq!(new["apiVersion"], V1BETA2);
        let back = convert(new.clone(), V1BETA1).unwrap();
        assert_eq!(back, old_obj, "v1beta1 -> v1beta2 -> v1beta1 (via {new:#})");
    }

    fn round_trip_from_new(new_obj: Value) -> Value {
        let old_obj = convert(new_obj.clone(), V1BETA1).unwrap();
        let back = convert(old_obj.clone(), V1BETA2).unwrap();
        assert_eq!(
            back, new_obj,
            "v1beta2 -> v1beta1 -> v1beta2 (via {old_obj:#})"
        );
        old_obj
    }

    #[test]
    fn docker_cluster_written_as_v1beta1_reads_back_identical() {
        round_trip_from_old(json!({
            "apiVersion": V1BETA1, "kind": "DockerCluster", "metadata": meta(),
            "spec": {
                "controlPlaneEndpoint": {"host": "172.18.0.2", "port": 6443},
                "failureDomains": {"fd-b": {"controlPlane": true}, "fd-a": {"attributes": {"rack": "1"}}},
                "loadBalancer": {"imageRepository": "kindest/haproxy", "customHAProxyConfigTemplateRef": {"name": "lb"}}
            },
            "status": {
                "ready": true,
                "failureDomains": {"fd-a": {"controlPlane": false}},
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-24T10:00:00Z"}],
                "v1beta2": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-11-24T10:00:00Z"}]}
            }
        }));
    }

    #[test]
    fn v1beta1_failure_domains_become_a_sorted_list() {
        let new = convert(
            json!({"apiVersion": V1BETA1, "kind": "DockerCluster", "metadata": meta(),
                   "spec": {"failureDomains": {"z": {}, "a": {"controlPlane": true}}}}),
            V1BETA2,
        )
        .unwrap();
        assert_eq!(
            new["spec"]["failureDomains"],
            json!([{"name": "a", "controlPlane": true}, {"name": "z"}])
        );
    }

    /// What the API server sent while server-side applying upstream's runtimesdk-v1beta1
    /// DevCluster (its pruning turns a domain written as `{}` into `null`): the domain is kept,
    /// empty, as Go's decoder reads it, instead of failing the conversion and so every apply.
    #[test]
    fn a_null_v1beta1_failure_domain_is_an_empty_one() {
        let new = convert(
            json!({"apiVersion": V1BETA1, "kind": "DevCluster", "metadata": meta(),
                   "spec": {"backend": {"docker": {"failureDomains": {
                       "fd1": {"controlPlane": true}, "fd4": null}}}},
                   "status": {"failureDomains": {"fd4": null}}}),
            V1BETA2,
        )
        .unwrap();
        assert_eq!(
            new["spec"]["backend"]["docker"]["failureDomains"],
            json!([{"name": "fd1", "controlPlane": true}, {"name": "fd4"}])
        );
        assert_eq!(new["status"]["failureDomains"], json!([{"name": "fd4"}]));
    }

    #[test]
    fn go_client_zero_values_read_as_unset() {
        let new = convert(
            json!({"apiVersion": V1BETA1, "kind": "DockerMachine", "metadata": meta(),
                   "spec": {"providerID": "", "customImage": ""},
                   "status": {"ready": false, "loadBalancerConfigured": false}}),
            V1BETA2,
        )
        .unwrap();
        assert_eq!(new["spec"], json!({}));
        assert_eq!(new["status"], json!({"loadBalancerConfigured": false}));
        let new = convert(
            json!({"apiVersion": V1BETA1, "kind": "DockerCluster", "metadata": meta(),
                   "spec": {"controlPlaneEndpoint": {"host": "", "port": 0}}}),
            V1BETA2,
        )
        .unwrap();
        assert_eq!(new["spec"], json!({}), "an empty endpoint is no endpoint");
    }

    #[test]
    fn v1beta2_only_fields_survive_a_v1beta1_read_modify_write() {
        let stored = json!({
            "apiVersion": V1BETA2, "kind": "DockerMachine", "metadata": meta(),
            "spec": {"providerID": "docker:////c1-m1", "customImage": "kindest/node:v1.35.4"},
            "status": {"initialization": {"provisioned": true}, "ready": true,
                       "loadBalancerConfigured": true, "failureDomain": "fd-a"}
        });
        let old_obj = round_trip_from_new(stored.clone());
        assert!(
            old_obj["metadata"]["annotations"][DATA_ANNOTATION].is_string(),
            "failureDomain has no v1beta1 field: kept in the annotation"
        );
        // A v1beta1 client changes the spec and writes the object back.
        let mut edited = old_obj;
        edited["spec"]["preLoadImages"] = json!(["busybox:1"]);
        let back = convert(edited, V1BETA2).unwrap();
        assert_eq!(back["status"]["failureDomain"], "fd-a");
        assert_eq!(back["spec"]["preLoadImages"], json!(["busybox:1"]));
        assert!(back["metadata"].get("annotations").is_none(), "not stored");
    }

    #[test]
    fn template_capacity_survives_and_templates_without_it_carry_no_annotation() {
        let mut dmt = json!({
            "apiVersion": V1BETA2, "kind": "DockerMachineTemplate", "metadata": meta(),
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"extraMounts": [{"containerPath": "/x", "hostPath": "/y"}]}}},
        });
        let old_obj = round_trip_from_new(dmt.clone());
        assert!(old_obj["metadata"].get("annotations").is_none());
        assert!(old_obj.get("status").is_none());
        dmt["status"] = json!({"capacity": {"cpu": "2", "memory": "4Gi"}});
        let old_obj = round_trip_from_new(dmt);
        assert!(old_obj["metadata"]["annotations"][DATA_ANNOTATION].is_string());
    }

    #[test]
    fn every_kind_round_trips_from_v1beta2() {
        for obj in [
            json!({"apiVersion": V1BETA2, "kind": "DockerCluster", "metadata": meta(),
                   "spec": {"controlPlaneEndpoint": {"port": 6443}, "failureDomains": [{"name": "a", "controlPlane": false}]},
                   "status": {"initialization": {"provisioned": true}, "ready": true,
                              "deprecated": {"v1beta1": {"conditions": [{"type": "Ready", "status": "False", "severity": "Info"}]}}}}),
            json!({"apiVersion": V1BETA2, "kind": "DockerClusterTemplate", "metadata": meta(),
                   "spec": {"template": {"spec": {"loadBalancer": {"imageTag": "v1"}}}}}),
            json!({"apiVersion": V1BETA2, "kind": "DockerMachine", "metadata": meta(),
                   "spec": {"bootstrapTimeout": "10m", "bootstrapped": true},
                   "status": {"loadBalancerConfigured": false, "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
            json!({"apiVersion": V1BETA2, "kind": "DockerMachinePool", "metadata": meta(),
                   "spec": {"template": {"customImage": "kindest/node:v1.35.4"}, "providerID": "docker:////c-dmp-p",
                            "providerIDList": ["docker:////c-worker-a"]},
                   "status": {"ready": true, "replicas": 1, "infrastructureMachineKind": "DockerMachine",
                              "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                              "lastTransitionTime": "2026-11-24T10:00:00Z"}]}}),
            json!({"apiVersion": V1BETA2, "kind": "DockerMachinePoolTemplate", "metadata": meta(),
                   "spec": {"template": {"spec": {"template": {"preLoadImages": ["busybox:1"]}}}}}),
        ] {
            let old_obj = round_trip_from_new(obj);
            assert!(
                old_obj["metadata"].get("annotations").is_none(),
                "{old_obj:#}: v1beta1 holds it all"
            );
        }
    }

    #[test]
    fn dev_kinds_round_trip_with_their_backends() {
        for obj in [
            json!({"apiVersion": V1BETA2, "kind": "DevCluster", "metadata": meta(),
                   "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
                            "backend": {"docker": {"failureDomains": [{"name": "a", "controlPlane": true}]}}},
                   "status": {"initialization": {"provisioned": true}, "ready": true}}),
            json!({"apiVersion": V1BETA2, "kind": "DevClusterTemplate", "metadata": meta(),
                   "spec": {"template": {"spec": {"backend": {"docker": {}}}}}}),
            json!({"apiVersion": V1BETA2, "kind": "DevMachine", "metadata": meta(),
                   "spec": {"providerID": "docker:////c-m",
                            "backend": {"inMemory": {"vm": {"provisioning": {"startupDuration": "2s"}}}}}}),
            json!({"apiVersion": V1BETA2, "kind": "DevMachineTemplate", "metadata": meta(),
                   "spec": {"template": {"spec": {"backend": {"docker": {"extraMounts": [{"containerPath": "/x", "hostPath": "/y"}]}}}}}}),
        ] {
            let old_obj = round_trip_from_new(obj.clone());
            let backend = |o: &Value| {
                let spec = &o["spec"];
                let spec = if spec["template"].is_object() {
                    &spec["template"]["spec"]
                } else {
                    spec
                };
                let b = &spec["backend"];
                (b["docker"].is_object(), b["inMemory"].clone())
            };
            assert_eq!(
                backend(&old_obj),
                backend(&obj),
                "same backend layout in v1beta1"
            );
            round_trip_from_old(old_obj);
        }
        // What v1beta1 cannot hold is saved in the Dev* shape, as upstream saves it.
        let dm = json!({"apiVersion": V1BETA2, "kind": "DevMachine", "metadata": meta(),
                        "spec": {"backend": {"docker": {"customImage": "img:1"}}},
                        "status": {"failureDomain": "fd-a", "loadBalancerConfigured": false}});
        let old_obj = round_trip_from_new(dm);
        let saved: Value = serde_json::from_str(
            old_obj["metadata"]["annotations"][DATA_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            saved["spec"],
            json!({"backend": {"docker": {"customImage": "img:1"}}})
        );
    }

    /// A v1beta1 client writes the annotation too: what it restores is held to the v1beta2
    /// schema, never overrides the v1beta1 fields, and is read only up to a bound.
    #[test]
    fn a_hostile_annotation_restores_nothing_invalid() {
        let hostile = json!({
            "apiVersion": V1BETA2, "kind": "DockerMachine",
            "spec": {"customImage": "bad tag!!", "providerID": "docker:////impostor"},
            "status": {"failureDomain": "x".repeat(1000), "smuggled": true,
                       "initialization": {"provisioned": true}}
        });
        let mut obj = json!({"apiVersion": V1BETA1, "kind": "DockerMachine", "metadata": meta(),
                             "spec": {"providerID": "docker:////real"}, "status": {"ready": false}});
        obj["metadata"]["annotations"] = json!({DATA_ANNOTATION: hostile.to_string()});
        let new = convert(obj.clone(), V1BETA2).unwrap();
        // The v1beta1 object's own fields win; spec is never taken from the annotation here.
        assert_eq!(new["spec"], json!({"providerID": "docker:////real"}));
        // Out of the schema's bounds: dropped; within them: restored.
        assert!(new["status"].get("failureDomain").is_none(), "{new:#}");
        assert!(new["status"].get("smuggled").is_none(), "{new:#}");
        assert_eq!(
            new["status"]["initialization"],
            json!({"provisioned": true})
        );

        // A valid v1beta2-only value still survives.
        let mut ok = hostile.clone();
        ok["status"]["failureDomain"] = json!("fd-a");
        obj["metadata"]["annotations"] = json!({DATA_ANNOTATION: ok.to_string()});
        let new = convert(obj.clone(), V1BETA2).unwrap();
        assert_eq!(new["status"]["failureDomain"], "fd-a");

        // Past the bound: not read at all.
        ok["status"]["padding"] = json!("p".repeat(MAX_SAVED_BYTES));
        obj["metadata"]["annotations"] = json!({DATA_ANNOTATION: ok.to_string()});
        let new = convert(obj, V1BETA2).unwrap();
        assert!(new["status"].get("failureDomain").is_none(), "{new:#}");
    }

    #[test]
    fn a_hand_edited_annotation_is_dropped_not_fatal() {
        let mut obj =
            json!({"apiVersion": V1BETA1, "kind": "DockerMachine", "metadata": meta(), "spec": {}});
        obj["metadata"]["annotations"] = json!({DATA_ANNOTATION: "{not json", "keep": "me"});
        let new = convert(obj, V1BETA2).unwrap();
        assert_eq!(new["metadata"]["annotations"], json!({"keep": "me"}));
    }

    #[test]
    fn unknown_versions_and_kinds_are_errors() {
        let obj = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "DockerCluster", "metadata": meta()});
        assert!(matches!(
            convert(obj, V1BETA2),
            Err(ConversionError::Version { .. })
        ));
        // Served in v1beta2 only, as upstream.
        let obj = json!({"apiVersion": V1BETA1, "kind": "DevMachinePool", "metadata": meta()});
        assert_eq!(
            convert(obj, V1BETA2),
            Err(ConversionError::Kind("DevMachinePool".into()))
        );
        let obj = json!({"apiVersion": V1BETA2, "kind": "DockerMachine", "metadata": meta(), "spec": {"extraMounts": "x"}});
        let err = convert(obj, V1BETA1).unwrap_err().to_string();
        assert!(err.starts_with("DockerMachine c1: invalid type"), "{err}");
    }

    #[test]
    fn same_version_passes_through() {
        let obj = json!({"apiVersion": V1BETA2, "kind": "Anything", "metadata": meta(), "spec": {"x": 1}});
        assert_eq!(convert(obj.clone(), V1BETA2).unwrap(), obj);
    }
}
