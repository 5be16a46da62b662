//! Which changes of a watched object are worth a reconcile: a hash of exactly the fields our
//! reconcilers read. CAPI core rewrites Cluster and Machine status (conditions) often; without
//! these filters every such write fans out to every DockerMachine of the cluster (measured: ~22
//! reconciles per machine while 50 machines came up, and ~5 per second at rest).
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::ResourceExt;

use crate::{
    api::DockerCluster,
    capi::{Cluster, Machine},
};

fn hash(value: impl Hash) -> Option<u64> {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    Some(h.finish())
}

/// A Machine matters for its spec (bootstrap data, version, failure domain), labels and deletion.
pub fn machine(m: &Machine) -> Option<u64> {
    hash((
        m.metadata.generation,
        m.labels(),
        m.metadata.deletion_timestamp.is_some(),
        m.data_secret_name(),
    ))
}

/// A MachinePool matters to its DockerMachinePool for its spec (replicas, version, bootstrap
/// data), labels and deletion.
pub fn machine_pool(mp: &crate::capi::MachinePool) -> Option<u64> {
    hash((
        mp.metadata.generation,
        mp.labels(),
        mp.metadata.deletion_timestamp.is_some(),
        mp.data_secret_name(),
        mp.replicas(),
    ))
}

/// An instance matters to its pool for what the pool counts: providerID, provisioned, owners
/// (CAPI core adds the Machine), annotations (delete-machine) and deletion. Any other
/// DockerMachine hashes to a constant, so only its first sighting passes (kube passes every
/// event of an object whose predicate gives `None`).
pub fn pool_instance(dm: &crate::api::DockerMachine) -> Option<u64> {
    if !dm
        .labels()
        .contains_key(crate::capi::MACHINE_POOL_NAME_LABEL)
    {
        return Some(0);
    }
    hash((
        own(dm),
        &dm.spec.provider_id,
        dm.status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.provisioned),
    ))
}

/// A machine template matters to its controller only for the capacity it already shows (the
/// reconcile compares it with the host's): a hand edit of it is put right, and the echo of our
/// own write passes once and writes nothing. The host is read again on the resync, not here.
pub fn template<K: crate::controllers::machine_template::Template>(t: &K) -> Option<u64> {
    hash(
        t.capacity()
            .map(|c| serde_json::to_string(c).unwrap_or_default()),
    )
}

/// A Cluster matters for its spec (paused, network, references) and the two initialization
/// facts of its status.
pub fn cluster(c: &Cluster) -> Option<u64> {
    hash((
        c.metadata.generation,
        c.spec.paused,
        c.infrastructure_provisioned(),
        c.control_plane_initialized(),
        c.metadata.deletion_timestamp.is_some(),
    ))
}

/// A DockerCluster matters to its machines for its spec (LB settings) and labels, and of its
/// status only for whether its load balancer went down (machines not yet provisioned wait).
pub fn docker_cluster(dc: &DockerCluster) -> Option<u64> {
    hash((
        dc.metadata.generation,
        dc.labels(),
        dc.metadata.deletion_timestamp.is_some(),
        crate::controllers::docker_machine::decide::load_balancer_down(dc).is_some(),
    ))
}

/// Our own objects matter for spec, labels, annotations (paused, managed-by), owner references
/// (CAPI sets the owner after creating them), finalizers and deletion; not for the status we
/// write ourselves (that would only echo our own patches).
pub fn own<K: kube::Resource>(obj: &K) -> Option<u64> {
    own_ignoring(obj, &[])
}

/// [`own`], leaving out the annotations in `ignored`.
fn own_ignoring<K: kube::Resource>(obj: &K, ignored: &[&str]) -> Option<u64> {
    let meta = obj.meta();
    let annotations: Vec<(&String, &String)> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !ignored.contains(&k.as_str()))
        .collect();
    hash((
        meta.generation,
        &meta.labels,
        &annotations,
        meta.owner_references
            .as_ref()
            .map(|o| o.iter().map(|r| &r.uid).collect::<Vec<_>>()),
        &meta.finalizers,
        meta.deletion_timestamp.is_some(),
    ))
}

/// [`own`], plus whether status still says provisioned: `clusterctl move` (or a user) clearing
/// the status must trigger the reconcile that rebuilds it.
pub fn own_docker_cluster(dc: &DockerCluster) -> Option<u64> {
    own_with_provisioned(
        dc,
        dc.status.as_ref().and_then(|s| s.initialization.as_ref()),
    )
}

