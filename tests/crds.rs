//! The committed CRDs are what `crdgen` prints, and the API server enforces their schema and the
//! admission policy of `config/admission`: manifests written for upstream CAPD v1.13 (v1beta2)
//! validate unchanged, bad values are rejected with a message naming the field, defaults and
//! immutability are upstream's.
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

/// Every CEL function our CRDs' validation rules call exists in the CEL environment of the oldest
/// Kubernetes a CAPI v1.14 management cluster may run (v1.31: CEL's standard library plus
/// Kubernetes' strings, lists and regex extensions of that release). `sort()` arrived later:
/// Kubernetes v1.34 refused our DevCluster CRD for it, so `clusterctl init` failed there (found by
/// upstream's self-hosted e2e spec). A new function must be checked against v1.31 and added here.
#[test]
fn validation_rules_call_only_cel_functions_older_kubernetes_has() {
    const KNOWN_SINCE_V1_31: &[&str] = &[
        "all",
        "exists",
        "exists_one",
        "map",
        "filter",
        "has",
        "size",
        "matches",
        "startsWith",
        "endsWith",
        "contains",
        "split",
        "join",
        "lowerAscii",
        "upperAscii",
        "trim",
        "replace",
        "substring",
        "charAt",
        "indexOf",
        "lastIndexOf",
        "isSorted",
        "sum",
        "min",
        "max",
        "int",
        "string",
        "double",
        "bool",
        "url",
        "ip",
        "cidr",
        "quantity",
        "format",
    ];
    fn rules_in(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if k == "x-kubernetes-validations" {
                        let found = v.as_array().into_iter().flatten();
                        out.extend(found.filter_map(|r| r["rule"].as_str().map(String::from)));
                    } else {
                        rules_in(v, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| rules_in(v, out)),
            _ => {}
        }
    }
    // CEL string literals (the regexes) hold no calls.
    let literal = regex::Regex::new(r#"'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*""#).unwrap();
    let call = regex::Regex::new(r"([A-Za-z_][A-Za-z0-9_]*)\(").unwrap();
    let mut rules = 0;
    for crd in capd::api::crds::all() {
        let mut found = Vec::new();
        rules_in(&serde_json::to_value(&crd).unwrap(), &mut found);
        for rule in found {
            rules += 1;
            let code = literal.replace_all(&rule, "''");
            for f in call.captures_iter(&code).map(|c| c[1].to_string()) {
                assert!(
                    KNOWN_SINCE_V1_31.contains(&f.as_str()),
                    "{}: CEL function {f}() is not known to exist in Kubernetes v1.31: {rule}",
                    crd.spec.names.plural
                );
            }
        }
    }
    assert!(rules > 0, "the CRDs carry validation rules");
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
        let types = obj.types.clone().unwrap();
        let kind = types.kind.clone();
        let gvk = GroupVersionKind::try_from(&types).unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk));
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

/// Dev* kinds (v1.14's quick-start and e2e shapes, both versions) and the in-memory backend's
/// fields, which are accepted though not served.
#[tokio::test]
async fn upstream_dev_manifests_validate_unchanged() {
    let client = common::client().await;
    let yaml = include_str!("fixtures/capd-v1.14-dev-manifests.yaml");
    let results = dry_run_all(&client, "default", yaml).await;
    assert_eq!(results.len(), 10);
    for r in results {
        r.unwrap();
    }
}

#[tokio::test]
async fn invalid_values_are_rejected_naming_the_field() {
    let client = common::client().await;
    let yaml = include_str!("fixtures/invalid-manifests.yaml");
    let expectations = [
        "spec.controlPlaneEndpoint.port",
        "spec.failureDomains[0].name",
        "spec.bootstrapTimeout",
        "spec.template",
        "spec.providerID",
        "spec.extraMounts[0].hostPath",
        "spec.extraMounts[0].containerPath",
        "spec.customImage",
        "spec.loadBalancer.imageTag",
        "spec.loadBalancer.imageRepository",
        // Template metadata, as upstream's template webhooks validate it.
        "label keys must be qualified names",
        "spec.template.metadata.labels.pool",
        "annotation keys must be qualified names",
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
    // The image sits where each kind keeps its docker fields.
    let docker_machine: fn(&str) -> serde_json::Value = |i| json!({"customImage": i});
    let dev_machine: fn(&str) -> serde_json::Value =
        |i| json!({"backend": {"docker": {"customImage": i}}});
    for (kind, with_image, message) in [
        (
            "DockerMachine",
            docker_machine,
            "spec.customImage is immutable",
        ),
        (
            "DevMachine",
            dev_machine,
            "spec.backend.docker.customImage is immutable",
        ),
    ] {
        let (api, name) = created(kind, "immutable", with_image("kindest/node:v1.35.0")).await;
        let err = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": with_image("kindest/node:v1.36.0")})),
            )
            .await
            .expect_err("customImage change must be rejected");
        let _ = api.delete(&name, &Default::default()).await;
        assert!(err.to_string().contains(message), "{kind}: {err}");
    }
}

