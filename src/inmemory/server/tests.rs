//! The fake API server driven by a real kube-rs client over TLS, trusting only a test cluster
//! CA with a PKCS#1 RSA key (as CAPI writes the `<cluster>-ca` Secret).
use std::{sync::Arc, time::Duration};

use futures::{StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::{
    Api, Client, Discovery, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
    runtime::watcher,
};
use rustls::pki_types::{CertificateDer, pem::PemObject};
use serde_json::json;

use super::Listener;
use crate::inmemory::{
    certs::{self, tests::RSA_PKCS1, tests::ca_cert},
    store::{Limits, Store},
};

struct Fake {
    client: Client,
    _listener: Listener,
}

async fn start_with(limits: Limits) -> Fake {
    let store = Store::new(limits);
    let group = store.group("default/c1");
    let ca = ca_cert(RSA_PKCS1);
    let tls = certs::serving_config(ca.as_bytes(), RSA_PKCS1, &[]).unwrap();
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), tls, group)
        .await
        .unwrap();
    let url = format!("https://127.0.0.1:{}", listener.local_addr().port());
    let mut config = kube::Config::new(url.parse().unwrap());
    config.root_cert = Some(vec![
        CertificateDer::from_pem_slice(ca.as_bytes())
            .unwrap()
            .to_vec(),
    ]);
    config.read_timeout = Some(Duration::from_secs(20));
    Fake {
        client: Client::try_from(config).unwrap(),
        _listener: listener,
    }
}

async fn start() -> Fake {
    start_with(Limits::default()).await
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"a": "1"}},
        "spec": {"providerID": format!("in-memory://{name}")},
    }))
    .unwrap()
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other:?}"),
    }
}

/// A raw request: its status code and body (for what kube's typed API does not send).
async fn raw(client: &Client, req: http::Request<Vec<u8>>) -> (u16, serde_json::Value) {
    let res = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let body =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)));
    (status, body)
}

#[tokio::test]
async fn health_probe_and_discovery() {
    let fake = start().await;
    let (status, _) = raw(&fake.client, http::Request::get("/").body(vec![]).unwrap()).await;
    assert_eq!(status, 200);
    let (status, body) = raw(
        &fake.client,
        http::Request::get("/healthz").body(vec![]).unwrap(),
    )
    .await;
    assert_eq!((status, body), (200, json!("ok")));
    let discovery = Discovery::new(fake.client.clone()).run().await.unwrap();
    let (node, caps) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "Node"))
        .expect("Node is discovered");
    assert_eq!(node.plural, "nodes");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(
        caps.subresources
            .iter()
            .any(|(r, _)| r.plural == "nodes/status" || r.plural == "status")
    );
    let (crb, caps) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
        ))
        .expect("ClusterRoleBinding is discovered");
    assert_eq!(crb.plural, "clusterrolebindings");
    assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
    let version = fake.client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
}

