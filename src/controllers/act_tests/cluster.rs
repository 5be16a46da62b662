//! DockerCluster: the load-balancer container, the endpoint it gives the cluster, its
//! backends, and its removal.
use std::collections::BTreeMap;

use http::Method;
use serde_json::json;

use super::scenario::{self as sc, Scenario, condition, condition_message, finalizers};
use crate::{
    api::DockerCluster,
    controllers::docker_cluster,
    docker::{ContainerState, haproxy, labels},
};

/// Cluster `c` and its DockerCluster, reconciled once; returns the LB container's IPv4.
async fn cluster_with_lb(s: &Scenario) -> String {
    s.put(sc::cluster("c", "DockerCluster"));
    let dc = s.put(sc::docker_cluster("c"));
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    s.engine
        .container("c-lb")
        .expect("LB created")
        .ipv4
        .unwrap()
}

/// A running control-plane (or worker) node container of cluster `c` in namespace `ns`, as
/// the machine controller labels it.
fn node(s: &Scenario, name: &str, role: &str) -> String {
    let owner = labels::Owner {
        cluster_name: "c",
        cluster_namespace: sc::NS,
        kind: "DockerMachine",
        name,
        uid: &format!("{name}-uid"),
    };
    let c = s.engine.add(
        name,
        labels::container_labels(&owner, role, &BTreeMap::new()),
    );
    c.ipv4.unwrap()
}

fn haproxy_cfg(s: &Scenario) -> String {
    s.engine
        .file("c-lb", haproxy::CONFIG_PATH)
        .expect("haproxy.cfg written")
}

#[tokio::test]
async fn a_docker_cluster_gets_a_labelled_load_balancer_and_its_endpoint() {
    let s = Scenario::docker();
    let ip = cluster_with_lb(&s).await;

    let dc = s.get::<DockerCluster>("c").unwrap();
    let uid = dc.metadata.uid.clone().unwrap();
    let lb = s.engine.container("c-lb").unwrap();
    for (key, value) in [
        (labels::OWNER_KIND, "DockerCluster"),
        (labels::OWNER_NAME, "c"),
        (labels::OWNER_UID, uid.as_str()),
        (labels::KIND_CLUSTER, "c"),
        (labels::CLUSTER_NAMESPACE, sc::NS),
        (labels::KIND_ROLE, labels::ROLE_LOAD_BALANCER),
        (labels::MANAGED_BY, labels::MANAGED_BY_VALUE),
    ] {
        assert_eq!(
            lb.labels.get(key).map(String::as_str),
            Some(value),
            "label {key}"
        );
    }
    assert!(
        s.engine.networks().iter().any(|n| n.name == "kind"),
        "its network is ensured"
    );

    let stored = s.json::<DockerCluster>("c");
    assert_eq!(
        stored["spec"]["controlPlaneEndpoint"],
        json!({"host": ip, "port": 6443})
    );
    assert_eq!(finalizers(&stored), [docker_cluster::FINALIZER]);
    let available = Some(("True".to_string(), "Available".to_string()));
    assert_eq!(condition(&stored, "LoadBalancerAvailable"), available);
    assert_eq!(
        condition(&stored, "Ready").map(|c| c.0),
        Some("True".into())
    );
    assert_eq!(stored["status"]["initialization"]["provisioned"], true);

    // The endpoint is in spec before status says provisioned (CAPI copies it then).
    let requests = s.api.requests();
    let endpoint = requests
        .iter()
        .position(|r| r.is(&Method::PATCH, "/dockerclusters/c"));
    let status = requests
        .iter()
        .position(|r| r.is(&Method::PATCH, "/dockerclusters/c/status"));
    assert!(endpoint.unwrap() < status.unwrap(), "{requests:#?}");
    // The status write is guarded by the resourceVersion it was computed from.
    let status = &requests[status.unwrap()];
    assert!(status.body.as_ref().unwrap()["metadata"]["resourceVersion"].is_string());

    // Again: the same container, no second create.
    let dc = s.get::<DockerCluster>("c").unwrap();
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    assert_eq!(s.engine.created().len(), 1);
    assert_eq!(s.engine.container("c-lb").unwrap().id, lb.id);
}

