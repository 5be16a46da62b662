//! v1beta1 is served beside v1beta2 through the manager's conversion webhook, against the real
//! API server: upstream-shaped v1beta1 manifests apply unchanged, an object written as v1beta1
//! reads back identical, a v1beta1 client's read-modify-write keeps what only v1beta2 can hold,
//! CRDs whose storedVersions list v1beta1 (an upstream CAPD install) take ours, and a manager
//! without a certificate runs with conversion off.
//!
//! The plane's CRDs call `https://127.0.0.1:9446/convert` (hack/plane.sh, `CAPD_WEBHOOK_PORT`)
//! with the plane CA; the test's manager serves it with the plane's webhook certificate.
mod common;

use std::{path::PathBuf, time::Duration};

use common::{TestEnv, TestEnvRef, eventually};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};

const WEBHOOK_PORT: u16 = 9446;
const GROUP: &str = "infrastructure.cluster.x-k8s.io";

fn api(h: &TestEnvRef, ns: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, version, kind));
    Api::namespaced_with(h.client.clone(), ns, &ar)
}

fn webhook_cert_dir() -> PathBuf {
    std::env::var("CAPD_RS_PLANE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| common::cache_dir().join("plane"))
        .join("pki/webhook")
}

fn obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// spec and status of an object as read (what conversion may change; metadata it may not).
fn body(o: &DynamicObject) -> Value {
    json!({"spec": o.data.get("spec"), "status": o.data.get("status")})
}

#[tokio::test]
async fn v1beta1_is_served_through_the_conversion_webhook() {
    let mut env = TestEnv::new("conv").await;
    let certs = format!("--webhook-cert-dir={}", webhook_cert_dir().display());
    let port = format!("--webhook-port={WEBHOOK_PORT}");
    env.start_manager(&[&certs, &port, "--webhook-host=127.0.0.1"], None);
    env.run(|h| async move {
        h.manager_ready().await;
        assert!(
            h.manager_log().contains("serving the conversion webhook"),
            "webhook not started"
        );
        let ns = h.namespace("v1b1").await;
        upstream_v1beta1_manifests_apply_unchanged(&h, &ns).await;
        written_as_v1beta1_reads_back_identical(&h, &ns).await;
        v1beta1_writes_keep_what_only_v1beta2_holds(&h, &ns).await;
        reconciled_objects_show_v1beta1_conditions(&h, &ns).await;
    })
    .await;
}

async fn upstream_v1beta1_manifests_apply_unchanged(h: &TestEnvRef, ns: &str) {
    let yaml = include_str!("fixtures/capd-v1beta1-manifests.yaml");
    let docs: Vec<&str> = yaml
        .split("\n---\n")
        .filter(|d| d.contains("kind:"))
        .collect();
    assert_eq!(docs.len(), 13, "every fixture document is checked");
    for doc in docs {
        let o: DynamicObject = serde_yaml_ng::from_str(doc).unwrap();
        let kind = o.types.as_ref().unwrap().kind.clone();
        let created = api(h, ns, "v1beta1", &kind)
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &o,
            )
            .await
            .unwrap_or_else(|e| panic!("{kind} {}: {e}", o.metadata.name.as_deref().unwrap()));
        assert_eq!(
            created.types.unwrap().api_version,
            format!("{GROUP}/v1beta1")
        );
    }
    // The v1beta1 schema checks a template's metadata as the v1beta2 one does.
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1beta1"), "kind": "DockerMachineTemplate",
        "metadata": {"name": "bad-label-key"},
        "spec": {"template": {"metadata": {"labels": {"-leading-dash": "x"}}, "spec": {}}},
    }))
    .unwrap();
    let err = api(h, ns, "v1beta1", "DockerMachineTemplate")
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("an invalid label key must be refused");
    assert!(
        err.to_string()
            .contains("label keys must be qualified names"),
        "{err}"
    );
}