#[tokio::test]
async fn nodes_and_configmaps_round_trip() {
    let fake = start().await;
    let nodes: Api<Node> = Api::all(fake.client.clone());
    let created = nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    let rv1 = created.metadata.resource_version.clone().unwrap();
    assert_eq!(
        code(
            nodes
                .create(&PostParams::default(), &node("n1"))
                .await
                .unwrap_err()
        ),
        409
    );
    assert_eq!(
        nodes.get("n1").await.unwrap().metadata.uid,
        created.metadata.uid
    );
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Strategic merge patch with the resourceVersion as optimistic lock (CAPI's Node sync).
    let smp = json!({"metadata": {"resourceVersion": rv1, "labels": {"node.cluster.x-k8s.io/pool": "p"}},
                     "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
    let patched = nodes
        .patch("n1", &PatchParams::default(), &Patch::Strategic(&smp))
        .await
        .unwrap();
    assert_eq!(
        patched.labels().get("node.cluster.x-k8s.io/pool").unwrap(),
        "p"
    );
    assert_eq!(patched.labels().get("a").unwrap(), "1");
    assert_eq!(
        patched
            .spec
            .as_ref()
            .unwrap()
            .taints
            .as_ref()
            .unwrap()
            .len(),
        1
    );
    // The same patch again carries a stale resourceVersion.
    let stale = nodes
        .patch("n1", &PatchParams::default(), &Patch::Strategic(&smp))
        .await
        .unwrap_err();
    assert_eq!(code(stale), 409);
    // A PUT of the object as first read: stale too.
    assert_eq!(
        code(
            nodes
                .replace("n1", &PostParams::default(), &created)
                .await
                .unwrap_err()
        ),
        409
    );
    let cordon = json!({"spec": {"unschedulable": true}});
    let cordoned = nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(&cordon))
        .await
        .unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true));
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}
    ]))
    .unwrap();
    let annotated = nodes
        .patch("n1", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(annotated.annotations().get("x").unwrap(), "y");
    // Status through its subresource.
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let status = nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().conditions.unwrap()[0].type_, "Ready");

    let cms: Api<ConfigMap> = Api::namespaced(fake.client.clone(), "kube-system");
    let mut cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "kubeadm-config"}, "data": {"ClusterConfiguration": ""}
    }))
    .unwrap();
    let made = cms.create(&PostParams::default(), &cm).await.unwrap();
    cm.metadata.resource_version = made.metadata.resource_version.clone();
    cm.data = Some([("ClusterConfiguration".to_string(), "kind: X".to_string())].into());
    let replaced = cms
        .replace("kubeadm-config", &PostParams::default(), &cm)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["ClusterConfiguration"], "kind: X");
    assert_eq!(
        code(
            cms.replace("kubeadm-config", &PostParams::default(), &cm)
                .await
                .unwrap_err()
        ),
        409
    );
    let other_ns: Api<ConfigMap> = Api::namespaced(fake.client.clone(), "default");
    assert_eq!(code(other_ns.get("kubeadm-config").await.unwrap_err()), 404);
    let all: Api<ConfigMap> = Api::all(fake.client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    cms.delete("kubeadm-config", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(code(cms.get("kubeadm-config").await.unwrap_err()), 404);
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(nodes.get("n1").await.unwrap_err()), 404);
    assert_eq!(
        code(
            nodes
                .delete("n1", &DeleteParams::default())
                .await
                .unwrap_err()
        ),
        404
    );
}

#[tokio::test]
async fn lists_page_and_select() {
    let fake = start().await;
    let nodes: Api<Node> = Api::all(fake.client.clone());
    for i in 0..5 {
        let mut n = node(&format!("n{i}"));
        if i < 2 {
            n.metadata.labels.as_mut().unwrap().insert(
                "node-role.kubernetes.io/control-plane".into(),
                String::new(),
            );
        }
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    let first = nodes.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let rest = nodes
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    let names: Vec<_> = rest
        .items
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["n2", "n3", "n4"]);
    assert!(rest.metadata.continue_.is_none());
    let cp = nodes
        .list(&ListParams::default().labels("node-role.kubernetes.io/control-plane"))
        .await
        .unwrap();
    assert_eq!(cp.items.len(), 2);
    let one = nodes
        .list(&ListParams::default().fields("metadata.name=n3"))
        .await
        .unwrap();
    assert_eq!(one.items[0].metadata.name.as_deref(), Some("n3"));
    let bad = nodes
        .list(&ListParams::default().labels("a in (b"))
        .await
        .unwrap_err();
    assert_eq!(code(bad), 400);
    let bad = nodes
        .list(&ListParams::default().continue_token("!!"))
        .await
        .unwrap_err();
    assert_eq!(code(bad), 400);
}

/// The next watcher event, skipping none, within a few seconds.
async fn next<S: futures::Stream<Item = Result<watcher::Event<Node>, watcher::Error>> + Unpin>(
    stream: &mut S,
) -> watcher::Event<Node> {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .expect("no watcher error")
}

