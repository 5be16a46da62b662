//! The in-memory backend's arms: a DevCluster gets a port and its endpoint, a DevMachine its
//! phases, and the objects they make are served to a client of the workload cluster.
use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    ByteString,
    api::core::v1::{Node, Pod, Secret},
};
use kube::{Api, Client, api::ListParams};
use rustls::pki_types::{CertificateDer, pem::PemObject};
use serde_json::{Value, json};

use super::scenario::{self as sc, Scenario, condition, condition_message};
use crate::{
    api::dev,
    capi::Machine,
    controllers::{docker_cluster, docker_machine, wiring},
    inmemory::certs::tests::{RSA_PKCS1, ca_cert},
};

/// A port nothing listens on now (the kernel's pick, released at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A CA Secret KCP makes (`<cluster>-ca`, `<cluster>-etcd`).
fn ca_secret(name: &str, ca_pem: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.to_string());
    s.data = Some(
        [
            (
                "tls.crt".to_string(),
                ByteString(ca_pem.as_bytes().to_vec()),
            ),
            ("tls.key".to_string(), ByteString(RSA_PKCS1.to_vec())),
        ]
        .into(),
    );
    s
}

/// A client of the workload cluster at 127.0.0.1:`port`, trusting the cluster CA.
fn workload(port: u16, ca_pem: &str) -> Client {
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
    config.root_cert = Some(vec![
        CertificateDer::from_pem_slice(ca_pem.as_bytes())
            .unwrap()
            .to_vec(),
    ]);
    config.read_timeout = Some(Duration::from_secs(10));
    Client::try_from(config).unwrap()
}

fn status(obj: &Value, type_: &str) -> Option<String> {
    condition(obj, type_).map(|c| c.0)
}

#[tokio::test]
async fn a_dev_cluster_gets_a_port_of_the_range_and_is_provisioned() {
    let port = free_port();
    let s = Scenario::dev_in_memory((port, port));
    s.put(sc::cluster("c", "DevCluster"));
    let dc = s.put(sc::dev_cluster("c", json!({"inMemory": {}})));

    // Through the manager's own route: the view's backend mark picks the in-memory reconciler.
    wiring::reconcile_cluster(Arc::new(dc.view_serving(true)), s.ctx.clone())
        .await
        .unwrap();

    let dc = s.json::<dev::DevCluster>("c");
    assert_eq!(
        dc["spec"]["controlPlaneEndpoint"],
        json!({"host": "127.0.0.1", "port": port})
    );
    assert_eq!(dc["status"]["initialization"]["provisioned"], true);
    assert_eq!(status(&dc, "Ready").as_deref(), Some("True"));
    assert!(condition(&dc, "LoadBalancerAvailable").is_none(), "no LB");
    assert_eq!(
        dc["metadata"]["annotations"]["inmemorycluster.infrastructure.cluster.x-k8s.io/listener"],
        "ns/c"
    );
    assert!(s.engine.created().is_empty(), "no container");
    // Three writes, each one more reconcile of the Cluster by CAPI: the finalizer, the
    // listener's name with the endpoint, the status.
    let writes = |suffix: &str| {
        s.api
            .requests()
            .iter()
            .filter(|r| r.is(&http::Method::PATCH, suffix))
            .count()
    };
    assert_eq!(
        (writes("/devclusters/c"), writes("/devclusters/c/status")),
        (2, 1)
    );

    // A second cluster finds the range exhausted: Ready says so, nothing is written.
    s.put(sc::cluster("d", "DevCluster"));
    let other = s.put(sc::dev_cluster("d", json!({"inMemory": {}})));
    s.reconcile::<docker_cluster::InMemoryClusters>(other.view_serving(true))
        .await
        .unwrap();
    let other = s.json::<dev::DevCluster>("d");
    assert_eq!(
        condition(&other, "Ready"),
        Some(("False".into(), "PortRangeExhausted".into()))
    );
    assert!(other["spec"]["controlPlaneEndpoint"]["host"].is_null());
}

