//! Watch mappers: which of our objects a change to a related object must reach. Synchronous and
//! pure (kube-runtime calls them inline), reading only the event and our own object caches.
use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use super::kinds::{DEV, DOCKER};
use crate::{
    api::{DockerCluster, DockerMachine, DockerMachinePool, GROUP},
    capi::{CLUSTER_NAME_LABEL, Cluster, Machine, MachinePool},
    docker::{ContainerEvent, labels},
};

/// The object a container event concerns: its kind (a family's cluster or machine kind), and
/// the object, as the family's controller knows it.
#[derive(Debug, PartialEq)]
pub enum ContainerOwner {
    Cluster(String, ObjectRef<DockerCluster>),
    Machine(String, ObjectRef<DockerMachine>),
}

/// Container event -> its owner, from the ownership labels we put on every container.
pub fn container_owner(event: &ContainerEvent) -> Option<ContainerOwner> {
    let get = |k: &str| event.labels.get(k).map(String::as_str);
    let (name, ns) = (get(labels::OWNER_NAME)?, get(labels::CLUSTER_NAMESPACE)?);
    let kind = get(labels::OWNER_KIND)?;
    if [DOCKER.cluster, DEV.cluster].contains(&kind) {
        Some(ContainerOwner::Cluster(
            kind.into(),
            ObjectRef::new(name).within(ns),
        ))
    } else if [DOCKER.machine, DEV.machine].contains(&kind) {
        Some(ContainerOwner::Machine(
            kind.into(),
            ObjectRef::new(name).within(ns),
        ))
    } else {
        None
    }
}

/// Cluster -> its cluster object of `kind` (through `spec.infrastructureRef`).
pub fn cluster_to_docker_cluster(kind: &str, cluster: Cluster) -> Option<ObjectRef<DockerCluster>> {
    let name = cluster
        .spec
        .infrastructure_ref
        .as_ref()?
        .name_if(GROUP, kind)?
        .to_string();
    Some(ObjectRef::new(&name).within(&cluster.namespace()?))
}

/// Machine -> its machine object of `kind` (through `spec.infrastructureRef`).
pub fn machine_to_docker_machine(kind: &str, machine: Machine) -> Option<ObjectRef<DockerMachine>> {
    let name = machine
        .spec
        .infrastructure_ref
        .as_ref()?
        .name_if(GROUP, kind)?
        .to_string();
    Some(ObjectRef::new(&name).within(&machine.namespace()?))
}

/// Every DockerMachine of a cluster (by the cluster-name label CAPI puts on them), from the cache.
pub fn docker_machines_of_cluster(
    store: &Store<DockerMachine>,
    namespace: Option<String>,
    cluster: Option<String>,
) -> Vec<ObjectRef<DockerMachine>> {
    let (Some(ns), Some(cluster)) = (namespace, cluster) else {
        return Vec::new();
    };
    store
        .state()
        .iter()
        .filter(|dm| {
            dm.namespace().as_deref() == Some(ns.as_str())
                && dm.labels().get(CLUSTER_NAME_LABEL) == Some(&cluster)
        })
        .map(|dm| ObjectRef::from_obj(dm.as_ref()))
        .collect()
}

/// Cluster -> its DockerMachines (paused flips, infrastructure provisioned, CP initialized).
pub fn cluster_to_docker_machines(
    store: &Store<DockerMachine>,
    cluster: &Cluster,
) -> Vec<ObjectRef<DockerMachine>> {
    docker_machines_of_cluster(store, cluster.namespace(), Some(cluster.name_any()))
}

/// DockerCluster -> the DockerMachines of the same cluster (endpoint / LB settings changed).
pub fn docker_cluster_to_docker_machines(
    store: &Store<DockerMachine>,
    dc: &DockerCluster,
) -> Vec<ObjectRef<DockerMachine>> {
    let cluster = dc
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .or_else(|| crate::capi::capi_owner(&dc.metadata, "Cluster").map(|o| o.name.clone()));
    docker_machines_of_cluster(store, dc.namespace(), cluster)
}

/// MachinePool -> its pool object of `kind` (through `spec.template.spec.infrastructureRef`).
pub fn machine_pool_to_docker_machine_pool(
    kind: &str,
    mp: MachinePool,
) -> Option<ObjectRef<DockerMachinePool>> {
    let name = mp.infrastructure_ref()?.name_if(GROUP, kind)?.to_string();
    Some(ObjectRef::new(&name).within(&mp.namespace()?))
}

/// An instance -> the pool object of `kind` that owns it.
pub fn instance_to_docker_machine_pool(
    kind: &str,
    dm: DockerMachine,
) -> Option<ObjectRef<DockerMachinePool>> {
    let owner = dm
        .owner_references()
        .iter()
        .find(|r| r.kind == kind && r.api_version.split('/').next() == Some(GROUP))?;
    Some(ObjectRef::new(&owner.name).within(&dm.namespace()?))
}

/// Cluster -> every DockerMachinePool of it (cluster-name label, which CAPI core sets), from
/// the cache.
pub fn cluster_to_docker_machine_pools(
    store: &Store<DockerMachinePool>,
    cluster: &Cluster,
) -> Vec<ObjectRef<DockerMachinePool>> {
    let (name, ns) = (cluster.name_any(), cluster.namespace());
    store
        .state()
        .iter()
        .filter(|p| p.namespace() == ns && p.labels().get(CLUSTER_NAME_LABEL) == Some(&name))
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::{ClusterSpec, ContractRef, MachineSpec};

    fn contract_ref(kind: &str, name: &str) -> Option<ContractRef> {
        Some(ContractRef {
            api_group: Some(GROUP.into()),
            kind: Some(kind.into()),
            name: Some(name.into()),
        })
    }

    #[test]
    fn cluster_maps_to_its_docker_cluster_only() {
        let mut c = Cluster::new(
            "c",
            ClusterSpec {
                infrastructure_ref: contract_ref("DockerCluster", "c-dc"),
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        assert_eq!(
            cluster_to_docker_cluster(DOCKER.cluster, c.clone()),
            Some(ObjectRef::new("c-dc").within("ns"))
        );
        assert_eq!(
            cluster_to_docker_cluster(DEV.cluster, c.clone()),
            None,
            "the Dev* family's controller leaves it alone"
        );
        c.spec.infrastructure_ref = contract_ref("AWSCluster", "x");
        assert_eq!(cluster_to_docker_cluster(DOCKER.cluster, c), None);
    }

    #[test]
    fn container_events_map_to_their_owner() {
        let owner = labels::Owner {
            cluster_name: "c",
            cluster_namespace: "ns",
            kind: "DevMachine",
            name: "m",
            uid: "u",
        };
        let event = ContainerEvent {
            action: "die".into(),
            labels: labels::container_labels(&owner, labels::ROLE_WORKER, &Default::default()),
        };
        assert_eq!(
            container_owner(&event),
            Some(ContainerOwner::Machine(
                "DevMachine".into(),
                ObjectRef::new("m").within("ns")
            ))
        );
        assert_eq!(container_owner(&ContainerEvent::default()), None);
    }

    #[test]
    fn machine_maps_to_its_docker_machine() {
        let mut m = Machine::new(
            "m",
            MachineSpec {
                infrastructure_ref: contract_ref("DockerMachine", "m-dm"),
                ..Default::default()
            },
        );
        m.metadata.namespace = Some("ns".into());
        assert_eq!(
            machine_to_docker_machine(DOCKER.machine, m),
            Some(ObjectRef::new("m-dm").within("ns"))
        );
    }
}
