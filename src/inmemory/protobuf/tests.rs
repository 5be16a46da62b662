//! The decoder against bodies captured from client-go v0.36.3 (`testdata/protobuf`, written by
//! `hack/protobuf-fixtures`): each `.pb` must decode to the `.json` body the same client sends
//! for the same object, and to the values the generator set, field by field.
use k8s_pb::apimachinery::pkg::{
    apis::meta::v1::ObjectMeta,
    runtime::{TypeMeta, Unknown},
};
use prost::Message;
use serde_json::{Value, json};

use super::decode;

macro_rules! fixture {
    ($name:literal) => {
        (
            include_bytes!(concat!("../testdata/protobuf/", $name, ".pb")) as &[u8],
            include_bytes!(concat!("../testdata/protobuf/", $name, ".json")) as &[u8],
        )
    };
}

/// A fixture: the protobuf body and the JSON body of the same request.
type Fixture = (&'static [u8], &'static [u8]);

const CONFIG_MAP: Fixture = fixture!("configmap-update");
const SECRET: Fixture = fixture!("secret-create");
const CRB: Fixture = fixture!("clusterrolebinding-create");
const NODE: Fixture = fixture!("node-update");
const NODE_MINIMAL: Fixture = fixture!("node-minimal");
const DELETE: Fixture = fixture!("delete-options");
const DELETE_EMPTY: Fixture = fixture!("delete-empty");
const DELETE_DRY_RUN: Fixture = fixture!("delete-dryrun");
const EVICTION: Fixture = fixture!("eviction-create");
const SERVICE_ACCOUNT: Fixture = fixture!("serviceaccount-create");

