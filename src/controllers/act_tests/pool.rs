//! DockerMachinePool: its replicas as DockerMachines (the pool never touches Docker).

use http::Method;

use super::scenario::{self as sc, Scenario, condition, finalizers};
use crate::{api::DockerMachinePool, capi, controllers::docker_machine_pool};

#[tokio::test]
async fn a_pool_creates_one_labelled_docker_machine_per_replica() {
    let s = Scenario::docker();
    s.put(sc::cluster("c", "DockerCluster"));
    s.put(sc::machine_pool("c", "p", "DockerMachinePool", 2));
    let dmp = s.put(sc::docker_machine_pool("c", "p"));
    let uid = dmp.metadata.uid.clone().unwrap();

    s.reconcile::<docker_machine_pool::Pools>(dmp)
        .await
        .unwrap();

    let instances = s
        .api
        .list("/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/ns/dockermachines");
    assert_eq!(instances.len(), 2, "{instances:#?}");
    for dm in &instances {
        let meta = &dm["metadata"];
        assert_eq!(meta["labels"][capi::CLUSTER_NAME_LABEL], "c");
        assert_eq!(meta["labels"][capi::MACHINE_POOL_NAME_LABEL], "p");
        assert_eq!(meta["ownerReferences"][0]["kind"], "DockerMachinePool");
        assert_eq!(meta["ownerReferences"][0]["uid"], uid.as_str());
        assert!(meta["name"].as_str().unwrap().starts_with("c-p-"), "{meta}");
    }
    let posts = s
        .api
        .requests()
        .into_iter()
        .filter(|r| r.is(&Method::POST, "/dockermachines"));
    assert_eq!(posts.count(), 2);
    let stored = s.json::<DockerMachinePool>("p");
    assert_eq!(finalizers(&stored), [docker_machine_pool::FINALIZER]);
    assert_eq!(
        stored["status"]["infrastructureMachineKind"],
        "DockerMachine"
    );
    assert_eq!(
        condition(&stored, "ReplicasReady").map(|c| c.0),
        Some("False".into())
    );
    assert!(s.engine.created().is_empty() && s.engine.execs.calls().is_empty());

    // Listed by their labels, the two instances are found again: none is added.
    let lists: Vec<_> = s
        .api
        .requests()
        .into_iter()
        .filter(|r| r.is(&Method::GET, "/dockermachines"))
        .collect();
    assert!(
        lists.iter().all(|r| r
            .query
            .contains(&format!("{}=p", capi::MACHINE_POOL_NAME_LABEL))),
        "{lists:?}"
    );
    let dmp = s.get::<DockerMachinePool>("p").unwrap();
    s.reconcile::<docker_machine_pool::Pools>(dmp)
        .await
        .unwrap();
    let instances = s
        .api
        .list("/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/ns/dockermachines");
    assert_eq!(instances.len(), 2);
}