/// Contract item 3: the contract's status fields survive a status-subresource patch (not pruned).
#[tokio::test]
async fn contract_status_fields_are_not_pruned() {
    let (api, name) = created("DockerMachine", "status-roundtrip", json!({})).await;
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

fn obj(v: serde_json::Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// Creates a `kind` named `<prefix>-<pid>` in `default` with `spec`; returns its API and name.
async fn created(
    kind: &str,
    prefix: &str,
    spec: serde_json::Value,
) -> (Api<DynamicObject>, String) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(common::client().await, "default", &infra(kind));
    let name = format!("{prefix}-{}", std::process::id());
    let body = obj(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": kind,
        "metadata": {"name": name}, "spec": spec
    }));
    api.create(&PostParams::default(), &body).await.unwrap();
    (api, name)
}

/// Upstream's webhooks default these at admission; the CRD schema does here.
#[tokio::test]
async fn admission_defaults_spec_endpoint_port_and_failure_domains() {
    let client = common::client().await;
    let id = std::process::id();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &infra("DockerCluster"));
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client, "default", &infra("DockerMachine"));
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let bare = clusters
        .create(
            &pp,
            &obj(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "DockerCluster", "metadata": {"name": format!("bare-{id}")}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        bare.data["spec"],
        json!({"controlPlaneEndpoint": {"port": 6443}})
    );
    let with_host = clusters
        .create(
            &pp,
            &obj(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "DockerCluster", "metadata": {"name": format!("host-{id}")},
                "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1"},
                         "failureDomains": [{"name": "a"}, {"name": "b", "controlPlane": true}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        with_host.data["spec"]["controlPlaneEndpoint"],
        json!({"host": "10.0.0.1", "port": 6443})
    );
    assert_eq!(
        with_host.data["spec"]["failureDomains"],
        json!([{"name": "a", "controlPlane": false}, {"name": "b", "controlPlane": true}])
    );
    let machine = machines
        .create(
            &pp,
            &obj(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "DockerMachine", "metadata": {"name": format!("bare-{id}")}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(machine.data["spec"], json!({}), "stored with an empty spec");
}

/// A DevCluster's port belongs to its backend: admission defaults none, on the object or its
/// template (a template's 6443 was put back over an in-memory listener's port by a topology).
#[tokio::test]
async fn admission_defaults_no_port_on_a_dev_cluster_or_its_template() {
    let client = common::client().await;
    let id = std::process::id();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &infra("DevCluster"));
    let templates: Api<DynamicObject> =
        Api::namespaced_with(client, "default", &infra("DevClusterTemplate"));
    let in_memory = clusters
        .create(
            &pp,
            &obj(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "DevCluster", "metadata": {"name": format!("mem-{id}")},
                "spec": {"backend": {"inMemory": {}}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        in_memory.data["spec"],
        json!({"backend": {"inMemory": {}}}),
        "no endpoint added"
    );
    let with_host = clusters
        .create(
            &pp,
            &obj(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "DevCluster", "metadata": {"name": format!("host-{id}")},
                "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1"}, "backend": {"docker": {}}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        with_host.data["spec"]["controlPlaneEndpoint"],
        json!({"host": "10.0.0.1"})
    );
    let template = templates
        .create(
            &pp,
            &obj(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "DevClusterTemplate", "metadata": {"name": format!("tpl-{id}")},
                "spec": {"template": {"spec": {"backend": {"inMemory": {}}}}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        template.data["spec"]["template"]["spec"],
        json!({"backend": {"inMemory": {}}})
    );
}

/// `status.capacity` holds Kubernetes quantities, integers or strings (the autoscaler reads it).
#[tokio::test]
async fn template_capacity_holds_quantities() {
    let (api, name) = created(
        "DockerMachineTemplate",
        "capacity",
        json!({"template": {"spec": {}}}),
    )
    .await;
    let capacity = json!({"cpu": 2, "memory": "8Gi", "ephemeral-storage": "100G"});
    let patched = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"capacity": capacity}})),
        )
        .await;
    let bad = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"capacity": {"cpu": "two"}}})),
        )
        .await;
    let _ = api.delete(&name, &Default::default()).await;
    assert_eq!(patched.unwrap().data["status"]["capacity"], capacity);
    let err = bad.expect_err("not a quantity").to_string();
    assert!(err.contains("status.capacity.cpu"), "{err}");
}

