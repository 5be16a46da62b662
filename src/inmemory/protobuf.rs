//! Protobuf request bodies (`Content-Type: application/vnd.kubernetes.protobuf`), decoded into
//! the JSON the store holds.
//!
//! Why: controller-runtime, which CAPI, KCP and CABPK are built on, configures its client for
//! every built-in kind with protobuf bodies, so their writes to a workload cluster arrive as
//! protobuf: KCP's PUTs of the `kubeadm-config` and `coredns` ConfigMaps and POSTs of
//! ClusterRoleBindings, CABPK's bootstrap-token Secrets, CAPI's Node writes and deletions, and
//! the DeleteOptions of every DELETE and the Eviction of drain. Answers stay JSON: client-go
//! decodes a response by the response's own Content-Type, whatever it asked for (see
//! `server.rs`).
//!
//! The wire format (apimachinery's protobuf serializer): the 4 bytes `k8s\0`, then a
//! `runtime.Unknown` message whose `typeMeta` names the object's apiVersion and kind and whose
//! `raw` holds the object's own message. The message types are k8s-pb's (generated from the
//! Kubernetes .proto files by the kube-rs project); they carry no serde, so each kind is mapped
//! to JSON here, field by field, the way Go's encoding/json writes the same Go struct: a field
//! tagged `omitempty` is left out when empty, the others always written, a struct-typed field
//! (a Node's `status.nodeInfo`) always written, a zero time as `null`. The Go client writes
//! every non-pointer field in protobuf too, so "present" and "set" differ only for pointers:
//! those (`immutable`, `controller`, a DeleteOptions' `gracePeriodSeconds`) are kept whenever
//! present, `false` and `0` included. The tests compare the result with the JSON body client-go
//! sends for the same object (`testdata/protobuf/`, written by `hack/protobuf-fixtures`).
//!
//! Decoded: ConfigMap, Secret, Node (v1), ClusterRoleBinding (rbac.authorization.k8s.io/v1),
//! DeleteOptions (any group version: the API registers it in each) and Eviction (policy/v1).
//! Any other kind is a 415 naming it; a body that is not a well-formed message of its kind a
//! 400. Fields a newer client knows and these message types do not are skipped by prost (the
//! API server, decoding with its own older types, drops them too).
use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_pb::{
    api::{
        core::v1 as core,
        policy::v1::Eviction,
        rbac::v1::{ClusterRoleBinding, RoleRef, Subject},
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{DeleteOptions, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time},
        runtime::Unknown,
    },
};
use prost::Message;
use serde_json::{Map, Value, json};

use super::status::ApiError;

/// The media type of a protobuf body.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// What every protobuf body starts with, before its envelope.
const MAGIC: &[u8; 4] = b"k8s\0";

/// The kinds decoded, for the 415's message.
const DECODED: &str = "ConfigMap, Secret, Node, ClusterRoleBinding, DeleteOptions, Eviction";

