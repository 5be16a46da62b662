//! The pure part of a DockerMachinePool reconcile: from the pool, its MachinePool and its
//! instances, how many DockerMachines to create, which to delete, and the status to report.
use std::sync::Arc;

use kube::ResourceExt;

use super::TEMPLATE_HASH_ANNOTATION;
use crate::{
    api::{
        DockerMachine, DockerMachinePool,
        conditions::{Desired, reasons, types},
    },
    capi::{self, Cluster, DELETE_MACHINE_ANNOTATION, Machine, MachinePool},
    controllers::kit::lifecycle::Facts,
};

/// What a pool reconcile reads, fetched once.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    pub machine_pool: Option<Arc<MachinePool>>,
    pub cluster: Option<Arc<Cluster>>,
    /// DockerMachines labelled with the pool's cluster and MachinePool names.
    pub instances: Vec<DockerMachine>,
    /// Machines labelled likewise (CAPI core's, one per instance).
    pub machines: Vec<Machine>,
}

/// What a pool that is not being deleted does.
#[derive(Clone, Debug, PartialEq)]
pub enum Normal {
    /// The MachinePool has no bootstrap data yet: nothing to boot instances from.
    AwaitBootstrapData,
    Scale(Box<Scale>),
}

/// What a pool being deleted does.
#[derive(Clone, Debug, PartialEq)]
pub enum Delete {
    /// Delete these Machines (and with them their instances and nodes), then look again.
    Remove(Vec<String>),
    /// No Machine of the pool is left: let go. Instances that never got a Machine go with the
    /// pool (owner reference).
    Release,
}

/// The MachinePool and its Cluster, both present.
pub type Bound = (Arc<MachinePool>, Arc<Cluster>);

#[derive(Clone, Debug, PartialEq)]
pub struct Scale {
    pub cluster_name: String,
    pub pool_name: String,
    /// The template every new instance gets, as a hash to tell outdated instances.
    pub template_hash: String,
    pub create: usize,
    /// Machines to delete: an instance is removed through its Machine, so that CAPI drains the
    /// node and deletes the DockerMachine with it. An instance CAPI has not given a Machine yet
    /// is left for a later pass.
    pub delete: Vec<String>,
    /// Sorted providerIDs of the instances that have one.
    pub provider_ids: Vec<String>,
    /// Instances not being deleted.
    pub replicas: usize,
    /// Every wanted replica exists with a providerID (CAPI core reads providerIDList once true).
    pub all_have_provider_ids: bool,
    pub replicas_ready: Desired,
}

/// Pure: what the lifecycle's gate reads of a pool's owners.
pub fn facts(kind: &str, dmp: &DockerMachinePool, f: &Fetched) -> Facts<Bound> {
    let ns = dmp.namespace().unwrap_or_default();
    let owner = capi::capi_owner(&dmp.metadata, "MachinePool").map_or("", |o| o.name.as_str());
    let bound = match (&f.machine_pool, &f.cluster) {
        (None, _) => Err(format!("owner MachinePool {ns}/{owner} not found")),
        (Some(mp), None) => Err(format!(
            "Cluster {ns}/{} of MachinePool {owner} not found",
            mp.cluster_name().unwrap_or("<none>")
        )),
        (Some(mp), Some(cluster)) => Ok((mp.clone(), cluster.clone())),
    };
    let named_elsewhere = f.machine_pool.as_ref().and_then(|mp| {
        let named = mp
            .infrastructure_ref()
            .and_then(|r| r.name_if(crate::api::GROUP, kind));
        if named == Some(dmp.name_any().as_str()) {
            return None;
        }
        let whom = mp.infrastructure_ref().map_or("nothing".to_string(), |r| {
            format!(
                "{} {}",
                r.kind.as_deref().unwrap_or("<no kind>"),
                r.name.as_deref().unwrap_or("<no name>")
            )
        });
        Some(Desired::false_(
            types::REPLICAS_READY,
            reasons::NOT_MACHINE_INFRASTRUCTURE,
            format!(
                "MachinePool {ns}/{owner} owns this {kind} but its infrastructureRef names {whom}: \
                 no instances are made (they would get that MachinePool's bootstrap data)"
            ),
        ))
    });
    Facts {
        bound,
        named_elsewhere,
        cluster: f.cluster.clone(),
    }
}

