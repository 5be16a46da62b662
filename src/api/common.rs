//! Types shared by several kinds.
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// `{host, port}` of the workload cluster's API server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ApiEndpoint {
    /// The hostname or IP on which the API server is serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub host: Option<String>,
    /// The port on which the API server is serving. Defaults to 6443 at admission, as
    /// upstream's webhook does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535), extend("default" = 6443))]
    pub port: Option<i32>,
}

/// The schema of an endpoint type `E` (v1beta2's `{host, port}` or v1beta1's) that admission
/// leaves as written: no port is defaulted. A DevCluster's port belongs to its backend.
/// Upstream's webhook defaults 6443 for the docker backend only, and an in-memory cluster's
/// port is the one its listener was given. A schema default of 6443 on the DevClusterTemplate
/// was put back on the DevCluster by a ClusterClass's topology, over the listener's port. The
/// docker arm writes 6443 itself when it sets the endpoint.
pub(crate) fn endpoint_without_default<E: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    let mut schema = Option::<E>::json_schema(g);
    if let Some(port) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("port"))
        .and_then(|p| p.as_object_mut())
    {
        port.remove("default");
        let said = port
            .get("description")
            .and_then(|d| d.as_str())
            .unwrap_or("");
        let kept = said
            .split(" Defaults to")
            .next()
            .unwrap_or_default()
            .trim_end();
        let description = format!("{kept} Not defaulted: the backend sets it.");
        port.insert("description".into(), description.trim_start().into());
    }
    schema
}

impl ApiEndpoint {
    /// Both parts set, as CAPI core requires before it copies the endpoint.
    pub fn is_valid(&self) -> bool {
        self.host.as_deref().is_some_and(|h| !h.is_empty()) && self.port.is_some_and(|p| p > 0)
    }
}

/// A failure domain: a name plus free-form attributes (they mean nothing to Docker).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// Name of the failure domain.
    #[schemars(schema_with = "failure_domain_name")]
    pub name: String,
    /// Whether the failure domain is suitable for control-plane machines (default false, set at
    /// admission as upstream's webhook does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub control_plane: Option<bool>,
    /// Free-form attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
}

/// A reference to an object in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct LocalObjectReference {
    /// Name of the referent.
    #[serde(default)]
    #[schemars(extend("default" = ""))]
    pub name: String,
}

/// A host path mounted into a node container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Path inside the container (absolute: the engine refuses anything else).
    #[schemars(length(min = 1, max = 512), regex(pattern = r"^/"))]
    pub container_path: String,
    /// Path on the host (of the Docker Engine).
    #[schemars(length(min = 1, max = 512))]
    pub host_path: String,
    /// Mount read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
}

/// An image reference as the Docker Engine accepts it: `[registry[:port]/]path[:tag][@digest]`,
/// lower-case path components (distribution's reference grammar, in RE2 for the CRD schema).
pub const IMAGE_REFERENCE_PATTERN: &str = r"^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$";
/// An image repository without tag or digest.
pub const IMAGE_REPOSITORY_PATTERN: &str = r"^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*$";
/// An image tag.
pub const IMAGE_TAG_PATTERN: &str = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$";

// The rules below are the one source of the image and failure-domain rules of both served
// versions: the API server validates a write against the version it was sent in, so a rule only
// v1beta2 carries is a rule a v1beta1 client can walk around (issue 25).

/// Longest image reference we accept (`customImage`).
pub const MAX_IMAGE_REFERENCE: u32 = 512;
/// Longest image repository we accept (`loadBalancer.imageRepository`).
pub const MAX_IMAGE_REPOSITORY: u32 = 256;
/// Longest failure-domain name (CAPI's own bound).
pub const MAX_FAILURE_DOMAIN_NAME: u32 = 256;

/// The schema of a node image reference (`customImage`), in every version that has one.
pub(crate) fn image_reference(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_IMAGE_REFERENCE,
        "pattern": IMAGE_REFERENCE_PATTERN,
    })
}