/// Decodes a protobuf body into the JSON of its object, `apiVersion` and `kind` included.
/// `default` is the (apiVersion, kind) the request implies, for an envelope that leaves them
/// empty, as the API server fills them in from the URL.
pub fn decode(body: &[u8], default: (&str, &str)) -> Result<Value, ApiError> {
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request(
            "the body is not a protobuf message: it does not start with the 4 bytes \"k8s\\0\"",
        )
    })?;
    if envelope.is_empty() {
        return Err(ApiError::bad_request("the protobuf body is empty"));
    }
    let unknown = Unknown::decode(envelope).map_err(|e| {
        ApiError::bad_request(format!("the protobuf body's envelope is malformed: {e}"))
    })?;
    // contentEncoding and contentType of the envelope are not read: the API server's decoder
    // ignores them too, and client-go leaves them empty.
    let type_meta = unknown.type_meta.unwrap_or_default();
    let or_default = |s: Option<String>, d: &str| s.filter(|s| !s.is_empty()).unwrap_or(d.into());
    let api_version = or_default(type_meta.api_version, default.0);
    let kind = or_default(type_meta.kind, default.1);
    let raw = unknown.raw.unwrap_or_default();
    let malformed = |e: prost::DecodeError| {
        ApiError::bad_request(format!(
            "the protobuf body of {kind} {api_version} is malformed: {e}"
        ))
    };
    let mut value = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(core::ConfigMap::decode(&*raw).map_err(malformed)?)?,
        ("v1", "Secret") => secret(core::Secret::decode(&*raw).map_err(malformed)?)?,
        ("v1", "Node") => node(core::Node::decode(&*raw).map_err(malformed)?)?,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            cluster_role_binding(ClusterRoleBinding::decode(&*raw).map_err(malformed)?)?
        }
        (_, "DeleteOptions") => delete_options(DeleteOptions::decode(&*raw).map_err(malformed)?),
        ("policy/v1", "Eviction") => eviction(Eviction::decode(&*raw).map_err(malformed)?)?,
        _ => {
            return Err(ApiError::unsupported_media(format!(
                "protobuf bodies of kind {kind} ({api_version}) are not decoded by the in-memory API server (only {DECODED}); send application/json"
            )));
        }
    };
    if let Some(object) = value.as_object_mut() {
        object.insert("kind".into(), json!(kind));
        object.insert("apiVersion".into(), json!(api_version));
    }
    Ok(value)
}

/// A JSON object built the way Go's encoding/json writes a struct.
#[derive(Default)]
struct Out(Map<String, Value>);

impl Out {
    fn new() -> Self {
        Self::default()
    }

    fn put(mut self, key: &str, value: Value) -> Self {
        self.0.insert(key.into(), value);
        self
    }

    /// A string field tagged `omitempty`.
    fn string(self, key: &str, value: Option<String>) -> Self {
        match value.filter(|s| !s.is_empty()) {
            Some(s) => self.put(key, json!(s)),
            None => self,
        }
    }

    /// A string field written even when empty (no `omitempty`).
    fn required(self, key: &str, value: Option<String>) -> Self {
        self.put(key, json!(value.unwrap_or_default()))
    }

    /// A pointer field (`*string`, `*bool`, `*int64`): written whenever set.
    fn pointer<T: Into<Value>>(self, key: &str, value: Option<T>) -> Self {
        match value {
            Some(v) => self.put(key, v.into()),
            None => self,
        }
    }

    /// A non-pointer number or bool tagged `omitempty`: left out when zero or false.
    fn nonzero<T: Into<Value> + Default + PartialEq>(self, key: &str, value: Option<T>) -> Self {
        match value.filter(|v| *v != T::default()) {
            Some(v) => self.put(key, v.into()),
            None => self,
        }
    }

    /// A slice or map tagged `omitempty`.
    fn many(self, key: &str, value: Value) -> Self {
        let empty = match &value {
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            _ => false,
        };
        if empty { self } else { self.put(key, value) }
    }

    fn done(self) -> Value {
        Value::Object(self.0)
    }
}

fn strings(values: Vec<String>) -> Value {
    json!(values)
}

fn string_map(map: BTreeMap<String, String>) -> Value {
    json!(map)
}

/// `map[string][]byte`: Go writes the bytes as standard, padded base64.
fn bytes_map(map: BTreeMap<String, Vec<u8>>) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    Value::Object(
        map.into_iter()
            .map(|(k, v)| (k, json!(engine.encode(v))))
            .collect(),
    )
}

/// A `ResourceList`: each Quantity travels as its canonical string, which is its JSON too.
fn quantities(map: BTreeMap<String, Quantity>) -> Result<Value, ApiError> {
    let mut out = Map::new();
    for (name, quantity) in map {
        match quantity.string.filter(|s| !s.is_empty()) {
            Some(s) => out.insert(name, json!(s)),
            // The API server cannot parse an empty quantity either.
            None => return Err(ApiError::bad_request(format!("quantity {name:?} is empty"))),
        };
    }
    Ok(Value::Object(out))
}