#[tokio::test]
async fn deleting_a_docker_cluster_removes_its_load_balancer_then_its_finalizer() {
    let s = Scenario::docker();
    cluster_with_lb(&s).await;
    let dc = s.delete::<DockerCluster>("c");

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert_eq!(s.engine.removed(), ["c-lb"]);
    assert!(s.engine.container("c-lb").is_none());
    assert!(
        s.get::<DockerCluster>("c").is_none(),
        "finalizer removed: the object is gone"
    );
    let requests = s.api.requests();
    let unfinalize = requests
        .iter()
        .rev()
        .find(|r| r.is(&Method::PATCH, "/dockerclusters/c"))
        .unwrap();
    assert_eq!(
        unfinalize.content_type.as_deref(),
        Some("application/json-patch+json")
    );
    assert_eq!(unfinalize.body.as_ref().unwrap()[1]["op"], "remove");
}

#[tokio::test]
async fn a_stopped_load_balancer_is_started_again() {
    let s = Scenario::docker();
    cluster_with_lb(&s).await;
    s.engine.set_state("c-lb", ContainerState::Exited);
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert!(s.engine.container("c-lb").unwrap().is_running());
    assert_eq!(s.engine.created().len(), 1, "started, not recreated");
}

/// Seen between its `die` and its `destroy` (`docker rm -f` under way): not started, not
/// replaced yet.
#[tokio::test]
async fn a_load_balancer_being_removed_is_left_to_go() {
    let s = Scenario::docker();
    cluster_with_lb(&s).await;
    s.engine.set_state("c-lb", ContainerState::Removing);
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    let lb = s.engine.container("c-lb").unwrap();
    assert_eq!(lb.state, Some(ContainerState::Removing), "not started");
    assert_eq!(s.engine.created().len(), 1, "not replaced yet");
    let stored = s.json::<DockerCluster>("c");
    assert_eq!(
        condition_message(&stored, "LoadBalancerAvailable").as_deref(),
        Some("container c-lb is being removed")
    );
}

#[tokio::test]
async fn a_load_balancer_removed_by_hand_comes_back_at_the_endpoints_address() {
    let s = Scenario::docker();
    let ip = cluster_with_lb(&s).await;
    s.engine.remove_by_hand("c-lb");
    s.engine.give_next_address(&ip);
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    let lb = s.engine.container("c-lb").expect("created again");
    assert_eq!(lb.ipv4.as_deref(), Some(ip.as_str()));
    let stored = s.json::<DockerCluster>("c");
    assert_eq!(stored["spec"]["controlPlaneEndpoint"]["host"], ip.as_str());
    assert_eq!(
        condition(&stored, "LoadBalancerAvailable").map(|c| c.0),
        Some("True".into())
    );
    assert!(s.engine.removed().is_empty(), "{:?}", s.engine.removed());
}

/// The old LB's address can stay allocated after `docker rm` returned: nothing is created while
/// the network shows it held by a container that is going (a create then got the next address,
/// and Engine 20.10 never released the old one).
#[tokio::test]
async fn a_load_balancer_waits_for_the_endpoints_address_to_be_released() {
    let s = Scenario::docker();
    let ip = cluster_with_lb(&s).await;
    s.engine.remove_by_hand("c-lb");
    s.engine.give_next_address(&ip);
    s.engine.add("c-lb-leaving", BTreeMap::new());
    s.engine.set_state("c-lb-leaving", ContainerState::Removing);
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert_eq!(
        s.engine.created().len(),
        1,
        "no create while the address is held"
    );
    let stored = s.json::<DockerCluster>("c");
    assert_eq!(
        condition_message(&stored, "LoadBalancerAvailable"),
        Some(format!(
            "the control-plane endpoint's address {ip} is still held on network kind by \
             c-lb-leaving, which is going; container c-lb is created there once the engine \
             releases it"
        ))
    );

    // Released: the next pass creates it there.
    s.engine.remove_by_hand("c-lb-leaving");
    s.engine.give_next_address(&ip);
    let dc = s.get::<DockerCluster>("c").unwrap();
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    let lb = s.engine.container("c-lb").expect("created");
    assert_eq!(lb.ipv4.as_deref(), Some(ip.as_str()));
}

