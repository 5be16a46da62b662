//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch
//! as far as CAPI uses it on Nodes.
//!
//! A strategic merge patch is applied as a merge patch after its ordering directives
//! (`$setElementOrder/…`, `$retainKeys`) are dropped. That is exact for what CAPI sends on
//! Nodes: maps (labels, annotations) merge key by key in both, and `spec.taints` has no patch
//! strategy in the Node type, so it is replaced whole in both. Not covered: lists that a
//! strategic patch merges by key (`status.conditions`, a Pod's `containers`, `ownerReferences`,
//! `finalizers`) are replaced instead, and the `$patch` / `$deleteFromPrimitiveList` directives
//! are refused (400) rather than misapplied. Server-side apply is refused (415).
use serde_json::Value;

use super::status::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    StrategicMerge,
}

impl PatchType {
    /// From the request's Content-Type.
    pub fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Err(ApiError::unsupported_media(
                    "server-side apply is not supported by the in-memory API server; use a merge, JSON or strategic merge patch",
                ))
            }
            other => Err(ApiError::unsupported_media(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})"
            ))),
        }
    }
}

/// Drops the ordering directives of a strategic merge patch; refuses those that would change
/// what is stored.
fn strip_directives(value: &mut Value) -> Result<(), ApiError> {
    match value {
        Value::Object(map) => {
            if let Some(key) = map
                .keys()
                .find(|k| *k == "$patch" || k.starts_with("$deleteFromPrimitiveList/"))
            {
                return Err(ApiError::bad_request(format!(
                    "the strategic merge patch directive {key:?} is not supported by the in-memory API server"
                )));
            }
            map.retain(|k, _| !(k.starts_with("$setElementOrder/") || k == "$retainKeys"));
            map.values_mut().try_for_each(strip_directives)
        }
        Value::Array(items) => items.iter_mut().try_for_each(strip_directives),
        _ => Ok(()),
    }
}

/// The object `target` with `body` applied.
pub fn apply(kind: PatchType, mut target: Value, body: &[u8]) -> Result<Value, ApiError> {
    let unreadable =
        |e: serde_json::Error| ApiError::bad_request(format!("the patch is not valid JSON: {e}"));
    match kind {
        PatchType::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body).map_err(unreadable)?;
            json_patch::patch(&mut target, &patch).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch does not apply: {e}"),
                )
            })?;
        }
        PatchType::Merge | PatchType::StrategicMerge => {
            let mut patch: Value = serde_json::from_slice(body).map_err(unreadable)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            if kind == PatchType::StrategicMerge {
                strip_directives(&mut patch)?;
            }
            json_patch::merge(&mut target, &patch);
        }
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Value {
        json!({"metadata": {"name": "n", "labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}},
               "spec": {"taints": [{"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"},
                                   {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}})
    }

    #[test]
    fn capis_node_patch_as_a_strategic_merge_patch() {
        // What client-go's two-way merge makes of CAPI's label/annotation sync and its removal
        // of the uninitialized taint.
        let body = json!({"metadata": {"labels": {"b": null, "node.cluster.x-k8s.io/pool": "p"},
                                        "annotations": {"cluster.x-k8s.io/machine": "m"},
                                        "resourceVersion": "7"},
                          "spec": {"$setElementOrder/taints": [{"key": "node-role.kubernetes.io/control-plane"}],
                                   "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}});
        let out = apply(
            PatchType::StrategicMerge,
            node(),
            body.to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["labels"],
            json!({"a": "1", "node.cluster.x-k8s.io/pool": "p"})
        );
        assert_eq!(out["metadata"]["annotations"]["x"], "y");
        assert_eq!(
            out["metadata"]["annotations"]["cluster.x-k8s.io/machine"],
            "m"
        );
        assert_eq!(out["metadata"]["resourceVersion"], "7");
        assert_eq!(out["spec"]["taints"].as_array().unwrap().len(), 1);
        assert!(out["spec"].get("$setElementOrder/taints").is_none());
    }

    #[test]
    fn merge_and_json_patches() {
        let cordon = json!({"spec": {"unschedulable": true}}).to_string();
        let out = apply(PatchType::Merge, node(), cordon.as_bytes()).unwrap();
        assert_eq!(out["spec"]["unschedulable"], true);
        assert_eq!(out["spec"]["taints"].as_array().unwrap().len(), 2);
        let ops = json!([{"op": "replace", "path": "/metadata/labels/a", "value": "9"},
                         {"op": "remove", "path": "/spec/taints/0"}])
        .to_string();
        let out = apply(PatchType::Json, node(), ops.as_bytes()).unwrap();
        assert_eq!(out["metadata"]["labels"]["a"], "9");
        assert_eq!(out["spec"]["taints"].as_array().unwrap().len(), 1);
        let failing =
            json!([{"op": "test", "path": "/metadata/labels/a", "value": "0"}]).to_string();
        assert_eq!(
            apply(PatchType::Json, node(), failing.as_bytes())
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn what_is_not_supported_is_said() {
        let e = apply(PatchType::Merge, node(), b"{not json").unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            apply(PatchType::Merge, node(), b"[1]").unwrap_err().code,
            400
        );
        let directive = json!({"spec": {"taints": [{"$patch": "delete", "key": "k"}]}}).to_string();
        let e = apply(PatchType::StrategicMerge, node(), directive.as_bytes()).unwrap_err();
        assert!(e.message.contains("$patch"), "{}", e.message);
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml")
                .unwrap_err()
                .code,
            415
        );
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(),
            PatchType::Merge
        );
    }
}