async fn watcher_sees_added_modified_deleted(config: watcher::Config) {
    let fake = start().await;
    let nodes: Api<Node> = Api::all(fake.client.clone());
    nodes
        .create(&PostParams::default(), &node("before"))
        .await
        .unwrap();
    let mut stream = watcher(nodes.clone(), config).boxed();
    assert!(matches!(next(&mut stream).await, watcher::Event::Init));
    match next(&mut stream).await {
        watcher::Event::InitApply(n) => assert_eq!(n.metadata.name.as_deref(), Some("before")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(next(&mut stream).await, watcher::Event::InitDone));

    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    match next(&mut stream).await {
        watcher::Event::Apply(n) => assert_eq!(n.metadata.name.as_deref(), Some("n1")),
        other => panic!("{other:?}"),
    }
    let label = json!({"metadata": {"labels": {"b": "2"}}});
    nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    match next(&mut stream).await {
        watcher::Event::Apply(n) => assert_eq!(n.labels().get("b").map(String::as_str), Some("2")),
        other => panic!("{other:?}"),
    }
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    match next(&mut stream).await {
        watcher::Event::Delete(n) => assert_eq!(n.metadata.name.as_deref(), Some("n1")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn watcher_with_list_then_watch() {
    watcher_sees_added_modified_deleted(watcher::Config::default()).await;
}

#[tokio::test]
async fn watcher_with_watch_list() {
    watcher_sees_added_modified_deleted(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test]
async fn watch_list_ends_its_initial_events_with_the_annotated_bookmark() {
    let fake = start().await;
    let nodes: Api<Node> = Api::all(fake.client.clone());
    for name in ["a", "b"] {
        nodes
            .create(&PostParams::default(), &node(name))
            .await
            .unwrap();
    }
    let params = WatchParams::streaming_lists().timeout(5);
    let events: Vec<_> = nodes
        .watch(&params, "")
        .await
        .unwrap()
        .take(3)
        .try_collect()
        .await
        .unwrap();
    assert!(matches!(&events[0], WatchEvent::Added(n) if n.metadata.name.as_deref() == Some("a")));
    assert!(matches!(&events[1], WatchEvent::Added(n) if n.metadata.name.as_deref() == Some("b")));
    match &events[2] {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.annotations["k8s.io/initial-events-end"], "true");
            let list = nodes.list(&ListParams::default()).await.unwrap();
            assert_eq!(
                Some(&b.metadata.resource_version),
                list.metadata.resource_version.as_ref()
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_a_forgotten_resource_version_is_gone() {
    let fake = start_with(Limits {
        ring_events: 4,
        ..Limits::default()
    })
    .await;
    let nodes: Api<Node> = Api::all(fake.client.clone());
    let first = nodes
        .create(&PostParams::default(), &node("n0"))
        .await
        .unwrap();
    for i in 1..10 {
        nodes
            .create(&PostParams::default(), &node(&format!("n{i}")))
            .await
            .unwrap();
    }
    let old = first.metadata.resource_version.unwrap();
    // As the API server's watch cache: the watch starts, and its one event is the 410.
    let events: Vec<_> = nodes
        .watch(&WatchParams::default(), &old)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    match events.as_slice() {
        [WatchEvent::Error(e)] => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("{other:?}"),
    }
    // A recent one resumes: the events after it, then the timeout ends the stream.
    let list = nodes.list(&ListParams::default()).await.unwrap();
    let recent = (list
        .metadata
        .resource_version
        .unwrap()
        .parse::<u64>()
        .unwrap()
        - 2)
    .to_string();
    let events: Vec<_> = nodes
        .watch(&WatchParams::default().timeout(1), &recent)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let names: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Added(n) => n.metadata.name.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["n8", "n9"]);
}

#[tokio::test]
async fn bad_requests_get_a_status_not_a_hang() {
    let fake = start().await;
    let c = &fake.client;
    let req = |method: &str, path: &str, ct: Option<&str>, body: Vec<u8>| {
        let mut b = http::Request::builder().method(method).uri(path);
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        b.body(body).unwrap()
    };
    let cases: Vec<(http::Request<Vec<u8>>, u16, &str)> = vec![
        (req("GET", "/api/v1/widgets", None, vec![]), 404, "NotFound"),
        (req("GET", "/nope", None, vec![]), 404, "NotFound"),
        (req("GET", "/apis/apps/v9", None, vec![]), 404, "NotFound"),
        (req("GET", "/api/v1/pods/p", None, vec![]), 404, "NotFound"),
        (
            req("GET", "/api/v1/nodes/n/proxy", None, vec![]),
            404,
            "NotFound",
        ),
        (
            req("DELETE", "/api/v1/nodes", None, vec![]),
            405,
            "MethodNotAllowed",
        ),
        (
            req(
                "POST",
                "/api/v1/configmaps",
                Some("application/json"),
                b"{}".to_vec(),
            ),
            405,
            "MethodNotAllowed",
        ),
        (req("POST", "/api", None, vec![]), 405, "MethodNotAllowed"),
        (
            req(
                "POST",
                "/api/v1/nodes",
                Some("application/vnd.kubernetes.protobuf"),
                vec![0x6b, 0x38, 0x73, 0],
            ),
            400,
            "BadRequest",
        ),
        (
            req(
                "POST",
                "/api/v1/nodes",
                Some("application/yaml"),
                b"{}".to_vec(),
            ),
            415,
            "UnsupportedMediaType",
        ),
        (
            req(
                "POST",
                "/api/v1/nodes",
                Some("application/json"),
                b"{not json".to_vec(),
            ),
            400,
            "BadRequest",
        ),
        (
            req(
                "POST",
                "/api/v1/nodes",
                Some("application/json"),
                b"[]".to_vec(),
            ),
            400,
            "BadRequest",
        ),
        (
            req(
                "POST",
                "/api/v1/nodes",
                Some("application/json"),
                vec![b' '; super::MAX_BODY + 1],
            ),
            413,
            "RequestEntityTooLarge",
        ),
        (
            req(
                "PATCH",
                "/api/v1/nodes/n",
                Some("application/apply-patch+yaml"),
                b"{}".to_vec(),
            ),
            415,
            "UnsupportedMediaType",
        ),
        (
            req(
                "GET",
                "/api/v1/nodes?watch=true&sendInitialEvents=true",
                None,
                vec![],
            ),
            400,
            "BadRequest",
        ),
        (
            req(
                "GET",
                "/api/v1/nodes?watch=true&resourceVersion=abc",
                None,
                vec![],
            ),
            400,
            "BadRequest",
        ),
        (
            req("GET", "/api/v1/nodes?limit=-1", None, vec![]),
            400,
            "BadRequest",
        ),
        (
            req(
                "GET",
                "/api/v1/pods?fieldSelector=status.phase%3DRunning",
                None,
                vec![],
            ),
            400,
            "BadRequest",
        ),
    ];
    for (request, want, reason) in cases {
        let what = format!("{} {}", request.method(), request.uri());
        let (status, body) = tokio::time::timeout(Duration::from_secs(10), raw(c, request))
            .await
            .unwrap_or_else(|_| panic!("{what} hung"));
        assert_eq!(status, want, "{what}: {body}");
        assert_eq!(body["kind"], "Status", "{what}: {body}");
        assert_eq!(body["reason"], reason, "{what}: {body}");
        assert_eq!(body["code"], want, "{what}: {body}");
    }
}

#[tokio::test]
async fn a_stopped_listener_refuses_connections() {
    let store = Arc::new(Store::default());
    let ca = ca_cert(RSA_PKCS1);
    let tls = certs::serving_config(ca.as_bytes(), RSA_PKCS1, &[]).unwrap();
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), tls, store.group("g"))
        .await
        .unwrap();
    let addr = listener.local_addr();
    drop(listener);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_selective_watch_sees_objects_enter_and_leave_its_selection() {
    let fake = start().await;
    let in_ns: Api<ConfigMap> = Api::namespaced(fake.client.clone(), "kube-system");
    let elsewhere: Api<ConfigMap> = Api::namespaced(fake.client.clone(), "default");
    let rv = in_ns
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let params = WatchParams::default()
        .labels("tier=control-plane")
        .timeout(2);
    let stream = in_ns.watch(&params, &rv).await.unwrap();
    let cm = |name: &str, tier: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"tier": tier}}}))
            .unwrap()
    };
    // Not seen: another namespace, another tier.
    elsewhere
        .create(&PostParams::default(), &cm("x", "control-plane"))
        .await
        .unwrap();
    in_ns
        .create(&PostParams::default(), &cm("worker", "node"))
        .await
        .unwrap();
    in_ns
        .create(&PostParams::default(), &cm("cp", "control-plane"))
        .await
        .unwrap();
    for (name, tier) in [("worker", "control-plane"), ("cp", "node")] {
        let p = json!({"metadata": {"labels": {"tier": tier}}});
        in_ns
            .patch(name, &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap();
    }
    let seen: Vec<String> = stream
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e {
            WatchEvent::Added(c) => Some(format!("ADDED {}", c.name_any())),
            WatchEvent::Modified(c) => Some(format!("MODIFIED {}", c.name_any())),
            WatchEvent::Deleted(c) => Some(format!("DELETED {}", c.name_any())),
            _ => None,
        })
        .collect();
    assert_eq!(seen, ["ADDED cp", "ADDED worker", "DELETED cp"]);
}