/// Taken by a container that stays (a node started first after an engine restart): the address
/// is out of reach, and the LB is created wherever the engine puts it, as before; nothing waits
/// for it, nothing is removed.
#[tokio::test]
async fn an_endpoint_address_taken_by_a_container_that_stays_is_not_waited_for() {
    let s = Scenario::docker();
    let ip = cluster_with_lb(&s).await;
    s.engine.remove_by_hand("c-lb");
    s.engine.give_next_address(&ip);
    node(&s, "c-w9", labels::ROLE_WORKER);
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    let lb = s.engine.container("c-lb").expect("created again");
    assert_ne!(lb.ipv4.as_deref(), Some(ip.as_str()));
    assert!(s.engine.removed().is_empty());
    // Reconciled again: the LB stays where it is.
    let dc = s.get::<DockerCluster>("c").unwrap();
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    assert!(s.engine.removed().is_empty());
    assert_eq!(s.engine.created().len(), 2);
}

/// An endpoint the user set off the LB's network (a forwarded port, say) is not the LB's
/// address: a lost LB is created again wherever the engine puts it.
#[tokio::test]
async fn a_user_set_endpoint_off_the_network_does_not_pin_the_load_balancer() {
    let s = Scenario::docker();
    s.put(sc::cluster("c", "DockerCluster"));
    let mut dc = sc::docker_cluster("c");
    dc.spec.control_plane_endpoint = Some(crate::api::ApiEndpoint {
        host: Some("10.0.0.1".into()),
        port: Some(6443),
    });
    let dc = s.put(dc);
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    s.engine.remove_by_hand("c-lb");
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert!(s.engine.container("c-lb").is_some(), "created again");
    assert!(s.engine.removed().is_empty());
    let stored = s.json::<DockerCluster>("c");
    assert_eq!(stored["spec"]["controlPlaneEndpoint"]["host"], "10.0.0.1");
    assert_eq!(
        condition(&stored, "LoadBalancerAvailable").map(|c| c.0),
        Some("True".into())
    );
}

/// Ours, running at another address (its creator died before removing it, or an engine restart
/// gave it another): removed, to be created again at the endpoint's.
#[tokio::test]
async fn a_running_load_balancer_at_another_address_is_removed() {
    let s = Scenario::docker();
    let ip = cluster_with_lb(&s).await;
    s.engine.remove_by_hand("c-lb");
    s.engine.give_next_address("172.18.0.77");
    let owner = labels::Owner {
        cluster_name: "c",
        cluster_namespace: sc::NS,
        kind: "DockerCluster",
        name: "c",
        uid: &s.get::<DockerCluster>("c").unwrap().metadata.uid.unwrap(),
    };
    s.engine.add(
        "c-lb",
        labels::container_labels(&owner, labels::ROLE_LOAD_BALANCER, &BTreeMap::new()),
    );
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert_eq!(s.engine.removed(), ["c-lb"]);
    let stored = s.json::<DockerCluster>("c");
    let message = condition_message(&stored, "LoadBalancerAvailable").unwrap();
    assert!(
        message.contains(&format!(
            "got 172.18.0.77, not the control-plane endpoint's {ip}"
        )),
        "{message}"
    );
}

