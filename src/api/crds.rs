//! The CustomResourceDefinitions we ship, with the contract label CAPI core looks for.
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    ValidationRule,
};
use kube::{CustomResourceExt, core::crd::merge_crds};
use serde_json::json;

use super::{
    DockerCluster, DockerClusterTemplate, DockerMachine, DockerMachinePool,
    DockerMachinePoolTemplate, DockerMachineTemplate, VERSION,
    dev::{
        DevCluster, DevClusterTemplate, DevMachine, DevMachinePool, DevMachinePoolTemplate,
        DevMachineTemplate,
    },
    v1beta1,
};

/// CAPI core resolves `apiGroup`-only references through this label on our CRDs.
pub const CONTRACT_LABEL: (&str, &str) = ("cluster.x-k8s.io/v1beta2", "v1beta2");

/// All our CRDs, labelled, in a stable order: the Docker* kinds, then the Dev* kinds. Each
/// serves v1beta2 (stored) and, but for the Dev* pools (as upstream), v1beta1 (deprecated,
/// converted by the manager's webhook).
///
/// Conversion is not set here: `config/crd` adds the webhook for `clusterctl` (cert-manager
/// injects its CA), and `hack/plane.sh` points it at a manager on the host. Without it the API
/// server would relabel objects between versions without converting them.
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        [DockerCluster::crd(), v1beta1::DockerCluster::crd()],
        [
            DockerClusterTemplate::crd(),
            v1beta1::DockerClusterTemplate::crd(),
        ],
        [DockerMachine::crd(), v1beta1::DockerMachine::crd()],
        [
            DockerMachineTemplate::crd(),
            v1beta1::DockerMachineTemplate::crd(),
        ],
        [DockerMachinePool::crd(), v1beta1::DockerMachinePool::crd()],
        [
            DockerMachinePoolTemplate::crd(),
            v1beta1::DockerMachinePoolTemplate::crd(),
        ],
    ]
    .into_iter()
    .map(Vec::from)
    .chain([
        vec![DevCluster::crd(), v1beta1::DevCluster::crd()],
        vec![
            DevClusterTemplate::crd(),
            v1beta1::DevClusterTemplate::crd(),
        ],
        vec![DevMachine::crd(), v1beta1::DevMachine::crd()],
        vec![
            DevMachineTemplate::crd(),
            v1beta1::DevMachineTemplate::crd(),
        ],
        vec![DevMachinePool::crd()],
        vec![DevMachinePoolTemplate::crd()],
    ])
    .map(|versions| {
        let mut crd = merge_crds(versions, VERSION).expect("one kind, one or two versions");
        for version in &mut crd.spec.versions {
            if version.name != VERSION {
                // As upstream: kubectl warns whoever still writes v1beta1.
                version.deprecated = Some(true);
            }
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                strip_nullable(schema);
                int_or_string(schema);
                root_rules(&crd.spec.names.kind, schema);
                dev_backend(&crd.spec.names.kind, schema);
            }
        }
        crd.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(CONTRACT_LABEL.0.to_string(), CONTRACT_LABEL.1.to_string());
        crd
    })
    .collect()
}

/// kube marks every `Option` field `nullable: true`; upstream's schemas do not, and a null there
/// would only be a way to store an invalid value. Absent is how "unset" is expressed.
fn strip_nullable(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    for child in children(schema) {
        strip_nullable(child);
    }
}

/// The direct sub-schemas of a schema: properties, items, additionalProperties.
fn children(schema: &mut JSONSchemaProps) -> impl Iterator<Item = &mut JSONSchemaProps> {
    schema
        .properties
        .iter_mut()
        .flat_map(|p| p.values_mut())
        .chain(schema.items.iter_mut().flat_map(|i| match i {
            JSONSchemaPropsOrArray::Schema(s) => std::slice::from_mut(s.as_mut()),
            JSONSchemaPropsOrArray::Schemas(v) => v.as_mut_slice(),
        }))
        .chain(
            schema
                .additional_properties
                .iter_mut()
                .filter_map(|a| match a {
                    JSONSchemaPropsOrBool::Schema(s) => Some(s.as_mut()),
                    JSONSchemaPropsOrBool::Bool(_) => None,
                }),
        )
}

