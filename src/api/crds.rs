//! The CustomResourceDefinitions we ship, with the contract label CAPI core looks for.
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

use super::{DockerCluster, DockerClusterTemplate, DockerMachine, DockerMachineTemplate};

/// CAPI core resolves `apiGroup`-only references through this label on our CRDs.
pub const CONTRACT_LABEL: (&str, &str) = ("cluster.x-k8s.io/v1beta2", "v1beta2");

/// All our CRDs, labelled, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        DockerCluster::crd(),
        DockerClusterTemplate::crd(),
        DockerMachine::crd(),
        DockerMachineTemplate::crd(),
    ]
    .into_iter()
    .map(|mut crd| {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                strip_nullable(schema);
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
    let children = schema
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
        );
    for child in children {
        strip_nullable(child);
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