#[tokio::test]
async fn a_control_plane_dev_machine_without_delays_comes_up_in_one_reconcile_and_goes() {
    let port = free_port();
    let s = Scenario::dev_in_memory((port, port));
    let ca = ca_cert(RSA_PKCS1);
    s.put(sc::cluster("c", "DevCluster"));
    s.put(sc::machine("c", "m", "DevMachine", true));
    s.put(ca_secret("c-ca", &ca));
    s.put(ca_secret("c-etcd", &ca));
    let mut dc = sc::dev_cluster("c", json!({"inMemory": {}}));
    dc.spec.control_plane_endpoint = Some(crate::api::ApiEndpoint {
        host: Some("127.0.0.1".into()),
        port: Some(i32::from(port)),
    });
    let dc = s.put(dc);
    let mut dm = sc::dev_machine("c", "m", json!({"inMemory": {}}));
    dm.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(crate::capi::CONTROL_PLANE_LABEL.into(), String::new());
    let dm = s.put(dm);

    // Through the manager's own route, as the DevCluster above.
    wiring::reconcile_machine(Arc::new(dm.view_serving(true)), s.ctx.clone())
        .await
        .unwrap();

    let stored = s.json::<dev::DevMachine>("m");
    assert_eq!(stored["spec"]["providerID"], "in-memory://m");
    assert!(
        s.engine.created().is_empty(),
        "a simulated machine has no container"
    );
    for t in [
        "VMProvisioned",
        "NodeProvisioned",
        "EtcdProvisioned",
        "APIServerProvisioned",
        "Ready",
    ] {
        assert_eq!(status(&stored, t).as_deref(), Some("True"), "{t}");
    }
    assert!(condition(&stored, "ContainerProvisioned").is_none());
    assert_eq!(stored["status"]["initialization"]["provisioned"], true);
    let machine = s.json::<Machine>("m");
    assert!(
        machine["metadata"]["annotations"]
            .get("machine.inmemory.infrastructure.cluster.x-k8s.io/bootstrapped")
            .is_some(),
        "{machine}"
    );
    assert!(s.engine.created().is_empty(), "no container");

    // The workload cluster, as CAPI reaches it at the endpoint.
    let client = workload(port, &ca);
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let ids: Vec<_> = nodes
        .items
        .iter()
        .map(|n| n.spec.as_ref().unwrap().provider_id.clone().unwrap())
        .collect();
    assert_eq!(ids, ["in-memory://m"]);
    let pods = Api::<Pod>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default().labels("tier=control-plane"))
        .await
        .unwrap();
    let mut names: Vec<_> = pods
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "etcd-m",
            "kube-apiserver-m",
            "kube-controller-manager-m",
            "kube-scheduler-m"
        ]
    );

    // The etcd Pod is the member KCP will find through port-forward: it leads, alone.
    let members = crate::inmemory::etcd::members(&s.ctx.in_memory.as_ref().unwrap().group("ns/c"));
    assert_eq!(members.len(), 1);
    assert_eq!(
        crate::inmemory::etcd::leader(&members).map(|m| m.name.as_str()),
        Some("m")
    );

    // Deleting the machine takes its Node and Pods away; deleting the cluster, the listener.
    let dm = s.delete::<dev::DevMachine>("m");
    s.reconcile::<docker_machine::InMemoryMachines>(dm.view_serving(true))
        .await
        .unwrap();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(nodes.items.is_empty());
    s.put(dc.clone());
    let dc = s.delete::<dev::DevCluster>("c");
    s.reconcile::<docker_cluster::InMemoryClusters>(dc.view_serving(true))
        .await
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "the listener is closed"
    );
    let cloud = s.ctx.in_memory.as_ref().unwrap();
    assert!(
        cloud.tracked().iter().all(|(_, n)| *n == 0),
        "{:?}",
        cloud.tracked()
    );
}

#[tokio::test]
async fn a_phase_waits_its_startup_duration() {
    let s = Scenario::dev_in_memory((free_port(), free_port()));
    s.put(sc::cluster("c", "DevCluster"));
    s.put(sc::machine("c", "w", "DevMachine", false));
    let dm = s.put(sc::dev_machine(
        "c",
        "w",
        json!({"inMemory": {"vm": {"provisioning": {"startupDuration": "30s"}}}}),
    ));

    let action = s
        .reconcile::<docker_machine::InMemoryMachines>(dm.view_serving(true))
        .await
        .unwrap();

    let stored = s.json::<dev::DevMachine>("w");
    assert_eq!(
        condition(&stored, "VMProvisioned"),
        Some(("False".into(), "WaitingForStartupTimeout".into()))
    );
    assert_eq!(
        condition(&stored, "NodeProvisioned"),
        Some(("False".into(), "WaitingForVMProvisioned".into()))
    );
    assert!(condition(&stored, "EtcdProvisioned").is_none(), "a worker");
    assert_eq!(status(&stored, "Ready").as_deref(), Some("False"));
    assert!(stored["spec"]["providerID"].is_null());
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(30)),
        "looks again when the VM is due (no jitter)"
    );
}