/// The engine never starts a dead container again: it is removed, to be created anew.
#[tokio::test]
async fn a_dead_load_balancer_is_removed_not_started() {
    let s = Scenario::docker();
    cluster_with_lb(&s).await;
    s.engine.set_state("c-lb", ContainerState::Dead);
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert_eq!(s.engine.removed(), ["c-lb"]);
    let stored = s.json::<DockerCluster>("c");
    let message = condition_message(&stored, "LoadBalancerAvailable").unwrap();
    assert!(message.contains("was dead"), "{message}");
}

/// The engine may hand the new LB another address (20.10 releases the old one after `docker rm`
/// returns): an LB there serves no one, so it goes again and the next try waits its turn, whatever
/// wakes the pass.
#[tokio::test]
async fn a_load_balancer_recreated_at_another_address_is_removed_and_tried_again_later() {
    let s = Scenario::docker();
    let ip = cluster_with_lb(&s).await;
    s.engine.remove_by_hand("c-lb");
    let dc = s.get::<DockerCluster>("c").unwrap();

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert_eq!(s.engine.created().len(), 2);
    assert_eq!(
        s.engine.removed(),
        ["c-lb"],
        "the new LB, at another address"
    );
    assert!(s.engine.container("c-lb").is_none());
    let stored = s.json::<DockerCluster>("c");
    assert_eq!(stored["spec"]["controlPlaneEndpoint"]["host"], ip.as_str());
    assert_eq!(
        condition(&stored, "LoadBalancerAvailable"),
        Some(("False".into(), "NotAvailable".into()))
    );
    let message = condition_message(&stored, "LoadBalancerAvailable").unwrap();
    assert!(
        message.contains(&format!(
            "got 172.18.0.3, not the control-plane endpoint's {ip}"
        )) && message.contains("next attempt in 10s"),
        "{message}"
    );

    // Woken again at once (the removal's event, say): no create before the streak's delay.
    let dc = s.get::<DockerCluster>("c").unwrap();
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    assert_eq!(s.engine.created().len(), 2, "no third create");
    let stored = s.json::<DockerCluster>("c");
    let message = condition_message(&stored, "LoadBalancerAvailable").unwrap();
    assert!(message.contains("1 attempt(s) so far"), "{message}");
}

#[tokio::test]
async fn haproxy_backends_follow_the_running_control_plane_containers() {
    let s = Scenario::docker();
    let cp1 = node(&s, "c-cp1", labels::ROLE_CONTROL_PLANE);
    let cp2 = node(&s, "c-cp2", labels::ROLE_CONTROL_PLANE);
    let worker = node(&s, "c-w1", labels::ROLE_WORKER);
    cluster_with_lb(&s).await;

    let cfg = haproxy_cfg(&s);
    assert!(cfg.contains(&format!("server c-cp1 {cp1}:6443")), "{cfg}");
    assert!(cfg.contains(&format!("server c-cp2 {cp2}:6443")), "{cfg}");
    assert!(
        !cfg.contains(&worker) && !cfg.contains("c-w1"),
        "a worker is no backend: {cfg}"
    );
    assert_eq!(
        s.engine.kills(),
        [("c-lb".to_string(), "SIGHUP".to_string())]
    );

    // One control-plane node stops: it leaves the backends, and haproxy reloads.
    s.engine.set_state("c-cp2", ContainerState::Exited);
    let dc = s.get::<DockerCluster>("c").unwrap();
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    let cfg = haproxy_cfg(&s);
    assert!(
        cfg.contains("server c-cp1") && !cfg.contains("c-cp2"),
        "{cfg}"
    );
    assert_eq!(s.engine.kills().len(), 2);

    // Nothing changed: nothing written, no reload.
    let writes = |s: &Scenario| {
        let calls = s.engine.execs.calls();
        calls
            .iter()
            .filter(|(_, argv, stdin)| argv[0] == "/bin/sh" && stdin.is_some())
            .count()
    };
    let before = writes(&s);
    let dc = s.get::<DockerCluster>("c").unwrap();
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    assert_eq!(writes(&s), before);
    assert_eq!(s.engine.kills().len(), 2);
}