/// DockerClusterTemplate and DevClusterTemplate: `spec.template.spec` cannot change (its
/// metadata can).
#[tokio::test]
async fn cluster_template_spec_is_immutable() {
    for (kind, spec, changed) in [
        (
            "DockerClusterTemplate",
            json!({}),
            json!({"loadBalancer": {"imageTag": "v2"}}),
        ),
        (
            "DevClusterTemplate",
            json!({"backend": {"docker": {}}}),
            json!({"backend": {"docker": {"loadBalancer": {"imageTag": "v2"}}}}),
        ),
    ] {
        let (api, name) = created(kind, "ct-immutable", json!({"template": {"spec": spec}})).await;
        let pp = PatchParams::default();
        let spec_change = api
            .patch(
                &name,
                &pp,
                &Patch::Merge(&json!({"spec": {"template": {"spec": changed}}})),
            )
            .await;
        let meta_change = api
            .patch(
                &name,
                &pp,
                &Patch::Merge(&json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}})),
            )
            .await;
        let _ = api.delete(&name, &Default::default()).await;
        let err = spec_change.expect_err("spec change").to_string();
        assert!(
            err.contains(&format!(
                "spec.template.spec is immutable; create a new {kind}"
            )),
            "{err}"
        );
        meta_change.expect("the template's metadata may change");
    }
}

/// DockerMachineTemplate and DevMachineTemplate: `spec.template.spec` cannot change, except in CAPI's topology dry-run
/// (a dry-run request on an object carrying `topology.cluster.x-k8s.io/dry-run`), which the
/// topology controller uses to compute a ClusterClass change before it makes a new template.
#[tokio::test]
async fn machine_template_spec_is_immutable_except_in_topology_dry_run() {
    let docker: fn(&str) -> serde_json::Value = |i| json!({"customImage": i});
    let dev: fn(&str) -> serde_json::Value = |i| json!({"backend": {"docker": {"customImage": i}}});
    for (kind, with_image) in [
        ("DockerMachineTemplate", docker),
        ("DevMachineTemplate", dev),
    ] {
        let (api, name) = created(
            kind,
            "mt-immutable",
            json!({"template": {"spec": with_image("kindest/node:v1.35.0")}}),
        )
        .await;
        let new_image = json!({"spec": {"template": {"spec": with_image("kindest/node:v1.36.0")}}});
        let dry_run = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        let with_annotation = {
            let mut p = new_image.clone();
            p["metadata"] = json!({"annotations": {"topology.cluster.x-k8s.io/dry-run": ""}});
            p
        };
        let plain = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&new_image))
            .await;
        let dry_plain = api.patch(&name, &dry_run, &Patch::Merge(&new_image)).await;
        let dry_topology = api
            .patch(&name, &dry_run, &Patch::Merge(&with_annotation))
            .await;
        let labels = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": {"a": "b"}}})),
            )
            .await;
        let _ = api.delete(&name, &Default::default()).await;
        let err = plain.expect_err("a spec change").to_string();
        assert!(err.contains("spec.template.spec is immutable"), "{err}");
        let err = dry_plain
            .expect_err("a dry run without the topology annotation")
            .to_string();
        assert!(err.contains("spec.template.spec is immutable"), "{err}");
        let accepted = dry_topology.expect("CAPI's topology dry-run goes through");
        assert_eq!(
            accepted.data["spec"]["template"]["spec"],
            with_image("kindest/node:v1.36.0")
        );
        labels.expect("metadata may change");
    }
}

/// The API server validates a write against the schema of the version it was sent in: a v1beta1
/// client must meet the same image and failure-domain rules as a v1beta2 one (issue 25).
#[tokio::test]
async fn v1beta1_writes_meet_the_v1beta2_rules() {
    let client = common::client().await;
    let v1beta1 = |kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1beta1",
            kind,
        ))
    };
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    for (kind, spec, field) in [
        (
            "DockerMachine",
            json!({"customImage": "bad tag!!"}),
            "spec.customImage",
        ),
        (
            "DevMachine",
            json!({"backend": {"docker": {"customImage": "bad tag!!"}}}),
            "spec.backend.docker.customImage",
        ),
        (
            "DockerCluster",
            json!({"loadBalancer": {"imageTag": "bad tag!!"}}),
            "spec.loadBalancer.imageTag",
        ),
        (
            "DockerCluster",
            json!({"failureDomains": {"": {"controlPlane": true}}}),
            "spec.failureDomains",
        ),
    ] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "default", &v1beta1(kind));
        let body = obj(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": kind,
            "metadata": {"name": format!("v1beta1-rules-{}", std::process::id())}, "spec": spec
        }));
        match api.create(&pp, &body).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 422, "{kind}: {e:?}");
                assert!(
                    e.message.contains(field),
                    "{kind}: {} should name {field}",
                    e.message
                );
            }
            other => panic!("{kind} {spec}: expected a 422 naming {field}, got {other:?}"),
        }
    }
}

/// Failure domains in any order are accepted, as upstream's CRDs accept them (ours required them
/// sorted, and so refused manifests upstream CAPD takes).
#[tokio::test]
async fn failure_domains_in_any_order_are_accepted() {
    let client = common::client().await;
    let yaml = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerCluster
metadata:
  name: fd-any-order
spec:
  failureDomains:
  - name: fd2
    controlPlane: true
  - name: fd1
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevCluster
metadata:
  name: fd-any-order
spec:
  backend:
    docker:
      failureDomains:
      - name: fd9
      - name: fd1
"#;
    let results = dry_run_all(&client, "default", yaml).await;
    assert_eq!(results.len(), 2);
    for r in results {
        r.unwrap();
    }
}