/// Pure: which Machines a pool being deleted removes.
pub fn delete(f: &Fetched) -> Delete {
    if f.machines.is_empty() {
        return Delete::Release;
    }
    Delete::Remove(
        f.machines
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect(),
    )
}

/// Pure: how a pool whose MachinePool and Cluster exist scales.
pub fn normal(dmp: &DockerMachinePool, f: &Fetched, (mp, cluster): Bound) -> Normal {
    let instances: Vec<Instance> = f.instances.iter().map(|dm| instance(dm, f)).collect();
    if mp.data_secret_name().is_none() {
        return Normal::AwaitBootstrapData;
    }
    let hash = template_hash(dmp, &mp);
    Normal::Scale(Box::new(scale(
        mp.replicas(),
        &hash,
        &instances,
        cluster.name_any(),
        mp.name_any(),
    )))
}

/// One instance as scaling sees it.
#[derive(Clone, Debug)]
struct Instance<'a> {
    dm: &'a DockerMachine,
    machine: Option<&'a Machine>,
    /// Neither it nor its Machine is being deleted.
    live: bool,
    provisioned: bool,
    /// Someone asked for this one to go first (`cluster.x-k8s.io/delete-machine`).
    marked: bool,
}

fn instance<'a>(dm: &'a DockerMachine, f: &'a Fetched) -> Instance<'a> {
    let machine = capi::capi_owner(&dm.metadata, "Machine")
        .and_then(|o| f.machines.iter().find(|m| m.name_any() == o.name));
    let deleting = dm.metadata.deletion_timestamp.is_some()
        || machine.is_some_and(|m| m.metadata.deletion_timestamp.is_some());
    let marked = dm.annotations().contains_key(DELETE_MACHINE_ANNOTATION)
        || machine.is_some_and(|m| m.annotations().contains_key(DELETE_MACHINE_ANNOTATION));
    Instance {
        dm,
        machine,
        live: !deleting,
        provisioned: dm
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.provisioned)
            == Some(true),
        marked,
    }
}