/// The defaults the server passes for each fixture's URL.
const DECODED: &[(Fixture, (&str, &str))] = &[
    (CONFIG_MAP, ("v1", "ConfigMap")),
    (SECRET, ("v1", "Secret")),
    (CRB, ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")),
    (NODE, ("v1", "Node")),
    (NODE_MINIMAL, ("v1", "Node")),
    (DELETE, ("v1", "DeleteOptions")),
    (DELETE_EMPTY, ("v1", "DeleteOptions")),
    (DELETE_DRY_RUN, ("v1", "DeleteOptions")),
    (EVICTION, ("v1", "Pod")),
];

fn decoded(fixture: Fixture, default: (&str, &str)) -> Value {
    decode(fixture.0, default).unwrap()
}

fn json_body(fixture: Fixture) -> Value {
    serde_json::from_slice(fixture.1).unwrap()
}

/// A body built here: the magic, then an envelope around `raw`.
fn body(api_version: Option<&str>, kind: Option<&str>, raw: Vec<u8>) -> Vec<u8> {
    let envelope = Unknown {
        type_meta: Some(TypeMeta {
            api_version: api_version.map(String::from),
            kind: kind.map(String::from),
        }),
        raw: Some(raw),
        content_encoding: None,
        content_type: None,
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(envelope.encode_to_vec());
    out
}

#[test]
fn every_fixture_decodes_to_the_json_body_client_go_sends_for_it() {
    for (fixture, default) in DECODED {
        assert_eq!(
            decoded(*fixture, *default),
            json_body(*fixture),
            "{}",
            String::from_utf8_lossy(fixture.1)
        );
    }
}

#[test]
fn a_config_map_keeps_its_metadata_data_and_binary_data() {
    let cm = decoded(CONFIG_MAP, ("v1", "ConfigMap"));
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["apiVersion"], "v1");
    let meta = &cm["metadata"];
    assert_eq!(meta["name"], "kubeadm-config");
    assert_eq!(meta["namespace"], "kube-system");
    assert_eq!(meta["uid"], "0a1b2c3d-0000-4000-8000-000000000001");
    assert_eq!(meta["resourceVersion"], "42");
    assert_eq!(meta["generation"], 3);
    assert_eq!(meta["creationTimestamp"], "2026-01-02T03:04:05Z");
    assert_eq!(
        meta["labels"],
        json!({"app.kubernetes.io/managed-by": "kubeadm", "empty": ""})
    );
    assert_eq!(meta["annotations"], json!({"note": "written by KCP"}));
    assert_eq!(meta["finalizers"], json!(["example.com/keep"]));
    assert_eq!(
        meta["ownerReferences"],
        json!([{
            "apiVersion": "v1", "kind": "Namespace", "name": "kube-system",
            "uid": "0a1b2c3d-0000-4000-8000-000000000002",
            "controller": true, "blockOwnerDeletion": false,
        }])
    );
    assert_eq!(meta["managedFields"][0]["manager"], "kubeadm");
    assert_eq!(meta["managedFields"][0]["time"], "2026-01-02T03:04:05Z");
    assert_eq!(
        meta["managedFields"][0]["fieldsV1"],
        json!({"f:data": {".": {}, "f:ClusterConfiguration": {}}})
    );
    // Go always writes the non-pointer strings; empty ones are left out of the JSON.
    for absent in ["generateName", "selfLink", "deletionTimestamp"] {
        assert!(meta.get(absent).is_none(), "{absent}");
    }
    assert!(
        cm["data"]["ClusterConfiguration"]
            .as_str()
            .unwrap()
            .contains("kind: ClusterConfiguration\n")
    );
    assert_eq!(cm["data"]["empty"], "");
    assert_eq!(cm["binaryData"], json!({"blob": "AAH+/w=="}));
    // A pointer set to false stays false.
    assert_eq!(cm["immutable"], false);
}

#[test]
fn a_bootstrap_token_secret_keeps_its_type_and_base64_data() {
    let s = decoded(SECRET, ("v1", "Secret"));
    assert_eq!(s["kind"], "Secret");
    assert_eq!(s["type"], "bootstrap.kubernetes.io/token");
    assert_eq!(
        s["metadata"],
        json!({"name": "bootstrap-token-abcdef", "namespace": "kube-system"})
    );
    assert_eq!(s["data"]["token-id"], "YWJjZGVm");
    assert_eq!(s["data"]["token-secret"], "MDEyMzQ1Njc4OWFiY2RlZg==");
    assert_eq!(s["data"]["usage-bootstrap-signing"], "dHJ1ZQ==");
    assert_eq!(s["data"].as_object().unwrap().len(), 6);
    assert_eq!(
        s["stringData"],
        json!({"description": "token for worker-1"})
    );
    assert_eq!(s["immutable"], true);
}

#[test]
fn a_cluster_role_binding_keeps_its_role_ref_and_subjects() {
    let crb = decoded(CRB, ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"));
    assert_eq!(crb["apiVersion"], "rbac.authorization.k8s.io/v1");
    assert_eq!(crb["metadata"], json!({"name": "kubeadm:cluster-admins"}));
    assert_eq!(
        crb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"})
    );
    assert_eq!(
        crb["subjects"],
        json!([
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "kubeadm:cluster-admins"},
            {"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"},
        ])
    );
}

#[test]
fn a_node_keeps_its_spec_and_status() {
    let n = decoded(NODE, ("v1", "Node"));
    let spec = &n["spec"];
    assert_eq!(spec["providerID"], "in-memory://worker-1");
    assert_eq!(spec["unschedulable"], true);
    assert_eq!(spec["podCIDR"], "10.244.1.0/24");
    assert_eq!(spec["podCIDRs"][1], "fd00:10:244:1::/64");
    assert_eq!(spec["externalID"], "legacy-id");
    assert_eq!(
        spec["taints"],
        json!([
            {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unschedulable", "value": "yes", "effect": "NoExecute",
             "timeAdded": "2026-01-02T03:04:05Z"},
        ])
    );
    assert_eq!(
        spec["configSource"]["configMap"]["kubeletConfigKey"],
        "kubelet"
    );
    let status = &n["status"];
    assert_eq!(status["capacity"], json!({"cpu": "2", "memory": "8Gi"}));
    assert_eq!(status["allocatable"], json!({"pods": "110"}));
    assert_eq!(status["phase"], "Running");
    assert_eq!(
        status["conditions"],
        json!([{
            "type": "Ready", "status": "True",
            "lastHeartbeatTime": "2026-01-02T03:04:05Z",
            "lastTransitionTime": "2026-01-02T03:04:05Z",
            "reason": "KubeletReady", "message": "kubelet is posting ready status",
        }])
    );
    assert_eq!(
        status["addresses"][0],
        json!({"type": "InternalIP", "address": "10.0.0.5"})
    );
    assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
    assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.35.0");
    assert_eq!(status["nodeInfo"]["architecture"], "amd64");
    assert_eq!(status["nodeInfo"]["swap"]["capacity"], 1 << 30);
    assert_eq!(status["images"][0]["sizeBytes"], 320368);
    assert_eq!(status["volumesInUse"], json!(["kubernetes.io/csi/disk-1"]));
    assert_eq!(status["volumesAttached"][0]["devicePath"], "/dev/sdb");
    assert_eq!(status["config"]["error"], "none");
    assert_eq!(
        status["config"]["lastKnownGood"]["configMap"]["resourceVersion"],
        "7"
    );
    assert_eq!(
        status["runtimeHandlers"],
        json!([{"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}])
    );
    assert_eq!(
        status["features"],
        json!({"supplementalGroupsPolicy": true})
    );
    assert_eq!(
        status["declaredFeatures"],
        json!(["InPlacePodVerticalScaling"])
    );
}

#[test]
fn a_bare_node_has_the_struct_fields_go_always_writes() {
    let n = decoded(NODE_MINIMAL, ("v1", "Node"));
    assert_eq!(n["metadata"], json!({"name": "worker-2"}));
    assert_eq!(n["spec"], json!({}));
    assert_eq!(
        n["status"]["daemonEndpoints"],
        json!({"kubeletEndpoint": {"Port": 0}})
    );
    assert_eq!(n["status"]["nodeInfo"]["machineID"], "");
    assert!(n["status"].get("conditions").is_none());
}

#[test]
fn delete_options_keep_their_preconditions_and_policy() {
    assert_eq!(
        decoded(DELETE, ("v1", "DeleteOptions")),
        json!({
            "kind": "DeleteOptions", "apiVersion": "v1",
            "gracePeriodSeconds": 30,
            "preconditions": {"uid": "0a1b2c3d-0000-4000-8000-000000000003", "resourceVersion": "17"},
            "propagationPolicy": "Foreground",
        })
    );
    assert_eq!(
        decoded(DELETE_EMPTY, ("v1", "DeleteOptions")),
        json!({"kind": "DeleteOptions", "apiVersion": "v1"})
    );
    assert_eq!(
        decoded(DELETE_DRY_RUN, ("v1", "DeleteOptions"))["dryRun"],
        json!(["All"])
    );
}

#[test]
fn an_eviction_keeps_its_pod_and_delete_options() {
    assert_eq!(
        decoded(EVICTION, ("v1", "Pod")),
        json!({
            "kind": "Eviction", "apiVersion": "policy/v1",
            "metadata": {"name": "web-0", "namespace": "default"},
            "deleteOptions": {"gracePeriodSeconds": 0},
        })
    );
}

#[test]
fn another_kind_is_a_415_naming_it() {
    let e = decode(SERVICE_ACCOUNT.0, ("v1", "ServiceAccount")).unwrap_err();
    assert_eq!(e.code, 415);
    assert_eq!(e.reason, "UnsupportedMediaType");
    assert!(e.message.contains("ServiceAccount (v1)"), "{}", e.message);
    // A known kind at a group version not decoded is refused too, not misread.
    let e = decode(
        &body(Some("v2"), Some("ConfigMap"), vec![]),
        ("v1", "ConfigMap"),
    )
    .unwrap_err();
    assert_eq!(e.code, 415, "{}", e.message);
}

#[test]
fn an_envelope_without_type_meta_takes_the_request_s_kind() {
    let raw = k8s_pb::api::core::v1::ConfigMap {
        metadata: Some(ObjectMeta {
            name: Some("c".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let cm = decode(&body(None, None, raw), ("v1", "ConfigMap")).unwrap();
    assert_eq!(
        cm,
        json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "c"}})
    );
}

#[test]
fn malformed_bodies_are_400s() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "no magic",
            b"{\"kind\":\"ConfigMap\"}".to_vec(),
            "does not start with",
        ),
        ("empty", vec![], "does not start with"),
        ("magic only", b"k8s\0".to_vec(), "is empty"),
        (
            "envelope not a message",
            b"k8s\0\xff\xff\xff".to_vec(),
            "envelope is malformed",
        ),
        (
            "object not a message",
            body(Some("v1"), Some("ConfigMap"), vec![0x0a, 0x7f, 0x01]),
            "ConfigMap v1 is malformed",
        ),
        // field 2 (data) of a ConfigMap: a map entry whose value is not UTF-8.
        (
            "string not UTF-8",
            body(
                Some("v1"),
                Some("ConfigMap"),
                vec![0x12, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, 0xff],
            ),
            "ConfigMap v1 is malformed",
        ),
        // field 8 (creationTimestamp) of the metadata with seconds far past year 9999.
        (
            "time out of range",
            body(
                Some("v1"),
                Some("ConfigMap"),
                vec![
                    0x0a, 0x0b, 0x42, 0x09, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f,
                ],
            ),
            "out of range",
        ),
    ];
    for (what, bytes, mentions) in cases {
        match decode(&bytes, ("v1", "ConfigMap")) {
            Err(e) => {
                assert_eq!(e.code, 400, "{what}: {}", e.message);
                assert_eq!(e.reason, "BadRequest", "{what}");
                assert!(e.message.contains(mentions), "{what}: {}", e.message);
            }
            Ok(v) => panic!("{what}: decoded {v}"),
        }
    }
}

#[test]
fn truncated_and_corrupted_bodies_never_panic() {
    for (fixture, default) in DECODED {
        let pb = fixture.0;
        for end in 0..pb.len() {
            if let Err(e) = decode(&pb[..end], *default) {
                assert_eq!(e.code, 400, "{}", e.message);
            }
        }
        // Flip each byte past the magic in turn: any outcome but a panic, and errors are 400 or
        // (a kind name corrupted) 415.
        for i in 4..pb.len() {
            let mut bad = pb.to_vec();
            bad[i] ^= 0xa5;
            if let Err(e) = decode(&bad, *default) {
                assert!(matches!(e.code, 400 | 415), "{}", e.message);
            }
        }
    }
}