/// The rules that belong to one kind's root, not to the types it shares with others:
/// - `spec` is optional, as upstream's (its examples and e2e data create DockerClusters and
///   DockerMachines without one); a controller-read kind gets `spec: {}` by default so that every
///   stored object has one.
/// - DockerMachine: `customImage` is immutable (upstream's webhook). Not on DockerMachineSpec
///   itself: the template embeds it, and a template's immutability has an exception CEL cannot
///   see (config/admission/).
/// - DockerClusterTemplate: `spec.template.spec` is immutable (upstream's webhook).
fn root_rules(kind: &str, root: &mut JSONSchemaProps) {
    if let Some(required) = root.required.as_mut() {
        required.retain(|r| r != "spec");
    }
    if root.required.as_ref().is_some_and(Vec::is_empty) {
        root.required = None;
    }
    let Some(spec) = root.properties.as_mut().and_then(|p| p.get_mut("spec")) else {
        return;
    };
    match kind {
        "DockerCluster" | "DockerMachinePool" => spec.default = Some(JSON(json!({}))),
        "DockerMachine" => {
            spec.default = Some(JSON(json!({})));
            spec.x_kubernetes_validations = Some(vec![rule(
                "(has(self.customImage) ? self.customImage : '') == (has(oldSelf.customImage) ? oldSelf.customImage : '')",
                "spec.customImage is immutable",
            )]);
        }
        "DevCluster" | "DevMachinePool" => spec.default = Some(JSON(json!({"backend": {}}))),
        "DevMachine" => {
            spec.default = Some(JSON(json!({"backend": {}})));
            spec.x_kubernetes_validations = Some(vec![rule(
                "!has(self.backend) || !has(oldSelf.backend) || !has(self.backend.docker) || !has(oldSelf.backend.docker) || \
                 (has(self.backend.docker.customImage) ? self.backend.docker.customImage : '') == \
                 (has(oldSelf.backend.docker.customImage) ? oldSelf.backend.docker.customImage : '')",
                "spec.backend.docker.customImage is immutable",
            )]);
        }
        "DockerClusterTemplate" | "DevClusterTemplate" => {
            if let Some(inner) = spec
                .properties
                .as_mut()
                .and_then(|p| p.get_mut("template"))
                .and_then(|t| t.properties.as_mut())
                .and_then(|p| p.get_mut("spec"))
            {
                inner.x_kubernetes_validations = Some(vec![rule(
                    "self == oldSelf",
                    &format!("spec.template.spec is immutable; create a new {kind} instead"),
                )]);
            }
        }
        _ => {}
    }
}

/// A Dev* kind's `backend.docker` is the Docker* spec without the contract's field, which the
/// Dev* spec holds one level up: drop it from the schema, so that it is not accepted twice.
fn dev_backend(kind: &str, root: &mut JSONSchemaProps) {
    let field = match kind {
        "DevCluster" | "DevClusterTemplate" => "controlPlaneEndpoint",
        "DevMachine" | "DevMachineTemplate" => "providerID",
        _ => return,
    };
    let mut spec = root.properties.as_mut().and_then(|p| p.get_mut("spec"));
    if kind.ends_with("Template") {
        spec = spec
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("template"))
            .and_then(|t| t.properties.as_mut())
            .and_then(|p| p.get_mut("spec"));
    }
    if let Some(docker) = spec
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("backend"))
        .and_then(|b| b.properties.as_mut())
        .and_then(|p| p.get_mut("docker"))
        .and_then(|d| d.properties.as_mut())
    {
        docker.remove(field);
    }
}

fn rule(rule: &str, message: &str) -> ValidationRule {
    ValidationRule {
        rule: rule.into(),
        message: Some(message.into()),
        ..Default::default()
    }
}

/// A schema marked `x-kubernetes-int-or-string` (a `resource.Quantity`) in the one shape the API
/// server accepts, `anyOf: [{type: integer}, {type: string}]`: kube's structural rewrite leaves
/// the branches empty, and a unit struct adds `enum: [null]`, so that no value fits.
fn int_or_string(schema: &mut JSONSchemaProps) {
    if schema.x_kubernetes_int_or_string == Some(true) {
        schema.enum_ = None;
        schema.type_ = None;
        schema.any_of = Some(
            ["integer", "string"]
                .map(|t| JSONSchemaProps {
                    type_: Some(t.into()),
                    ..Default::default()
                })
                .into(),
        );
    }
    for child in children(schema) {
        int_or_string(child);
    }
}

