//! The committed CRDs are what `crdgen` prints, and the API server enforces their schema:
//! manifests written for upstream CAPD v1.13 (v1beta2) validate unchanged, bad values are
//! rejected with a message naming the field.
mod common;

use std::path::Path;

use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::json;

#[test]
fn committed_crds_match_crdgen() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/crd/bases");
    for crd in capd::api::crds::all() {
        let path = dir.join(capd::api::crds::file_name(&crd));
        let committed =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let generated = capd::api::crds::to_yaml(&crd).unwrap();
        assert!(
            committed == generated,
            "{} is stale: run `cargo run --bin crdgen -- config/crd/bases`",
            path.display()
        );
        assert!(committed.contains("cluster.x-k8s.io/v1beta2: v1beta2"));
    }
}

fn infra(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        kind,
    ))
}

/// Server-side dry-run create of every document in a fixture file.
async fn dry_run_all(client: &kube::Client, ns: &str, yaml: &str) -> Vec<Result<(), String>> {
    let mut out = Vec::new();
    for doc in yaml.split("\n---\n").filter(|d| d.contains("kind:")) {
        let mut obj: DynamicObject = serde_yaml_ng::from_str(doc).unwrap();
        obj.metadata.namespace = Some(ns.to_string());
        let kind = obj.types.as_ref().unwrap().kind.clone();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &infra(&kind));
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        out.push(
            api.create(&pp, &obj)
                .await
                .map(|_| ())
                .map_err(|e| format!("{kind}: {e}")),
        );
    }
    out
}

#[tokio::test]
async fn upstream_style_manifests_validate_unchanged() {
    let client = common::client().await;
    let yaml = include_str!("fixtures/capd-v1.13-manifests.yaml");
    for r in dry_run_all(&client, "default", yaml).await {
        r.unwrap();
    }
}

#[tokio::test]
async fn invalid_values_are_rejected_naming_the_field() {
    let client = common::client().await;
    let yaml = include_str!("fixtures/invalid-manifests.yaml");
    let expectations = [
        "spec.controlPlaneEndpoint.port",
        "failure domains must be sorted by name",
        "spec.failureDomains[0].name",
        "spec.bootstrapTimeout",
        "spec.template",
        "spec.providerID",
        "spec.extraMounts[0].hostPath",
        "spec.extraMounts[0].containerPath",
        "spec.customImage",
        "spec.loadBalancer.imageTag",
        "spec.loadBalancer.imageRepository",
    ];
    let results = dry_run_all(&client, "default", yaml).await;
    assert_eq!(results.len(), expectations.len());
    for (r, field) in results.into_iter().zip(expectations) {
        let err = r.expect_err(&format!("expected a rejection naming {field}"));
        assert!(err.contains(field), "{err:?} should name {field}");
    }
}

#[tokio::test]
async fn custom_image_is_immutable() {
    let client = common::client().await;
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &infra("DockerMachine"));
    let name = format!("immutable-{}", std::process::id());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
        "metadata": {"name": name}, "spec": {"customImage": "kindest/node:v1.35.0"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let err = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"customImage": "kindest/node:v1.36.0"}})),
        )
        .await
        .expect_err("customImage change must be rejected");
    let _ = api.delete(&name, &Default::default()).await;
    assert!(
        err.to_string().contains("spec.customImage is immutable"),
        "{err}"
    );
}

/// Contract item 3: the contract's status fields survive a status-subresource patch (not pruned).
#[tokio::test]
async fn contract_status_fields_are_not_pruned() {
    let client = common::client().await;
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &infra("DockerMachine"));
    let name = format!("status-roundtrip-{}", std::process::id());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
        "metadata": {"name": name}, "spec": {}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let status = json!({
        "initialization": {"provisioned": true},
        "ready": true,
        "loadBalancerConfigured": true,
        "addresses": [{"type": "Hostname", "address": "c-md-0"}, {"type": "InternalIP", "address": "172.18.0.4"}],
        "failureDomain": "fd1",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]
    });
    let patched = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await;
    let _ = api.delete(&name, &Default::default()).await;
    assert_eq!(
        patched.unwrap().data["status"],
        status,
        "status fields were pruned or changed"
    );
}
