//! Drop from a JSON value what the v1beta2 CRD schema would refuse, by the schema's own rules.
//!
//! For values that reach storage by a way the API server does not validate: the body saved in
//! the `conversion-data` annotation is restored when a v1beta1 write is converted up, and the API
//! server validated only the v1beta1 object, never what the annotation brings back. The rules are
//! read from the generated CRD schema (the one source of them), so this cannot drift from what
//! the API server enforces on a v1beta2 write. CEL rules are not evaluated: a field carrying one
//! is kept only where it came from the v1beta1 object itself (see [`super::conversion`]).
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

/// Remove from `value` every field whose value breaks `schema` (type, pattern, length, enum,
/// range, item and property counts, unknown fields). Returns the JSON paths removed, for a
/// log line that names fields but never values.
pub fn prune(value: &mut Value, schema: &JSONSchemaProps) -> Vec<String> {
    let mut removed = Vec::new();
    prune_at(value, schema, "", &mut removed);
    removed
}

/// Whether `value` itself (not its children) meets `schema`.
fn leaf_ok(value: &Value, schema: &JSONSchemaProps) -> bool {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return value.is_i64() || value.is_u64() || value.is_string();
    }
    let type_ok = match schema.type_.as_deref() {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    };
    if !type_ok {
        return false;
    }
    if let Some(allowed) = &schema.enum_
        && !allowed.iter().any(|a| a.0 == *value)
    {
        return false;
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as i64;
            schema.max_length.is_none_or(|m| len <= m)
                && schema.min_length.is_none_or(|m| len >= m)
                && schema
                    .pattern
                    .as_deref()
                    // A pattern that does not compile here refuses (fail closed).
                    .is_none_or(|p| regex::Regex::new(p).is_ok_and(|r| r.is_match(s)))
        }
        Value::Number(n) => n.as_f64().is_some_and(|n| {
            schema.maximum.is_none_or(|m| n <= m) && schema.minimum.is_none_or(|m| n >= m)
        }),
        Value::Array(a) => {
            let len = a.len() as i64;
            schema.max_items.is_none_or(|m| len <= m) && schema.min_items.is_none_or(|m| len >= m)
        }
        Value::Object(o) => {
            let len = o.len() as i64;
            schema.max_properties.is_none_or(|m| len <= m)
                && schema.min_properties.is_none_or(|m| len >= m)
                // A required field pruned for its value takes its object with it.
                && schema.required.iter().flatten().all(|r| o.contains_key(r))
        }
        _ => true,
    }
}

fn prune_at(value: &mut Value, schema: &JSONSchemaProps, path: &str, removed: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if schema.x_kubernetes_preserve_unknown_fields == Some(true)
                && schema.properties.is_none()
            {
                return;
            }
            let additional = match &schema.additional_properties {
                Some(JSONSchemaPropsOrBool::Schema(s)) => Some(s.as_ref()),
                _ => None,
            };
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child_path = format!("{path}.{key}");
                let child_schema = schema
                    .properties
                    .as_ref()
                    .and_then(|p| p.get(&key))
                    .or(additional);
                let keep = match (child_schema, map.get_mut(&key)) {
                    (Some(s), Some(child)) => {
                        prune_at(child, s, &child_path, removed);
                        leaf_ok(child, s)
                    }
                    // Not in the schema: the API server would prune it; so do we.
                    _ => schema.x_kubernetes_preserve_unknown_fields == Some(true),
                };
                if !keep {
                    map.remove(&key);
                    removed.push(child_path);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = match &schema.items {
                Some(JSONSchemaPropsOrArray::Schema(s)) => Some(s.as_ref()),
                _ => None,
            };
            if let Some(s) = item_schema {
                let before = items.len();
                let mut i = 0;
                items.retain_mut(|item| {
                    prune_at(item, s, &format!("{path}[{i}]"), removed);
                    i += 1;
                    leaf_ok(item, s)
                });
                if items.len() != before {
                    removed.push(format!("{path}[]"));
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::json;

    use super::*;
    use crate::api::DockerMachine;

    fn spec_schema() -> JSONSchemaProps {
        let crd = DockerMachine::crd();
        let root = crd.spec.versions[0]
            .schema
            .clone()
            .and_then(|s| s.open_api_v3_schema)
            .unwrap();
        root.properties.unwrap().remove("spec").unwrap()
    }

    #[test]
    fn bad_values_and_unknown_fields_are_dropped_good_ones_kept() {
        let mut v = json!({
            "customImage": "bad tag!!",
            "bootstrapTimeout": "5m",
            "providerID": "x".repeat(600),
            "extraMounts": [
                {"containerPath": "/ok", "hostPath": "/h"},
                {"containerPath": "relative", "hostPath": "/h"}
            ],
            "smuggled": {"a": 1}
        });
        let removed = prune(&mut v, &spec_schema());
        assert_eq!(
            v,
            json!({"bootstrapTimeout": "5m",
                   "extraMounts": [{"containerPath": "/ok", "hostPath": "/h"}]})
        );
        assert!(removed.contains(&".customImage".to_string()), "{removed:?}");
        assert!(removed.contains(&".providerID".to_string()), "{removed:?}");
        assert!(removed.contains(&".smuggled".to_string()), "{removed:?}");
    }

    #[test]
    fn a_valid_value_is_untouched() {
        let mut v = json!({"customImage": "kindest/node:v1.35.0", "bootstrapped": true});
        let before = v.clone();
        assert!(prune(&mut v, &spec_schema()).is_empty());
        assert_eq!(v, before);
    }
}