#[tokio::test]
async fn a_bad_in_memory_spec_is_reported_not_acted_on() {
    let s = Scenario::dev_in_memory((free_port(), free_port()));
    s.put(sc::cluster("c", "DevCluster"));
    s.put(sc::machine("c", "w", "DevMachine", false));
    let dm = s.put(sc::dev_machine(
        "c",
        "w",
        json!({"inMemory": {"vm": {"provisioning": {"startupDuration": "10 parsecs"}}}}),
    ));
    s.reconcile::<docker_machine::InMemoryMachines>(dm.view_serving(true))
        .await
        .unwrap();
    let stored = s.json::<dev::DevMachine>("w");
    let (st, reason) = condition(&stored, "VMProvisioned").unwrap();
    assert_eq!((st.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(stored["spec"]["providerID"].is_null());
}

#[tokio::test]
async fn the_clusters_endpoint_wins_over_a_port_put_back_on_the_dev_cluster() {
    // CAPI copied 127.0.0.1:<port> to the Cluster; a ClusterClass's topology then put its
    // template's defaulted 6443 back on the DevCluster. The served port stays the Cluster's, and
    // the DevCluster's endpoint is not written again (no fight with the topology controller).
    let port = free_port();
    let s = Scenario::dev_in_memory((port, port));
    let dc = copied_endpoint(&s, "127.0.0.1", port);
    let dc = s.put(dc);

    s.reconcile::<docker_cluster::InMemoryClusters>(dc.view_serving(true))
        .await
        .unwrap();

    let stored = s.json::<dev::DevCluster>("c");
    assert_eq!(
        stored["spec"]["controlPlaneEndpoint"]["port"], 6443,
        "not written"
    );
    assert_eq!(stored["status"]["initialization"]["provisioned"], true);
    let cloud = s.ctx.in_memory.as_ref().unwrap();
    assert_eq!(
        cloud.reserve_port("ns/c", crate::inmemory::phases::PortRequest::Allocate),
        crate::inmemory::phases::PortAllocation::Port(port),
        "the Cluster's port is the one reserved"
    );
}

#[tokio::test]
async fn a_moved_manager_writes_its_host_once_and_keeps_the_clusters_port() {
    // Provisioned by a manager on another address: the DevCluster's host follows this one, with
    // the Cluster's port, once (the Cluster keeps the old host: no loop on it).
    let (s, dc, port) = provisioned_elsewhere("10.0.0.9");

    let first = s
        .reconcile::<docker_cluster::InMemoryClusters>(dc.view_serving(true))
        .await
        .unwrap();
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(1))
    );
    let moved = s.get::<dev::DevCluster>("c").unwrap();
    assert_eq!(
        moved.spec.control_plane_endpoint,
        Some(crate::api::ApiEndpoint {
            host: Some("127.0.0.1".into()),
            port: Some(i32::from(port)),
        })
    );
    let second = s
        .reconcile::<docker_cluster::InMemoryClusters>(moved.view_serving(true))
        .await
        .unwrap();
    assert_ne!(
        second,
        kube::runtime::controller::Action::requeue(Duration::from_secs(1)),
        "moved once, then settled"
    );
}