/// The schema of a load balancer's `imageRepository`, in every version.
pub(crate) fn image_repository(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_IMAGE_REPOSITORY,
        "pattern": IMAGE_REPOSITORY_PATTERN,
    })
}

/// The schema of a load balancer's `imageTag`, in every version (the pattern bounds its length).
pub(crate) fn image_tag(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 128,
        "pattern": IMAGE_TAG_PATTERN,
    })
}

/// The schema of a failure domain's name (v1beta2: a list item's `name`).
pub(crate) fn failure_domain_name(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_FAILURE_DOMAIN_NAME,
    })
}

/// The CEL rule that holds a map keyed by failure-domain name (v1beta1) to the same bounds as
/// [`failure_domain_name`]; structural schemas have no `propertyNames`.
pub fn failure_domain_keys_rule() -> String {
    format!("self.all(k, k.size() >= 1 && k.size() <= {MAX_FAILURE_DOMAIN_NAME})")
}

/// The message of [`failure_domain_keys_rule`].
pub const FAILURE_DOMAIN_KEYS_MESSAGE: &str =
    "failure domain names must be 1 to 256 characters long";

/// Kind of a machine address.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MachineAddressType {
    Hostname,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    #[serde(rename = "InternalIP")]
    InternalIp,
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    #[serde(rename = "InternalDNS")]
    InternalDns,
}

/// An address of a machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct MachineAddress {
    /// The address type.
    #[serde(rename = "type")]
    pub type_: MachineAddressType,
    /// The address.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

// Validated at admission as upstream's template webhooks validate it (CAPI's
// `ObjectMeta.Validate`): CAPI copies it onto every object it stamps out, so an invalid key would
// otherwise surface only there, as a failing create in CAPI's logs.
/// Labels and annotations of objects created from a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ObjectMeta {
    /// Labels of the created object: qualified names as keys, values of at most 63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "template_labels")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations of the created object: qualified names as keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "template_annotations")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// A bound the API server needs to accept the key rule (CEL's cost estimate is otherwise over
/// budget, 1.6×); upstream has none, and no template comes near it.
const MAX_META_ENTRIES: u32 = 4096;
/// A label value: empty, or alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// Every key is a qualified name: an optional DNS-subdomain prefix (at most 253 characters) and
/// `/`, then a name of at most 63 characters, as Kubernetes requires of label and annotation keys.
const QUALIFIED_KEYS: &str = "self.all(k, \
    k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') \
    && k.split('/')[0].size() <= 253 && k.split('/')[k.split('/').size() - 1].size() <= 63)";
const LABEL_KEYS_MESSAGE: &str = "label keys must be qualified names: an optional DNS subdomain prefix and '/', then at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric";
const ANNOTATION_KEYS_MESSAGE: &str = "annotation keys must be qualified names: an optional DNS subdomain prefix and '/', then at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric";

/// The schema of a template's `metadata.labels` (both API versions).
pub(crate) fn template_labels(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_META_ENTRIES,
        "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
        "x-kubernetes-validations": [{"rule": QUALIFIED_KEYS, "message": LABEL_KEYS_MESSAGE}],
    })
}

/// The schema of a template's `metadata.annotations` (both API versions).
pub(crate) fn template_annotations(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_META_ENTRIES,
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [{"rule": QUALIFIED_KEYS, "message": ANNOTATION_KEYS_MESSAGE}],
    })
}

/// `status.initialization` of the v1beta2 contract.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Initialization {
    /// True once the infrastructure is fully provisioned; CAPI core waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// A condition of the deprecated CAPI v1beta1 style (kept for schema compatibility only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct V1Beta1Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// `status.deprecated`: fields kept for readers of the v1beta1 contract.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Deprecated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<DeprecatedV1Beta1>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DeprecatedV1Beta1 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<V1Beta1Condition>>,
}

/// What a JSON value is, for an error that says what was found instead of what was wanted
/// (user input read as `serde_json::Value`: Ignition configs, the `inMemory` backend's spec).
pub fn json_kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