/// A `metav1.Time`: whole seconds in RFC 3339, UTC (its JSON has no fraction, and its protobuf
/// reader drops the nanoseconds). An empty message is the zero time, which Go writes as `null`.
fn time(t: Time) -> Result<Value, ApiError> {
    if t.seconds.is_none() && t.nanos.is_none() {
        return Ok(Value::Null);
    }
    let seconds = t.seconds.unwrap_or(0);
    chrono::DateTime::from_timestamp(seconds, 0)
        .filter(|d| (0..=9999).contains(&chrono::Datelike::year(d)))
        .map(|d| json!(d.format("%Y-%m-%dT%H:%M:%SZ").to_string()))
        .ok_or_else(|| ApiError::bad_request(format!("time {seconds} s is out of range")))
}

/// A pointer `*metav1.Time`: absent, or its value (`null` if zero).
fn time_pointer(out: Out, key: &str, t: Option<Time>) -> Result<Out, ApiError> {
    Ok(match t {
        Some(t) => out.put(key, time(t)?),
        None => out,
    })
}

fn object_meta(meta: ObjectMeta) -> Result<Value, ApiError> {
    let mut out = Out::new()
        .string("name", meta.name)
        .string("generateName", meta.generate_name)
        .string("namespace", meta.namespace)
        .string("selfLink", meta.self_link)
        .string("uid", meta.uid)
        .string("resourceVersion", meta.resource_version)
        .nonzero("generation", meta.generation);
    // `omitzero`: a zero creationTimestamp is left out, not `null`.
    if let Some(created) = meta.creation_timestamp {
        let created = time(created)?;
        if !created.is_null() {
            out = out.put("creationTimestamp", created);
        }
    }
    out = time_pointer(out, "deletionTimestamp", meta.deletion_timestamp)?
        .pointer(
            "deletionGracePeriodSeconds",
            meta.deletion_grace_period_seconds,
        )
        .many("labels", string_map(meta.labels))
        .many("annotations", string_map(meta.annotations));
    let owners: Vec<Value> = meta.owner_references.into_iter().map(owner).collect();
    let managed = meta
        .managed_fields
        .into_iter()
        .map(managed_fields)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(out
        .many("ownerReferences", json!(owners))
        .many("finalizers", strings(meta.finalizers))
        .many("managedFields", json!(managed))
        .done())
}

fn owner(o: OwnerReference) -> Value {
    Out::new()
        .required("apiVersion", o.api_version)
        .required("kind", o.kind)
        .required("name", o.name)
        .required("uid", o.uid)
        .pointer("controller", o.controller)
        .pointer("blockOwnerDeletion", o.block_owner_deletion)
        .done()
}

fn managed_fields(m: ManagedFieldsEntry) -> Result<Value, ApiError> {
    let out = Out::new()
        .string("manager", m.manager)
        .string("operation", m.operation)
        .string("apiVersion", m.api_version);
    let mut out = time_pointer(out, "time", m.time)?.string("fieldsType", m.fields_type);
    if let Some(fields) = m.fields_v1 {
        // FieldsV1 is JSON in both encodings: its protobuf carries the JSON document's bytes.
        let raw = fields.raw.unwrap_or_default();
        let value = if raw.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&raw).map_err(|e| {
                ApiError::bad_request(format!("managedFields: fieldsV1 is not JSON: {e}"))
            })?
        };
        out = out.put("fieldsV1", value);
    }
    Ok(out.string("subresource", m.subresource).done())
}

/// The start every object shares: its metadata, always written (`omitempty` does not apply to
/// a struct in Go).
fn with_meta(meta: Option<ObjectMeta>) -> Result<Out, ApiError> {
    Ok(Out::new().put("metadata", object_meta(meta.unwrap_or_default())?))
}