#[tokio::test]
async fn a_moved_manager_moves_the_kubeconfigs_server_before_the_host() {
    // The kubeconfig CAPI wrote names the old address: its server follows the move (as upstream),
    // the rest of the file is kept, and a second pass writes nothing more.
    let (s, dc, port) = provisioned_elsewhere("10.0.0.9");
    let old = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.9:{port}\n    certificate-authority-data: Q0E=\ncontexts:\n- name: c-admin@c\n  context: {{cluster: c, user: c-admin}}\ncurrent-context: c-admin@c\nusers:\n- name: c-admin\n  user: {{client-key-data: S0VZ}}\n"
    );
    put_kubeconfig(&s, old.into_bytes());

    s.reconcile::<docker_cluster::InMemoryClusters>(dc.view_serving(true))
        .await
        .unwrap();
    let value = s.get::<Secret>("c-kubeconfig").unwrap().data.unwrap()["value"].clone();
    let moved: Value = serde_yaml_ng::from_slice(&value.0).unwrap();
    assert_eq!(
        moved["clusters"][0]["cluster"]["server"],
        format!("https://127.0.0.1:{port}")
    );
    assert_eq!(
        moved["clusters"][0]["cluster"]["certificate-authority-data"],
        "Q0E="
    );
    assert_eq!(moved["users"][0]["user"]["client-key-data"], "S0VZ");
    let host = s
        .get::<dev::DevCluster>("c")
        .unwrap()
        .spec
        .control_plane_endpoint;
    assert_eq!(host.and_then(|e| e.host).as_deref(), Some("127.0.0.1"));

    let patches = |s: &Scenario| {
        s.api
            .requests()
            .iter()
            .filter(|r| {
                r.method == http::Method::PATCH && r.path.ends_with("/secrets/c-kubeconfig")
            })
            .count()
    };
    assert_eq!(patches(&s), 1);
    let again = s.get::<dev::DevCluster>("c").unwrap();
    s.reconcile::<docker_cluster::InMemoryClusters>(again.view_serving(true))
        .await
        .unwrap();
    assert_eq!(patches(&s), 1, "settled: the Secret is written once");
}

#[tokio::test]
async fn a_kubeconfig_that_cannot_be_read_keeps_the_old_host_and_says_why() {
    let (s, dc, _) = provisioned_elsewhere("10.0.0.9");
    put_kubeconfig(&s, b"not: [yaml".to_vec());

    s.reconcile::<docker_cluster::InMemoryClusters>(dc.view_serving(true))
        .await
        .unwrap();
    let after = s.get::<dev::DevCluster>("c").unwrap();
    assert_eq!(
        after
            .spec
            .control_plane_endpoint
            .and_then(|e| e.host)
            .as_deref(),
        Some("10.0.0.9"),
        "the host waits for the kubeconfig"
    );
    let stored = s.json::<dev::DevCluster>("c");
    assert_eq!(
        condition(&stored, "Ready"),
        Some(("False".into(), "WorkloadKubeconfigRefused".into()))
    );
    let message = condition_message(&stored, "Ready").unwrap();
    assert!(message.contains("not a kubeconfig"), "{message}");
    assert!(
        !message.contains("[yaml"),
        "the value is never quoted: {message}"
    );
}

/// An in-memory DevCluster provisioned by a manager on `host` (its endpoint copied to the
/// Cluster), stored in a scenario whose manager listens on 127.0.0.1: a moved manager.
fn provisioned_elsewhere(host: &str) -> (Scenario, dev::DevCluster, u16) {
    let port = free_port();
    let s = Scenario::dev_in_memory((port, port));
    let mut dc = copied_endpoint(&s, host, port);
    dc.status = Some(crate::api::DockerClusterStatus {
        initialization: Some(crate::api::Initialization {
            provisioned: Some(true),
        }),
        ..Default::default()
    });
    let dc = s.put(dc);
    (s, dc, port)
}

/// Cluster `c`'s `c-kubeconfig` Secret, holding `value`.
fn put_kubeconfig(s: &Scenario, value: Vec<u8>) {
    let mut secret = Secret::default();
    secret.metadata.name = Some("c-kubeconfig".into());
    secret.data = Some([("value".to_string(), ByteString(value))].into());
    s.put(secret);
}

/// Cluster `c` whose endpoint CAPI copied (`host`:`port`), and its in-memory DevCluster, which
/// a topology has since given back the defaulted port 6443 (not stored yet: the caller may add
/// a status).
fn copied_endpoint(s: &Scenario, host: &str, port: u16) -> dev::DevCluster {
    let mut cluster = sc::cluster("c", "DevCluster");
    cluster.spec.control_plane_endpoint = Some(crate::capi::Endpoint {
        host: Some(host.into()),
        port: Some(i32::from(port)),
    });
    s.put(cluster);
    let mut dc = sc::dev_cluster("c", json!({"inMemory": {}}));
    dc.spec.control_plane_endpoint = Some(crate::api::ApiEndpoint {
        host: Some(host.into()),
        port: Some(6443),
    });
    dc
}