#[tokio::test]
async fn a_missing_haproxy_template_blocks_the_load_balancer_with_a_reason() {
    let s = Scenario::docker();
    s.put(sc::cluster("c", "DockerCluster"));
    let mut dc = sc::docker_cluster("c");
    dc.spec.load_balancer = Some(
        serde_json::from_value(
            json!({"customHAProxyConfigTemplateRef": {"name": "no-such-config"}}),
        )
        .unwrap(),
    );
    let dc = s.put(dc);

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    let stored = s.json::<DockerCluster>("c");
    let (status, reason) = condition(&stored, "LoadBalancerAvailable").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    let message = condition_message(&stored, "LoadBalancerAvailable").unwrap();
    assert!(message.contains("ns/no-such-config"), "{message}");
    assert!(
        s.engine.created().is_empty(),
        "no load balancer from a spec it cannot render"
    );
    let looked = s
        .api
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/configmaps/no-such-config"));
    assert_eq!(looked.map(|r| r.code), Some(404));
}

#[tokio::test]
async fn a_container_with_the_lb_name_that_is_someone_elses_blocks_as_a_name_conflict() {
    let s = Scenario::docker();
    let theirs = BTreeMap::from([("app".to_string(), "not-capd".to_string())]);
    s.engine.add("c-lb", theirs);
    s.put(sc::cluster("c", "DockerCluster"));
    let dc = s.put(sc::docker_cluster("c"));

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    let stored = s.json::<DockerCluster>("c");
    assert_eq!(
        condition(&stored, "LoadBalancerAvailable"),
        Some(("False".into(), "ContainerNameConflict".into()))
    );
    assert!(
        stored["spec"]["controlPlaneEndpoint"].is_null(),
        "no endpoint from someone else's container"
    );
    assert!(
        s.engine.removed().is_empty() && s.engine.execs.calls().is_empty(),
        "left alone"
    );
}

#[tokio::test]
async fn a_status_from_a_view_older_than_the_object_is_refused_not_written_over_it() {
    let s = Scenario::docker();
    let mut cluster = sc::cluster("c", "DockerCluster");
    cluster.spec.paused = Some(true);
    s.put(cluster);
    let old_view = s.put(sc::docker_cluster("c"));
    // Someone else writes the object after the view was taken.
    let mut newer = s.get::<DockerCluster>("c").unwrap();
    newer.metadata.annotations = Some([("someone".to_string(), "else".to_string())].into());
    s.update(newer);

    let e = s
        .reconcile::<docker_cluster::Clusters>(old_view)
        .await
        .unwrap_err();

    assert!(
        matches!(e, crate::controllers::kit::error::Error::Stale),
        "{e}"
    );
    let stored = s.json::<DockerCluster>("c");
    assert!(
        stored["status"].is_null(),
        "nothing written from the old view: {stored}"
    );
    assert_eq!(stored["metadata"]["annotations"]["someone"], "else");
}

#[tokio::test]
async fn a_dev_cluster_on_the_docker_backend_gets_its_load_balancer_under_its_own_kind() {
    let s = Scenario::dev();
    s.put(sc::cluster("c", "DevCluster"));
    let dc = s.put(sc::dev_cluster("c", json!({"docker": {}})));

    s.reconcile::<docker_cluster::Clusters>(dc.view())
        .await
        .unwrap();

    let lb = s.engine.container("c-lb").unwrap();
    assert_eq!(lb.labels[labels::OWNER_KIND], "DevCluster");
    let stored = s.json::<crate::api::dev::DevCluster>("c");
    assert_eq!(
        stored["spec"]["controlPlaneEndpoint"]["host"],
        lb.ipv4.unwrap().as_str()
    );
    assert_eq!(
        condition(&stored, "Ready").map(|c| c.0),
        Some("True".into())
    );
    let wrote_docker = s
        .api
        .requests()
        .into_iter()
        .any(|r| r.path.contains("/dockerclusters"));
    assert!(!wrote_docker, "a DevCluster is read and written as itself");
}