/// The file name crdgen writes a CRD to: `infrastructure.cluster.x-k8s.io_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The YAML committed under `config/crd/bases` for one CRD.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml_ng::Error> {
    Ok(format!("---\n{}", serde_yaml_ng::to_string(crd)?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The rules a client could walk around through the other version, by JSON path.
    fn rules(schema: &JSONSchemaProps, path: String, out: &mut BTreeMap<String, Vec<String>>) {
        let mut here = Vec::new();
        if let Some(p) = &schema.pattern {
            here.push(format!("pattern={p}"));
        }
        if let Some(m) = schema.max_length {
            here.push(format!("maxLength={m}"));
        }
        if let Some(e) = &schema.enum_ {
            here.push(format!(
                "enum={:?}",
                e.iter().map(|j| &j.0).collect::<Vec<_>>()
            ));
        }
        for v in schema.x_kubernetes_validations.iter().flatten() {
            // The root's immutability rules are added per kind to every version by root_rules.
            here.push(format!("rule={}", v.rule));
        }
        out.insert(
            format!("{path}:{}", schema.type_.as_deref().unwrap_or("")),
            here,
        );
        for (name, child) in schema.properties.iter().flatten() {
            rules(child, format!("{path}.{name}"), out);
        }
        if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
            rules(items, format!("{path}[]"), out);
        }
        if let Some(JSONSchemaPropsOrBool::Schema(values)) = &schema.additional_properties {
            rules(values, format!("{path}{{}}"), out);
        }
    }

    fn version_rules(crd: &CustomResourceDefinition, name: &str) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        let v = crd.spec.versions.iter().find(|v| v.name == name).unwrap();
        let root = v
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        rules(root, String::new(), &mut out);
        out
    }

    /// The API server validates a write against the version it was sent in: every rule a
    /// v1beta2 field carries must be on the same field of v1beta1 (where the field has the same
    /// path and type in both), or v1beta1 is a way around it.
    #[test]
    fn schema_rules_match_v1beta2() {
        let mut compared = 0;
        for crd in all() {
            if !crd.spec.versions.iter().any(|v| v.name == "v1beta1") {
                continue;
            }
            let new = version_rules(&crd, VERSION);
            let old = version_rules(&crd, "v1beta1");
            for (path, required) in &new {
                // v1beta1's status conditions live under status.v1beta2 (same type, checked there).
                let old_path = path.replacen(".status.conditions", ".status.v1beta2.conditions", 1);
                let Some(have) = old.get(&old_path).or_else(|| old.get(path)) else {
                    continue;
                };
                compared += 1;
                for rule in required {
                    assert!(
                        have.contains(rule),
                        "{} v1beta1 {path} lacks v1beta2's {rule}",
                        crd.spec.names.kind
                    );
                }
            }
        }
        assert!(compared > 100, "compared only {compared} fields");
    }

    /// v1beta2 holds failure domains as a list with a bounded `name`; v1beta1 as a map keyed by
    /// name: the same bound must hold the keys.
    #[test]
    fn v1beta1_failure_domain_keys_carry_the_name_rule() {
        let crd = all()
            .into_iter()
            .find(|c| c.spec.names.kind == "DockerCluster")
            .unwrap();
        let old = version_rules(&crd, "v1beta1");
        let new = version_rules(&crd, VERSION);
        let bound = format!("maxLength={}", crate::api::common::MAX_FAILURE_DOMAIN_NAME);
        for field in [".spec.failureDomains", ".status.failureDomains"] {
            assert!(new[&format!("{field}[].name:string")].contains(&bound));
            assert!(
                old[&format!("{field}:object")].contains(&format!(
                    "rule={}",
                    crate::api::common::failure_domain_keys_rule()
                )),
                "v1beta1 {field}: {:?}",
                old[&format!("{field}:object")]
            );
        }
    }
}