mod protobuf {
    //! Protobuf bodies as client-go sends them (the fixtures of `inmemory::protobuf`), through
    //! the listener: written, then read back as JSON.
    use k8s_openapi::api::{core::v1::Secret, rbac::v1::ClusterRoleBinding};
    use k8s_pb::{api::core::v1 as pb, apimachinery::pkg::runtime::Unknown};
    use prost::Message;

    use super::*;

    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

    macro_rules! pb {
        ($name:literal) => {
            &include_bytes!(concat!("../testdata/protobuf/", $name, ".pb"))[..]
        };
    }

    fn request(method: &str, path: &str, body: &[u8]) -> http::Request<Vec<u8>> {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", PROTOBUF)
            .body(body.to_vec())
            .unwrap()
    }

    /// A fixture with its object's metadata changed (the stored object's uid and
    /// resourceVersion), re-encoded as client-go frames it.
    fn edited<M: Message + Default>(
        fixture: &[u8],
        meta: impl FnOnce(&mut M) -> &mut Option<k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
        uid: &str,
        rv: &str,
    ) -> Vec<u8> {
        let mut envelope = Unknown::decode(&fixture[4..]).unwrap();
        let mut object = M::decode(envelope.raw.as_deref().unwrap()).unwrap();
        let m = meta(&mut object).as_mut().unwrap();
        m.uid = Some(uid.into());
        m.resource_version = Some(rv.into());
        envelope.raw = Some(object.encode_to_vec());
        let mut out = b"k8s\0".to_vec();
        out.extend(envelope.encode_to_vec());
        out
    }