async fn written_as_v1beta1_reads_back_identical(h: &TestEnvRef, ns: &str) {
    let pp = PostParams::default();
    // Spec and status in every v1beta1 shape that has a v1beta2 counterpart.
    let dc = json!({
        "apiVersion": format!("{GROUP}/v1beta1"), "kind": "DockerCluster",
        "metadata": {"name": "dc"},
        "spec": {"controlPlaneEndpoint": {"host": "172.18.0.9", "port": 6443},
                 "failureDomains": {"b": {"controlPlane": true}, "a": {"controlPlane": false, "attributes": {"rack": "1"}}},
                 "loadBalancer": {"imageRepository": "kindest/haproxy", "imageTag": "v1"}},
    });
    let dc_status = json!({
        "ready": true,
        "failureDomains": {"a": {"controlPlane": false}},
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-24T10:00:00Z"}],
        "v1beta2": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                    "lastTransitionTime": "2026-11-24T10:00:00Z", "observedGeneration": 1}]}
    });
    let dm = json!({
        "apiVersion": format!("{GROUP}/v1beta1"), "kind": "DockerMachine",
        "metadata": {"name": "dm"},
        "spec": {"providerID": "docker:////c-dm", "customImage": "kindest/node:v1.35.4",
                 "preLoadImages": ["busybox:1"], "bootstrapTimeout": "7m",
                 "extraMounts": [{"containerPath": "/x", "hostPath": "/tmp/x", "readOnly": true}]},
    });
    let dm_status = json!({
        "ready": true, "loadBalancerConfigured": true,
        "addresses": [{"type": "InternalIP", "address": "172.18.0.5"}],
        "conditions": [{"type": "Ready", "status": "False", "severity": "Warning", "reason": "Waiting",
                        "message": "m", "lastTransitionTime": "2026-11-24T10:00:00Z"}]
    });
    for (o, status) in [(dc, dc_status), (dm, dm_status)] {
        let kind = o["kind"].as_str().unwrap().to_string();
        let v1 = api(h, ns, "v1beta1", &kind);
        v1.create(&pp, &obj(o.clone())).await.unwrap();
        let written = v1
            .patch_status(
                o["metadata"]["name"].as_str().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind} status: {e}"));
        assert_eq!(
            body(&written),
            json!({"spec": o["spec"], "status": status}),
            "{kind} written as v1beta1 reads back identical"
        );
        let annotations = written.metadata.annotations.unwrap_or_default();
        assert!(
            !annotations.contains_key("cluster.x-k8s.io/conversion-data"),
            "{kind}: nothing v1beta1 cannot hold"
        );
    }
    // The same objects in v1beta2, as the controllers and CAPI read them.
    let dc2 = api(h, ns, "v1beta2", "DockerCluster")
        .get("dc")
        .await
        .unwrap();
    assert_eq!(
        dc2.data["spec"]["failureDomains"],
        json!([{"name": "a", "controlPlane": false, "attributes": {"rack": "1"}},
               {"name": "b", "controlPlane": true}])
    );
    assert_eq!(
        dc2.data["status"]["initialization"],
        json!({"provisioned": true})
    );
    assert_eq!(
        dc2.data["status"]["conditions"][0]["reason"], "Ready",
        "status.v1beta2.conditions are the v1beta2 conditions"
    );
    let dm2 = api(h, ns, "v1beta2", "DockerMachine")
        .get("dm")
        .await
        .unwrap();
    assert_eq!(
        dm2.data["status"]["deprecated"]["v1beta1"]["conditions"][0]["severity"],
        "Warning"
    );
}