fn config_map(cm: core::ConfigMap) -> Result<Value, ApiError> {
    Ok(with_meta(cm.metadata)?
        .pointer("immutable", cm.immutable)
        .many("data", string_map(cm.data))
        .many("binaryData", bytes_map(cm.binary_data))
        .done())
}

fn secret(s: core::Secret) -> Result<Value, ApiError> {
    Ok(with_meta(s.metadata)?
        .pointer("immutable", s.immutable)
        .many("data", bytes_map(s.data))
        .many("stringData", string_map(s.string_data))
        .string("type", s.r#type)
        .done())
}

fn cluster_role_binding(crb: ClusterRoleBinding) -> Result<Value, ApiError> {
    let subjects: Vec<Value> = crb.subjects.into_iter().map(subject).collect();
    let RoleRef {
        api_group,
        kind,
        name,
    } = crb.role_ref.unwrap_or_default();
    Ok(with_meta(crb.metadata)?
        .many("subjects", json!(subjects))
        .put(
            "roleRef",
            Out::new()
                .required("apiGroup", api_group)
                .required("kind", kind)
                .required("name", name)
                .done(),
        )
        .done())
}

fn subject(s: Subject) -> Value {
    Out::new()
        .required("kind", s.kind)
        .string("apiGroup", s.api_group)
        .required("name", s.name)
        .string("namespace", s.namespace)
        .done()
}

fn delete_options(d: DeleteOptions) -> Value {
    let preconditions = d.preconditions.map(|p| {
        Out::new()
            .pointer("uid", p.uid)
            .pointer("resourceVersion", p.resource_version)
            .done()
    });
    Out::new()
        .pointer("gracePeriodSeconds", d.grace_period_seconds)
        .pointer("preconditions", preconditions)
        .pointer("orphanDependents", d.orphan_dependents)
        .pointer("propagationPolicy", d.propagation_policy)
        .many("dryRun", strings(d.dry_run))
        .pointer(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            d.ignore_store_read_error_with_cluster_breaking_potential,
        )
        .done()
}

fn eviction(e: Eviction) -> Result<Value, ApiError> {
    Ok(with_meta(e.metadata)?
        .pointer("deleteOptions", e.delete_options.map(delete_options))
        .done())
}

fn node(n: core::Node) -> Result<Value, ApiError> {
    Ok(with_meta(n.metadata)?
        .put("spec", node_spec(n.spec.unwrap_or_default())?)
        .put("status", node_status(n.status.unwrap_or_default())?)
        .done())
}

fn node_spec(s: core::NodeSpec) -> Result<Value, ApiError> {
    let taints = s
        .taints
        .into_iter()
        .map(|t| {
            let out = Out::new()
                .required("key", t.key)
                .string("value", t.value)
                .required("effect", t.effect);
            Ok(time_pointer(out, "timeAdded", t.time_added)?.done())
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Out::new()
        .string("podCIDR", s.pod_cidr)
        .many("podCIDRs", strings(s.pod_cid_rs))
        .string("providerID", s.provider_id)
        .nonzero("unschedulable", s.unschedulable)
        .many("taints", json!(taints))
        .pointer("configSource", s.config_source.map(config_source))
        .string("externalID", s.external_id)
        .done())
}

fn config_source(s: core::NodeConfigSource) -> Value {
    let config_map = s.config_map.map(|c| {
        Out::new()
            .required("namespace", c.namespace)
            .required("name", c.name)
            .string("uid", c.uid)
            .string("resourceVersion", c.resource_version)
            .required("kubeletConfigKey", c.kubelet_config_key)
            .done()
    });
    Out::new().pointer("configMap", config_map).done()
}

fn node_status(s: core::NodeStatus) -> Result<Value, ApiError> {
    let conditions = s
        .conditions
        .into_iter()
        .map(|c| {
            Ok(Out::new()
                .required("type", c.r#type)
                .required("status", c.status)
                // Non-pointer times: always written, `null` when zero.
                .put(
                    "lastHeartbeatTime",
                    time(c.last_heartbeat_time.unwrap_or_default())?,
                )
                .put(
                    "lastTransitionTime",
                    time(c.last_transition_time.unwrap_or_default())?,
                )
                .string("reason", c.reason)
                .string("message", c.message)
                .done())
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let addresses: Vec<Value> = s
        .addresses
        .into_iter()
        .map(|a| {
            Out::new()
                .required("type", a.r#type)
                .required("address", a.address)
                .done()
        })
        .collect();
    let port = s
        .daemon_endpoints
        .unwrap_or_default()
        .kubelet_endpoint
        .unwrap_or_default()
        .port
        .unwrap_or(0);
    let info = s.node_info.unwrap_or_default();
    let node_info = Out::new()
        .required("machineID", info.machine_id)
        .required("systemUUID", info.system_uuid)
        .required("bootID", info.boot_id)
        .required("kernelVersion", info.kernel_version)
        .required("osImage", info.os_image)
        .required("containerRuntimeVersion", info.container_runtime_version)
        .required("kubeletVersion", info.kubelet_version)
        .required("kubeProxyVersion", info.kube_proxy_version)
        .required("operatingSystem", info.operating_system)
        .required("architecture", info.architecture)
        .pointer(
            "swap",
            info.swap
                .map(|s| Out::new().pointer("capacity", s.capacity).done()),
        )
        .done();
    let images: Vec<Value> = s
        .images
        .into_iter()
        .map(|i| {
            // `names` has no omitempty: Go writes an empty list as null.
            let names = if i.names.is_empty() {
                Value::Null
            } else {
                strings(i.names)
            };
            Out::new()
                .put("names", names)
                .nonzero("sizeBytes", i.size_bytes)
                .done()
        })
        .collect();
    let attached: Vec<Value> = s
        .volumes_attached
        .into_iter()
        .map(|v| {
            Out::new()
                .required("name", v.name)
                .required("devicePath", v.device_path)
                .done()
        })
        .collect();
    let config = s.config.map(|c| {
        Out::new()
            .pointer("assigned", c.assigned.map(config_source))
            .pointer("active", c.active.map(config_source))
            .pointer("lastKnownGood", c.last_known_good.map(config_source))
            .string("error", c.error)
            .done()
    });
    let handlers: Vec<Value> = s
        .runtime_handlers
        .into_iter()
        .map(|h| {
            let features = h.features.map(|f| {
                Out::new()
                    .pointer("recursiveReadOnlyMounts", f.recursive_read_only_mounts)
                    .pointer("userNamespaces", f.user_namespaces)
                    .done()
            });
            Out::new()
                .required("name", h.name)
                .pointer("features", features)
                .done()
        })
        .collect();
    let features = s.features.map(|f| {
        Out::new()
            .pointer("supplementalGroupsPolicy", f.supplemental_groups_policy)
            .done()
    });
    Ok(Out::new()
        .many("capacity", quantities(s.capacity)?)
        .many("allocatable", quantities(s.allocatable)?)
        .string("phase", s.phase)
        .many("conditions", json!(conditions))
        .many("addresses", json!(addresses))
        .put(
            "daemonEndpoints",
            json!({"kubeletEndpoint": {"Port": port}}),
        )
        .put("nodeInfo", node_info)
        .many("images", json!(images))
        .many("volumesInUse", strings(s.volumes_in_use))
        .many("volumesAttached", json!(attached))
        .pointer("config", config)
        .many("runtimeHandlers", json!(handlers))
        .pointer("features", features)
        .many("declaredFeatures", strings(s.declared_features))
        .done())
}

#[cfg(test)]
mod tests;
