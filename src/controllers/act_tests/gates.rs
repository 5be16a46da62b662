//! What every controller checks before it acts: a paused Cluster, an orphan being deleted, a
//! backend this provider does not serve, an owner that does not exist.
use std::collections::BTreeMap;

use http::Method;
use serde_json::json;

use super::scenario::{self as sc, Scenario, condition, finalizers};
use crate::{
    api::{DockerCluster, DockerMachine, DockerMachinePool, dev},
    capi::Cluster,
    controllers::{docker_cluster, docker_machine, docker_machine_pool, kit::error::Error},
    docker::labels,
};

fn paused(mut c: Cluster) -> Cluster {
    c.spec.paused = Some(true);
    c
}

#[tokio::test]
async fn a_paused_cluster_pauses_its_docker_cluster_without_touching_a_container() {
    let s = Scenario::docker();
    s.put(paused(sc::cluster("c", "DockerCluster")));
    let dc = s.put(sc::docker_cluster("c"));

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    let stored = s.json::<DockerCluster>("c");
    assert_eq!(
        condition(&stored, "Paused"),
        Some(("True".into(), "Paused".into()))
    );
    assert!(
        finalizers(&stored).is_empty(),
        "a paused object gets no finalizer"
    );
    assert!(s.engine.created().is_empty() && s.engine.execs.calls().is_empty());
}

#[tokio::test]
async fn a_paused_cluster_pauses_its_machines_and_pools_too() {
    let s = Scenario::docker();
    s.put(paused(sc::cluster("c", "DockerCluster")));
    s.put(sc::machine("c", "m", "DockerMachine", false));
    s.put(sc::bootstrap_secret("m"));
    let dm = s.put(sc::docker_machine("c", "m"));
    s.put(sc::machine_pool("c", "p", "DockerMachinePool", 2));
    let dmp = s.put(sc::docker_machine_pool("c", "p"));

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    s.reconcile::<docker_machine_pool::Pools>(dmp)
        .await
        .unwrap();

    for stored in [
        s.json::<DockerMachine>("m"),
        s.json::<DockerMachinePool>("p"),
    ] {
        assert_eq!(
            condition(&stored, "Paused"),
            Some(("True".into(), "Paused".into()))
        );
        assert!(finalizers(&stored).is_empty());
    }
    assert!(s.engine.created().is_empty(), "no node container");
    let posts = s
        .api
        .requests()
        .into_iter()
        .filter(|r| r.is(&Method::POST, "/dockermachines"));
    assert_eq!(posts.count(), 0, "no pool instance");
    let secret_reads = s
        .api
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/secrets/m-bootstrap"));
    assert_eq!(
        secret_reads.count(),
        0,
        "bootstrap data is not read while paused"
    );
}

/// Containers of `uid` (one by an odd name), and one of someone else.
fn owned_containers(s: &Scenario, uid: &str) {
    let mine = BTreeMap::from([(labels::OWNER_UID.to_string(), uid.to_string())]);
    s.engine.add("c-lb", mine.clone());
    s.engine.add("renamed", mine);
    let theirs = BTreeMap::from([(labels::OWNER_UID.to_string(), "someone-else".to_string())]);
    s.engine.add("other", theirs);
}

#[tokio::test]
async fn an_orphan_docker_cluster_removes_what_carries_its_uid_and_lets_go() {
    let s = Scenario::docker();
    let mut dc = sc::docker_cluster("c");
    dc.metadata.owner_references = None;
    dc.metadata.finalizers = Some(vec![docker_cluster::FINALIZER.into()]);
    let dc = s.put(dc);
    owned_containers(&s, dc.metadata.uid.as_deref().unwrap());
    let dc = s.delete::<DockerCluster>("c");

    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();

    assert_eq!(s.engine.names(), ["other"], "only its own containers went");
    assert!(
        s.get::<DockerCluster>("c").is_none(),
        "finalizer removed: the object is gone"
    );
}

#[tokio::test]
async fn an_orphan_docker_machine_removes_what_carries_its_uid_and_lets_go() {
    let s = Scenario::docker();
    let mut dm = sc::docker_machine("c", "m");
    dm.metadata.owner_references = None;
    dm.metadata.finalizers = Some(vec![docker_machine::FINALIZER.into()]);
    let dm = s.put(dm);
    owned_containers(&s, dm.metadata.uid.as_deref().unwrap());
    let dm = s.delete::<DockerMachine>("m");

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    assert_eq!(s.engine.names(), ["other"]);
    assert!(s.get::<DockerMachine>("m").is_none());
}

#[tokio::test]
async fn an_unserved_backend_is_reported_and_nothing_is_created() {
    let s = Scenario::dev();
    s.put(sc::cluster("c", "DevCluster"));
    s.put(sc::machine("c", "m", "DevMachine", false));
    s.put(sc::bootstrap_secret("m"));
    let dc = s.put(sc::dev_cluster("c", json!({"inMemory": {}})));
    let dm = s.put(sc::dev_machine("c", "m", json!({"inMemory": {"vm": {}}})));

    s.reconcile::<docker_cluster::Clusters>(dc.view())
        .await
        .unwrap();
    s.reconcile::<docker_machine::Machines>(dm.view())
        .await
        .unwrap();

    let not_served = Some(("False".into(), "BackendNotServed".into()));
    let dc = s.json::<dev::DevCluster>("c");
    assert_eq!(condition(&dc, "LoadBalancerAvailable"), not_served);
    assert_eq!(condition(&dc, "Ready").map(|c| c.0), Some("False".into()));
    let dm = s.json::<dev::DevMachine>("m");
    assert_eq!(condition(&dm, "ContainerProvisioned"), not_served);
    assert!(s.engine.created().is_empty());
    assert!(
        s.api
            .requests()
            .iter()
            .any(|r| r.is(&Method::PATCH, "/devclusters/c/status")),
        "written through the DevCluster's own resource"
    );
}

#[tokio::test]
async fn a_missing_owner_is_an_error_and_changes_nothing() {
    let s = Scenario::docker();
    let dc = s.put(sc::docker_cluster("c"));
    let dm = s.put(sc::docker_machine("c", "m"));
    let dmp = s.put(sc::docker_machine_pool("c", "p"));

    let e = s
        .reconcile::<docker_cluster::Clusters>(dc)
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::Missing(m) if m.contains("ns/c")), "{e}");
    let e = s
        .reconcile::<docker_machine::Machines>(dm)
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::Missing(m) if m.contains("ns/m")), "{e}");
    let e = s
        .reconcile::<docker_machine_pool::Pools>(dmp)
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::Missing(_)), "{e}");

    let writes: Vec<_> = s
        .api
        .requests()
        .into_iter()
        .filter(|r| r.method != Method::GET)
        .collect();
    assert!(writes.is_empty(), "no writes: {writes:?}");
    assert!(s.engine.created().is_empty());
    // The owners were looked for on the API server (the caches had not seen them).
    let looked = |p: &str| {
        s.api
            .requests()
            .iter()
            .any(|r| r.method == Method::GET && r.path.ends_with(p))
    };
    assert!(looked("/clusters/c") && looked("/machines/m") && looked("/machinepools/p"));
}