async fn v1beta1_writes_keep_what_only_v1beta2_holds(h: &TestEnvRef, ns: &str) {
    let pp = PostParams::default();
    let (v1, v2) = (
        api(h, ns, "v1beta1", "DockerMachine"),
        api(h, ns, "v1beta2", "DockerMachine"),
    );
    v2.create(
        &pp,
        &obj(
            json!({"apiVersion": format!("{GROUP}/v1beta2"), "kind": "DockerMachine",
                    "metadata": {"name": "fd"}, "spec": {}}),
        ),
    )
    .await
    .unwrap();
    v2.patch_status(
        "fd",
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"status": {"failureDomain": "fd-2", "loadBalancerConfigured": false,
                                          "initialization": {"provisioned": true}}}),
        ),
    )
    .await
    .unwrap();
    // A v1beta1 client: get, change the spec, put the whole object back.
    let mut old = v1.get("fd").await.unwrap();
    assert!(
        old.annotations()
            .contains_key("cluster.x-k8s.io/conversion-data"),
        "status.failureDomain has no v1beta1 field: carried in the annotation"
    );
    old.data["spec"]["preLoadImages"] = json!(["busybox:1"]);
    v1.replace("fd", &pp, &old).await.unwrap();
    let now = v2.get("fd").await.unwrap();
    assert_eq!(now.data["spec"]["preLoadImages"], json!(["busybox:1"]));
    assert_eq!(
        now.data["status"]["failureDomain"], "fd-2",
        "the v1beta1 write kept it"
    );
    assert!(
        !now.annotations()
            .contains_key("cluster.x-k8s.io/conversion-data"),
        "the annotation is not stored"
    );

    // DockerMachineTemplate: status (capacity) exists only in v1beta2.
    let (t1, t2) = (
        api(h, ns, "v1beta1", "DockerMachineTemplate"),
        api(h, ns, "v1beta2", "DockerMachineTemplate"),
    );
    t2.create(
        &pp,
        &obj(
            json!({"apiVersion": format!("{GROUP}/v1beta2"), "kind": "DockerMachineTemplate",
                    "metadata": {"name": "cap"}, "spec": {"template": {"spec": {}}}}),
        ),
    )
    .await
    .unwrap();
    t2.patch_status(
        "cap",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"capacity": {"cpu": "2", "memory": "4Gi"}}})),
    )
    .await
    .unwrap();
    let mut old = t1.get("cap").await.unwrap();
    old.labels_mut().insert("edited".into(), "v1beta1".into());
    t1.replace("cap", &pp, &old).await.unwrap();
    let now = t2.get("cap").await.unwrap();
    assert_eq!(now.labels()["edited"], "v1beta1");
    assert_eq!(
        now.data["status"]["capacity"],
        json!({"cpu": "2", "memory": "4Gi"})
    );
}

/// An upstream CAPD install that once stored v1beta1 lists it in the CRD's storedVersions; the
/// API server refuses a CRD that no longer serves a stored version, so ours must serve it.
#[tokio::test]
async fn crds_that_stored_v1beta1_take_ours() {
    let client = common::client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let name = "dockerclustertemplates.infrastructure.cluster.x-k8s.io";
    let stored = |versions: Value| Patch::Merge(json!({"status": {"storedVersions": versions}}));
    crds.patch_status(
        name,
        &PatchParams::default(),
        &stored(json!(["v1beta1", "v1beta2"])),
    )
    .await
    .unwrap();
    let ours = capd::api::crds::all()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap();
    let current = crds.get(name).await.unwrap();
    let mut replacement = ours.clone();
    replacement.metadata.resource_version = current.metadata.resource_version.clone();
    replacement.spec.conversion = current.spec.conversion.clone();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let applied = crds.replace(name, &dry_run, &replacement).await;
    let mut v1beta2_only = replacement.clone();
    v1beta2_only.spec.versions.retain(|v| v.name == "v1beta2");
    let refused = crds.replace(name, &dry_run, &v1beta2_only).await;
    crds.patch_status(name, &PatchParams::default(), &stored(json!(["v1beta2"])))
        .await
        .unwrap();
    applied.expect("our CRD replaces one whose storedVersions list v1beta1");
    let err = refused
        .expect_err("a v1beta2-only CRD is refused")
        .to_string();
    assert!(err.contains("storedVersions"), "{err}");
}

#[tokio::test]
async fn without_a_certificate_conversion_is_off_and_the_manager_runs() {
    let mut env = TestEnv::new("nocert").await;
    env.start_manager(
        &[
            "--webhook-cert-dir=/nonexistent/capd-rs-certs",
            "--webhook-port=0",
        ],
        None,
    );
    env.run(|h| async move {
        h.manager_ready().await;
        eventually(Duration::from_secs(10), "the log says why", || async {
            h.manager_log()
                .contains("conversion webhook off")
                .then_some(())
        })
        .await;
    })
    .await;
}