    async fn send(c: &Client, req: http::Request<Vec<u8>>) -> (u16, serde_json::Value) {
        let what = format!("{} {}", req.method(), req.uri());
        let (status, body) = tokio::time::timeout(Duration::from_secs(10), raw(c, req))
            .await
            .unwrap_or_else(|_| panic!("{what} hung"));
        (status, body)
    }

    #[tokio::test]
    async fn created_objects_read_back_as_json() {
        let fake = start().await;
        let c = &fake.client;
        let (status, body) = send(
            c,
            request(
                "POST",
                "/api/v1/namespaces/kube-system/secrets",
                pb!("secret-create"),
            ),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let secret = Api::<Secret>::namespaced(c.clone(), "kube-system")
            .get("bootstrap-token-abcdef")
            .await
            .unwrap();
        assert_eq!(
            secret.type_.as_deref(),
            Some("bootstrap.kubernetes.io/token")
        );
        let data = secret.data.unwrap();
        assert_eq!(data["token-id"].0, b"abcdef");
        assert_eq!(data["token-secret"].0, b"0123456789abcdef");
        assert_eq!(secret.immutable, Some(true));

        let (status, body) = send(
            c,
            request(
                "POST",
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                pb!("clusterrolebinding-create"),
            ),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let crb = Api::<ClusterRoleBinding>::all(c.clone())
            .get("kubeadm:cluster-admins")
            .await
            .unwrap();
        assert_eq!(crb.role_ref.name, "cluster-admin");
        assert_eq!(crb.role_ref.kind, "ClusterRole");
        let subjects = crb.subjects.unwrap();
        assert_eq!(subjects[0].name, "kubeadm:cluster-admins");
        assert_eq!(subjects[1].namespace.as_deref(), Some("kube-system"));

        // A second create of the same Secret: the store's answer, not the decoder's.
        let (status, body) = send(
            c,
            request(
                "POST",
                "/api/v1/namespaces/kube-system/secrets",
                pb!("secret-create"),
            ),
        )
        .await;
        assert_eq!(
            (status, &body["reason"]),
            (409, &json!("AlreadyExists")),
            "{body}"
        );
    }

    #[tokio::test]
    async fn updates_read_back_as_json_and_keep_the_optimistic_lock() {
        let fake = start().await;
        let c = &fake.client;
        let cms = Api::<ConfigMap>::namespaced(c.clone(), "kube-system");
        let stored = cms
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "kubeadm-config"}, "data": {"ClusterConfiguration": ""}}))
                    .unwrap(),
            )
            .await
            .unwrap();
        let path = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config";
        // The fixture as captured carries resourceVersion 42: stale here, so a 409.
        let (status, body) = send(c, request("PUT", path, pb!("configmap-update"))).await;
        assert_eq!(
            (status, &body["reason"]),
            (409, &json!("Conflict")),
            "{body}"
        );
        let body = edited::<pb::ConfigMap>(
            pb!("configmap-update"),
            |cm| &mut cm.metadata,
            &stored.uid().unwrap(),
            &stored.resource_version().unwrap(),
        );
        let (status, answer) = send(c, request("PUT", path, &body)).await;
        assert_eq!(status, 200, "{answer}");
        let cm = cms.get("kubeadm-config").await.unwrap();
        assert!(
            cm.data.as_ref().unwrap()["ClusterConfiguration"]
                .contains("kind: ClusterConfiguration")
        );
        assert_eq!(
            cm.binary_data.as_ref().unwrap()["blob"].0,
            vec![0x00, 0x01, 0xfe, 0xff]
        );
        assert_eq!(cm.immutable, Some(false));
        assert_eq!(cm.labels()["app.kubernetes.io/managed-by"], "kubeadm");
        assert_eq!(cm.finalizers(), ["example.com/keep"]);
        assert_ne!(cm.resource_version(), stored.resource_version());

        // A Node: its main resource takes the spec and metadata, `status` the status.
        let nodes = Api::<Node>::all(c.clone());
        let stored = nodes
            .create(&PostParams::default(), &node("worker-1"))
            .await
            .unwrap();
        let body = edited::<pb::Node>(
            pb!("node-update"),
            |n| &mut n.metadata,
            &stored.uid().unwrap(),
            &stored.resource_version().unwrap(),
        );
        let (status, answer) = send(c, request("PUT", "/api/v1/nodes/worker-1", &body)).await;
        assert_eq!(status, 200, "{answer}");
        let n = nodes.get("worker-1").await.unwrap();
        let spec = n.spec.clone().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("in-memory://worker-1"));
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(spec.taints.unwrap()[1].effect, "NoExecute");
        assert_eq!(n.annotations()["cluster.x-k8s.io/machine"], "worker-1");
        assert!(
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_none()
        );
        let body = edited::<pb::Node>(
            pb!("node-update"),
            |n| &mut n.metadata,
            &n.uid().unwrap(),
            &n.resource_version().unwrap(),
        );
        let (status, answer) =
            send(c, request("PUT", "/api/v1/nodes/worker-1/status", &body)).await;
        assert_eq!(status, 200, "{answer}");
        let status = nodes.get("worker-1").await.unwrap().status.unwrap();
        assert_eq!(
            status.conditions.unwrap()[0].reason.as_deref(),
            Some("KubeletReady")
        );
        assert_eq!(status.node_info.unwrap().kubelet_version, "v1.35.0");
        assert_eq!(status.capacity.unwrap()["memory"].0, "8Gi");
    }

    #[tokio::test]
    async fn delete_options_are_read_from_protobuf() {
        let fake = start().await;
        let c = &fake.client;
        let nodes = Api::<Node>::all(c.clone());
        nodes
            .create(&PostParams::default(), &node("worker-1"))
            .await
            .unwrap();
        let path = "/api/v1/nodes/worker-1";
        // The fixture's preconditions name another uid: refused, the Node stays.
        let (status, body) = send(c, request("DELETE", path, pb!("delete-options"))).await;
        assert_eq!(
            (status, &body["reason"]),
            (409, &json!("Conflict")),
            "{body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("ResourceVersion in precondition: 17"),
            "{body}"
        );
        let (status, body) = send(c, request("DELETE", path, pb!("delete-dryrun"))).await;
        assert_eq!(status, 400, "{body}");
        nodes.get("worker-1").await.unwrap();
        // controller-runtime's Delete without options.
        let (status, body) = send(c, request("DELETE", path, pb!("delete-empty"))).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(code(nodes.get("worker-1").await.unwrap_err()), 404);
    }

    #[tokio::test]
    async fn eviction_other_kinds_and_malformed_bodies_get_a_status() {
        let fake = start().await;
        let c = &fake.client;
        Api::<Node>::all(c.clone())
            .create(&PostParams::default(), &node("n"))
            .await
            .unwrap();
        let cases: Vec<(http::Request<Vec<u8>>, u16, &str, &str)> = vec![
            // No eviction route: a 404 NotFound, which CAPI's drain reads as "Pod gone".
            (
                request(
                    "POST",
                    "/api/v1/namespaces/default/pods/web-0/eviction",
                    pb!("eviction-create"),
                ),
                404,
                "NotFound",
                "",
            ),
            (
                request(
                    "POST",
                    "/api/v1/namespaces/default/serviceaccounts",
                    pb!("serviceaccount-create"),
                ),
                415,
                "UnsupportedMediaType",
                "ServiceAccount",
            ),
            (
                request(
                    "POST",
                    "/api/v1/namespaces/default/configmaps",
                    b"k8s\0\x0a\xff",
                ),
                400,
                "BadRequest",
                "malformed",
            ),
            (
                request("POST", "/api/v1/namespaces/default/configmaps", b"{}"),
                400,
                "BadRequest",
                "k8s",
            ),
            // A Secret's body at the ConfigMaps' URL: the store sees the kind differ.
            (
                request(
                    "POST",
                    "/api/v1/namespaces/kube-system/configmaps",
                    pb!("secret-create"),
                ),
                400,
                "BadRequest",
                "Secret",
            ),
            (
                request("PUT", "/api/v1/nodes/n", pb!("delete-empty")),
                400,
                "BadRequest",
                "DeleteOptions",
            ),
            (
                request("DELETE", "/api/v1/nodes/n", pb!("node-minimal")),
                400,
                "BadRequest",
                "DeleteOptions",
            ),
        ];
        for (req, want, reason, mentions) in cases {
            let what = format!("{} {}", req.method(), req.uri());
            let (status, body) = send(c, req).await;
            assert_eq!(status, want, "{what}: {body}");
            assert_eq!(body["kind"], "Status", "{what}: {body}");
            assert_eq!(body["reason"], reason, "{what}: {body}");
            assert!(
                body["message"].as_str().unwrap().contains(mentions),
                "{what}: {body}"
            );
        }
    }
}
