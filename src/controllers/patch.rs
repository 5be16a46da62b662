//! The few writes the controllers make to the API server, each minimal:
//! finalizers (merge patch guarded by resourceVersion), spec fields we own, and status.
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use super::error::Result;

fn params() -> PatchParams {
    PatchParams::default()
}

/// Add `finalizer` if absent. A JSON patch whose `test` op guards the list we saw: a concurrent
/// finalizer change makes it fail (and retry) instead of being overwritten, while unrelated
/// changes (status, labels) do not conflict. Returns true if it was added.
pub async fn add_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let ops = if obj.meta().finalizers.is_none() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}
        ])
    };
    api.patch(
        &obj.name_any(),
        &params(),
        &Patch::Json::<()>(serde_json::from_value(ops)?),
    )
    .await?;
    Ok(true)
}

/// Remove `finalizer` if present (a vanished object is fine), guarded like [`add_finalizer`].
pub async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Some(index) = obj.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{index}");
    let ops =
        json!([{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]);
    match api
        .patch(
            &obj.name_any(),
            &params(),
            &Patch::Json::<()>(serde_json::from_value(ops)?),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Merge-patch part of `spec` (e.g. providerID, controlPlaneEndpoint).
pub async fn patch_spec<K>(api: &Api<K>, name: &str, spec_fields: serde_json::Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &params(),
        &Patch::Merge(&json!({ "spec": spec_fields })),
    )
    .await?;
    Ok(())
}

/// Replace the status we own, only when it differs from what the object has (no write, no
/// watch event, no reconcile loop).
pub async fn patch_status_if_changed<K, S>(
    api: &Api<K>,
    name: &str,
    current: Option<&S>,
    desired: &S,
) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if current == Some(desired) {
        return Ok(false);
    }
    // Merge patch: fields we no longer set must be nulled explicitly, so send the full status
    // with nulls for absent optional fields (serde skips them; add them back as null).
    let mut status = serde_json::to_value(desired)?;
    let current = current.map(serde_json::to_value).transpose()?;
    if let (Some(serde_json::Value::Object(cur)), Some(map)) = (current, status.as_object_mut()) {
        for key in cur.keys() {
            map.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    match api
        .patch_status(name, &params(), &Patch::Merge(&json!({ "status": status })))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