/// What makes an instance: the pool's template and the MachinePool's version (which picks the
/// node image). FNV-1a over their JSON: stable across processes and Rust releases, unlike
/// std's hasher, since it is stored on the instances.
pub fn template_hash(dmp: &DockerMachinePool, mp: &MachinePool) -> String {
    let input = serde_json::json!([dmp.spec.template, mp.version()]).to_string();
    let hash = input.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// `replicas` instances of the current template is the goal. A changed template (or version)
/// rolls out with a surge, as upstream CAPD's: new instances are created at once, and a
/// provisioned outdated one goes only while more than `replicas` are provisioned (an
/// unprovisioned one goes at once: it serves nothing). Scaling down removes, in order, the
/// marked, the unprovisioned, then the newest.
fn scale(
    replicas: usize,
    hash: &str,
    instances: &[Instance],
    cluster_name: String,
    pool_name: String,
) -> Scale {
    let live: Vec<&Instance> = instances.iter().filter(|i| i.live).collect();
    let is_current = |i: &Instance| {
        i.dm.annotations()
            .get(TEMPLATE_HASH_ANNOTATION)
            .map(String::as_str)
            == Some(hash)
    };
    let order = |v: &mut Vec<&Instance>| {
        v.sort_by_key(|i| {
            (
                !i.marked,
                i.provisioned,
                std::cmp::Reverse(i.dm.metadata.creation_timestamp.clone()),
                i.dm.name_any(),
            )
        })
    };
    let (mut up_to_date, mut outdated): (Vec<&Instance>, Vec<&Instance>) =
        live.iter().partition(|i| is_current(i));
    let removable = |i: &&Instance| i.machine.is_some();
    order(&mut up_to_date);
    order(&mut outdated);
    let create = replicas.saturating_sub(up_to_date.len());
    let surplus = up_to_date.len().saturating_sub(replicas);
    let mut delete: Vec<&Instance> = Vec::new();
    let mut provisioned_left = live.iter().filter(|i| i.provisioned).count();
    for i in up_to_date.iter().take(surplus) {
        delete.push(i);
        provisioned_left -= usize::from(i.provisioned);
    }
    for i in &outdated {
        if !i.provisioned {
            delete.push(i);
        } else if provisioned_left > replicas {
            delete.push(i);
            provisioned_left -= 1;
        }
    }
    let delete: Vec<String> = delete
        .into_iter()
        .filter(removable)
        .filter_map(|i| i.machine.map(ResourceExt::name_any))
        .collect();

    let mut provider_ids: Vec<String> = instances
        .iter()
        .filter_map(|i| i.dm.spec.provider_id.clone())
        .filter(|p| !p.is_empty())
        .collect();
    provider_ids.sort();
    let with_ids = live
        .iter()
        .filter(|i| {
            i.dm.spec
                .provider_id
                .as_deref()
                .is_some_and(|p| !p.is_empty())
        })
        .count();
    let provisioned = live.iter().filter(|i| i.provisioned).count();
    let message = format!(
        "{provisioned} of {replicas} replicas provisioned, {} up to date, {} instances",
        up_to_date.len(),
        live.len()
    );
    debug_assert!(delete.len() <= live.len());
    // An instance being deleted keeps the pool scaling down (and looking again soon) until it
    // is gone: its final deletion is not a change our watch predicate sees, and its providerID
    // must leave providerIDList then.
    let going = instances.len() - live.len();
    let replicas_ready = if !outdated.is_empty() {
        Desired::false_(types::REPLICAS_READY, reasons::ROLLING_OUT, message)
    } else if live.len() > replicas || going > 0 {
        Desired::false_(types::REPLICAS_READY, reasons::SCALING_DOWN, message)
    } else if provisioned < replicas {
        Desired::false_(types::REPLICAS_READY, reasons::SCALING_UP, message)
    } else {
        Desired::true_(types::REPLICAS_READY, reasons::READY)
    };
    Scale {
        cluster_name,
        pool_name,
        template_hash: hash.to_string(),
        create,
        delete,
        provider_ids,
        replicas: live.len(),
        all_have_provider_ids: live.len() == replicas && with_ids == replicas,
        replicas_ready,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    use super::*;
    use crate::controllers::docker_machine_pool::Pools;
    use crate::{
        api::{DockerMachineSpec, DockerMachineStatus, Initialization},
        capi::{ClusterSpec, MachineSpec},
        controllers::kit::lifecycle::{Gate, Plan, PlanOf},
    };

    fn decide(kind: &str, dmp: &DockerMachinePool, f: &Fetched) -> PlanOf<Pools> {
        crate::controllers::kit::lifecycle::decide::<Pools>(kind, dmp, f)
    }

    fn ts(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn owner(kind: &str, name: &str, api_version: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            ..Default::default()
        }
    }

    fn pool() -> DockerMachinePool {
        let mut p = DockerMachinePool::new("pool", Default::default());
        p.metadata.namespace = Some("ns".into());
        p.metadata.owner_references =
            Some(vec![owner("MachinePool", "mp", "cluster.x-k8s.io/v1beta2")]);
        p
    }

    fn machine_pool(replicas: i32, version: &str) -> Arc<MachinePool> {
        let mp: MachinePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": {"name": "mp", "namespace": "ns"},
            "spec": {"clusterName": "c", "replicas": replicas, "template": {"spec": {
                "version": version, "bootstrap": {"dataSecretName": "mp-boot"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                      "kind": "DockerMachinePool", "name": "pool"}}}}
        }))
        .unwrap();
        Arc::new(mp)
    }

    /// An instance created at `created`, with a Machine unless `machine` is false.
    fn dm(name: &str, hash: &str, created: i64, provisioned: bool) -> DockerMachine {
        let mut d = DockerMachine::new(name, DockerMachineSpec::default());
        d.metadata.creation_timestamp = Some(ts(created));
        d.metadata.annotations = Some([(TEMPLATE_HASH_ANNOTATION.into(), hash.into())].into());
        d.metadata.owner_references = Some(vec![
            owner(
                "DockerMachinePool",
                "pool",
                "infrastructure.cluster.x-k8s.io/v1beta2",
            ),
            owner("Machine", name, "cluster.x-k8s.io/v1beta2"),
        ]);
        if provisioned {
            d.spec.provider_id = Some(format!("docker:////{name}"));
            d.status = Some(DockerMachineStatus {
                initialization: Some(Initialization {
                    provisioned: Some(true),
                }),
                ..Default::default()
            });
        }
        d
    }

    fn machine(name: &str) -> Machine {
        Machine::new(name, MachineSpec::default())
    }

    fn fetched(replicas: i32, version: &str, dms: Vec<DockerMachine>) -> Fetched {
        let machines = dms.iter().map(|d| machine(&d.name_any())).collect();
        Fetched {
            machine_pool: Some(machine_pool(replicas, version)),
            cluster: Some(Arc::new(Cluster::new("c", ClusterSpec::default()))),
            instances: dms,
            machines,
        }
    }

    fn plan_scale(p: PlanOf<Pools>) -> Scale {
        match p {
            Plan::Normal(Normal::Scale(s)) => *s,
            other => panic!("expected Scale, got {other:?}"),
        }
    }

    fn current(replicas: i32) -> String {
        template_hash(&pool(), &machine_pool(replicas, "v1.35.4"))
    }

    /// An impostor pool owned by a MachinePool that names another pool makes no instances.
    #[test]
    fn a_pool_its_machine_pool_does_not_name_makes_nothing() {
        let f = fetched(2, "v1.35.4", vec![]);
        let mut impostor = pool();
        impostor.metadata.name = Some("impostor".into());
        match decide("DockerMachinePool", &impostor, &f) {
            Plan::Gate(Gate::NotInfrastructure(d)) => {
                let m = d.message;
                assert!(
                    m.contains("ns/mp") && m.contains("DockerMachinePool pool"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decide("DevMachinePool", &pool(), &f),
            Plan::Gate(Gate::NotInfrastructure(_))
        ));
        assert!(matches!(
            decide("DockerMachinePool", &pool(), &f),
            Plan::Normal(Normal::Scale(_))
        ));
    }

    #[test]
    fn the_contract_in_order() {
        let mut unowned = pool();
        unowned.metadata.owner_references = None;
        assert_eq!(
            decide("DockerMachinePool", &unowned, &Fetched::default()),
            Plan::Gate(Gate::AwaitOwner)
        );
        assert!(
            matches!(decide("DockerMachinePool", &pool(), &Fetched::default()), Plan::Gate(Gate::Missing(m)) if m.contains("ns/mp"))
        );
        let mut f = fetched(1, "v1.35.4", vec![]);
        let mut no_data = (*machine_pool(1, "v1.35.4")).clone();
        if let Some(spec) = no_data.spec.template.as_mut().and_then(|t| t.spec.as_mut()) {
            spec.bootstrap = None;
        }
        f.machine_pool = Some(Arc::new(no_data));
        assert_eq!(
            decide("DockerMachinePool", &pool(), &f),
            Plan::Normal(Normal::AwaitBootstrapData)
        );
        let mut paused = pool();
        paused.metadata.annotations =
            Some([(capi::PAUSED_ANNOTATION.into(), String::new())].into());
        assert!(matches!(
            decide("DockerMachinePool", &paused, &f),
            Plan::Gate(Gate::Paused(_))
        ));
    }

    #[test]
    fn scales_up_to_the_replicas() {
        let h = current(3);
        let s = plan_scale(decide(
            "DockerMachinePool",
            &pool(),
            &fetched(3, "v1.35.4", vec![dm("a", &h, 1, true)]),
        ));
        assert_eq!((s.create, s.delete.len(), s.replicas), (2, 0, 1));
        assert_eq!(s.provider_ids, ["docker:////a"]);
        assert!(!s.all_have_provider_ids);
        assert_eq!(s.replicas_ready.reason, reasons::SCALING_UP);
    }

    #[test]
    fn scales_down_marked_then_unprovisioned_then_newest() {
        let h = current(1);
        let mut dms = vec![
            dm("old", &h, 1, true),
            dm("new", &h, 3, true),
            dm("booting", &h, 2, false),
            dm("marked", &h, 0, true),
        ];
        dms[3]
            .annotations_mut()
            .insert(DELETE_MACHINE_ANNOTATION.into(), String::new());
        let s = plan_scale(decide(
            "DockerMachinePool",
            &pool(),
            &fetched(1, "v1.35.4", dms),
        ));
        assert_eq!(s.create, 0);
        assert_eq!(s.delete, ["marked", "booting", "new"]);
        assert_eq!(s.replicas_ready.reason, reasons::SCALING_DOWN);
    }

    #[test]
    fn an_instance_being_deleted_is_not_counted_or_deleted_again() {
        let h = current(2);
        let mut f = fetched(
            2,
            "v1.35.4",
            vec![dm("a", &h, 1, true), dm("b", &h, 2, true)],
        );
        f.machines[1].metadata.deletion_timestamp = Some(ts(5));
        let s = plan_scale(decide("DockerMachinePool", &pool(), &f));
        assert_eq!((s.create, s.delete.len(), s.replicas), (1, 0, 1));
        assert_eq!(
            s.provider_ids.len(),
            2,
            "a draining node keeps its providerID listed until it is gone"
        );
        let mut f = fetched(
            1,
            "v1.35.4",
            vec![dm("a", &h, 1, true), dm("b", &h, 2, true)],
        );
        f.machines[1].metadata.deletion_timestamp = Some(ts(5));
        let s = plan_scale(decide("DockerMachinePool", &pool(), &f));
        assert_eq!(
            s.replicas_ready.reason,
            reasons::SCALING_DOWN,
            "not settled while one is still going"
        );
    }

    #[test]
    fn a_version_change_rolls_out_with_a_surge() {
        let old = current(2);
        let new = template_hash(&pool(), &machine_pool(2, "v1.36.0"));
        assert_ne!(old, new);
        // Nothing new yet: create two, delete nothing.
        let f = fetched(
            2,
            "v1.36.0",
            vec![dm("o1", &old, 1, true), dm("o2", &old, 2, true)],
        );
        let s = plan_scale(decide("DockerMachinePool", &pool(), &f));
        assert_eq!((s.create, s.delete.len()), (2, 0));
        assert_eq!(s.replicas_ready.reason, reasons::ROLLING_OUT);
        // One new one provisioned: one outdated goes (the newest outdated first).
        let f = fetched(
            2,
            "v1.36.0",
            vec![
                dm("o1", &old, 1, true),
                dm("o2", &old, 2, true),
                dm("n1", &new, 3, true),
                dm("n2", &new, 4, false),
            ],
        );
        let s = plan_scale(decide("DockerMachinePool", &pool(), &f));
        assert_eq!((s.create, s.delete.clone()), (0, vec!["o2".to_string()]));
        // Both new ones provisioned: the last outdated goes.
        let f = fetched(
            2,
            "v1.36.0",
            vec![
                dm("o1", &old, 1, true),
                dm("n1", &new, 3, true),
                dm("n2", &new, 4, true),
            ],
        );
        let s = plan_scale(decide("DockerMachinePool", &pool(), &f));
        assert_eq!(s.delete, ["o1"]);
    }

    #[test]
    fn ready_when_every_replica_has_a_provider_id() {
        let h = current(2);
        let s = plan_scale(decide(
            "DockerMachinePool",
            &pool(),
            &fetched(
                2,
                "v1.35.4",
                vec![dm("a", &h, 1, true), dm("b", &h, 2, true)],
            ),
        ));
        assert!(s.all_have_provider_ids);
        assert_eq!(s.replicas_ready.reason, reasons::READY);
        assert_eq!((s.create, s.delete.len()), (0, 0));
    }

    #[test]
    fn deletion_removes_every_machine_and_waits_for_none_left() {
        let h = current(1);
        let mut p = pool();
        p.metadata.deletion_timestamp = Some(ts(9));
        let mut f = fetched(
            1,
            "v1.35.4",
            vec![dm("a", &h, 1, true), dm("b", &h, 2, true)],
        );
        f.machines[1].metadata.deletion_timestamp = Some(ts(9));
        assert_eq!(
            decide("DockerMachinePool", &p, &f),
            Plan::Delete(Delete::Remove(vec!["a".into()])),
            "b is going already"
        );
        f.machines.remove(0);
        assert_eq!(
            decide("DockerMachinePool", &p, &f),
            Plan::Delete(Delete::Remove(vec![])),
            "b is still draining"
        );
        f.machines.clear();
        assert_eq!(
            decide("DockerMachinePool", &p, &f),
            Plan::Delete(Delete::Release)
        );
    }

    #[test]
    fn an_instance_without_a_machine_yet_is_left_for_later() {
        let h = current(0);
        let mut fresh = dm("fresh", &h, 2, false);
        fresh.metadata.owner_references.as_mut().unwrap().pop();
        let f = fetched(0, "v1.35.4", vec![dm("a", &h, 1, true), fresh]);
        let s = plan_scale(decide("DockerMachinePool", &pool(), &f));
        assert_eq!(s.delete, ["a"]);
        assert_eq!(s.replicas, 2);
    }
}