/// `(type, status, severity, reason, message)` of each v1beta1 condition of an object read as
/// v1beta1, every one with a lastTransitionTime.
fn v1beta1_conditions(o: &DynamicObject) -> Vec<(String, String, String, String, String)> {
    let s = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            assert!(
                c.get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .is_some(),
                "{c}"
            );
            (
                s(c, "type"),
                s(c, "status"),
                s(c, "severity"),
                s(c, "reason"),
                s(c, "message"),
            )
        })
        .collect()
}

/// A DockerCluster and a DockerMachine reconciled by the manager, read as v1beta1, show
/// upstream's v1beta1 conditions (from `status.deprecated.v1beta1.conditions`), Ready first.
async fn reconciled_objects_show_v1beta1_conditions(h: &TestEnvRef, ns: &str) {
    const LONG: Duration = Duration::from_secs(90);
    let name = format!("{}-c", h.id);
    h.provisioned_cluster(ns, &name).await;
    h.create_secret(
        ns,
        "boot",
        Some(include_str!("fixtures/bootstrap-ok.yaml")),
        None,
    )
    .await;
    h.create_machine(
        ns,
        &name,
        "m0",
        false,
        Some("boot"),
        json!({"customImage": common::NODE_IMAGE}),
    )
    .await;
    eventually(LONG, "m0 provisioned", || async {
        h.docker_machine(ns, "m0")
            .await
            .filter(common::fully_provisioned)
    })
    .await;
    let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let true_ = |ty: &str| {
        (
            ty.to_string(),
            "True".to_string(),
            String::new(),
            String::new(),
            String::new(),
        )
    };
    let dc = eventually(LONG, "DockerCluster v1beta1 conditions", || async {
        let o = api(h, ns, "v1beta1", "DockerCluster")
            .get(&name)
            .await
            .ok()?;
        (!v1beta1_conditions(&o).is_empty()).then_some(o)
    })
    .await;
    assert_eq!(
        v1beta1_conditions(&dc),
        vec![true_("Ready"), true_("LoadBalancerAvailable")],
        "{:#}",
        dc.data["status"]
    );
    let dm = eventually(LONG, "DockerMachine v1beta1 conditions", || async {
        let o = api(h, ns, "v1beta1", "DockerMachine")
            .get("m0")
            .await
            .ok()?;
        (v1beta1_conditions(&o).len() == 3).then_some(o)
    })
    .await;
    assert_eq!(
        v1beta1_conditions(&dm),
        vec![
            true_("Ready"),
            true_("BootstrapExecSucceeded"),
            true_("ContainerProvisioned")
        ],
        "{:#}",
        dm.data["status"]
    );
    // Stored in v1beta2 under status.deprecated.v1beta1 (where upstream keeps them).
    let stored = api(h, ns, "v1beta2", "DockerMachine")
        .get("m0")
        .await
        .unwrap();
    let types: Vec<_> = stored.data["status"]["deprecated"]["v1beta1"]["conditions"]
        .as_array()
        .expect("status.deprecated.v1beta1.conditions")
        .iter()
        .map(|c| c["type"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        types,
        t(&["Ready", "BootstrapExecSucceeded", "ContainerProvisioned"])
    );

    // A control-plane machine waiting for its bootstrap data: False, Info, upstream's reason, a step counter.
    h.create_machine(
        ns,
        &name,
        "m1",
        true,
        None,
        json!({"customImage": common::NODE_IMAGE}),
    )
    .await;
    let waiting = eventually(LONG, "m1 waiting, as v1beta1", || async {
        let o = api(h, ns, "v1beta1", "DockerMachine")
            .get("m1")
            .await
            .ok()?;
        let c = v1beta1_conditions(&o);
        c.iter().any(|c| c.0 == "Ready").then_some(c)
    })
    .await;
    let f = |ty: &str, reason: &str, message: &str| {
        (
            ty.to_string(),
            "False".to_string(),
            "Info".to_string(),
            reason.to_string(),
            message.to_string(),
        )
    };
    assert_eq!(
        waiting,
        vec![
            f("Ready", "WaitingForBootstrapData", "0 of 2 completed"),
            f("ContainerProvisioned", "WaitingForBootstrapData", "")
        ]
    );
}