/// See [`own_docker_cluster`]. The bootstrap start time and claim token are left out: only the
/// reconcile writes them, right before it starts a bootstrap whose end wakes the machine anyway;
/// their echo would be one more pass per machine while a hundred bootstrap.
pub fn own_docker_machine(dm: &crate::api::DockerMachine) -> Option<u64> {
    hash((
        own_ignoring(dm, &[crate::api::STARTED_AT, crate::api::BOOTSTRAP_CLAIM]),
        dm.status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.provisioned),
    ))
}

fn own_with_provisioned<K: kube::Resource>(
    obj: &K,
    init: Option<&crate::api::Initialization>,
) -> Option<u64> {
    hash((own(obj), init.and_then(|i| i.provisioned)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::{
        CapiCondition, ClusterInitialization, ClusterSpec, ClusterStatus, MachineSpec,
    };

    #[test]
    fn only_pool_instances_pass_to_the_pool_controller() {
        use crate::api::{DockerMachine, DockerMachineSpec};
        let mut dm = DockerMachine::new("m", DockerMachineSpec::default());
        let other = pool_instance(&dm);
        dm.spec.provider_id = Some("docker:////c-m".into());
        assert_eq!(
            pool_instance(&dm),
            other,
            "not an instance: never passes again"
        );
        dm.metadata.labels = Some(
            [(
                crate::capi::MACHINE_POOL_NAME_LABEL.to_string(),
                "p".to_string(),
            )]
            .into(),
        );
        let instance = pool_instance(&dm);
        assert_ne!(instance, other);
        dm.spec.provider_id = None;
        assert_ne!(
            pool_instance(&dm),
            instance,
            "an instance's providerID counts"
        );
    }

    #[test]
    fn cluster_status_noise_is_ignored_but_facts_are_not() {
        let mut c = Cluster::new("c", ClusterSpec::default());
        c.metadata.generation = Some(1);
        let base = cluster(&c);
        c.status = Some(ClusterStatus {
            conditions: Some(vec![CapiCondition {
                type_: "WorkersAvailable".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(cluster(&c), base, "an unrelated condition is noise");
        c.status.as_mut().unwrap().initialization = Some(ClusterInitialization {
            infrastructure_provisioned: Some(true),
            ..Default::default()
        });
        assert_ne!(cluster(&c), base, "infrastructure provisioned matters");
        let provisioned = cluster(&c);
        c.spec.paused = Some(true);
        assert_ne!(cluster(&c), provisioned, "pausing matters");
    }

    #[test]
    fn own_status_is_an_echo_but_annotations_owners_and_cleared_status_are_not() {
        use crate::api::{DockerClusterStatus, Initialization};
        let mut dc = DockerCluster::new("c", Default::default());
        let base = own(&dc);
        dc.status = Some(Default::default());
        assert_eq!(own(&dc), base, "our own status writes are an echo");
        dc.metadata.annotations =
            Some([(crate::capi::PAUSED_ANNOTATION.to_string(), String::new())].into());
        assert_ne!(own(&dc), base, "the paused annotation matters");
        let annotated = own(&dc);
        dc.metadata.owner_references = Some(vec![Default::default()]);
        assert_ne!(own(&dc), annotated, "CAPI setting the owner matters");

        dc.status = Some(DockerClusterStatus {
            initialization: Some(Initialization {
                provisioned: Some(true),
            }),
            ..Default::default()
        });
        let provisioned = own_docker_cluster(&dc);
        dc.status = None;
        assert_ne!(
            own_docker_cluster(&dc),
            provisioned,
            "a cleared status must be rebuilt"
        );
    }

    #[test]
    fn machine_bootstrap_data_and_labels_matter() {
        let mut m = Machine::new("m", MachineSpec::default());
        let base = machine(&m);
        m.status = Some(Default::default());
        assert_eq!(machine(&m), base);
        m.spec.bootstrap = Some(crate::capi::Bootstrap {
            data_secret_name: Some("s".into()),
            ..Default::default()
        });
        assert_ne!(machine(&m), base);
    }

    #[test]
    fn our_bootstrap_start_time_does_not_trigger_but_other_annotations_do() {
        let mut dm = crate::api::DockerMachine::new("m", Default::default());
        let base = own_docker_machine(&dm);
        for key in [crate::api::STARTED_AT, crate::api::BOOTSTRAP_CLAIM] {
            dm.annotations_mut()
                .insert(key.into(), "2026-11-23T20:00:00Z".into());
        }
        assert_eq!(own_docker_machine(&dm), base);
        dm.annotations_mut()
            .insert("cluster.x-k8s.io/paused".into(), String::new());
        assert_ne!(own_docker_machine(&dm), base);
    }
}
