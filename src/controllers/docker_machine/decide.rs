//! The pure part of a DockerMachine reconcile: from the object and its owners, what to do.
//! No API server, no Docker: every branch is unit-tested below.
use std::sync::Arc;

use kube::ResourceExt;

use super::Machines;

use crate::{
    api::{
        DockerCluster, DockerMachine, DockerMachineStatus,
        conditions::{self, Desired, reasons, types},
    },
    capi::{self, Cluster, Machine},
    controllers::kit::{
        lifecycle::{Decide, Facts},
        report::Report,
    },
};

/// The status a DockerMachine reconcile builds.
pub type Status = Report<DockerMachineStatus>;

/// The objects a DockerMachine reconcile reads, fetched once (from the caches).
#[derive(Clone, Debug, Default)]
pub struct Owners {
    pub machine: Option<Arc<Machine>>,
    pub cluster: Option<Arc<Cluster>>,
    pub docker_cluster: Option<Arc<DockerCluster>>,
    /// From the Machine, else the DockerMachine's cluster-name label (a deleted Machine).
    pub cluster_name: Option<String>,
}

/// A DockerMachine whose Machine and Cluster exist.
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    pub machine: Arc<Machine>,
    pub cluster: Arc<Cluster>,
    pub cluster_name: String,
    pub namespace: String,
}

impl Bound {
    /// A control-plane Machine being deleted leaves the load balancer before anything else.
    pub fn leaves_load_balancer(&self) -> bool {
        self.machine.is_control_plane() && self.machine.metadata.deletion_timestamp.is_some()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Normal {
    /// Not yet: `ContainerProvisioned` says why.
    Wait(Desired),
    /// Provisioned earlier: report the container, bring a stopped one back; never bootstrap again.
    Refresh(Bound),
    /// Create (or adopt) the node container and bootstrap it from this Secret.
    Provision(Bound, String),
}

/// The pure half of the DockerMachine controller.
impl Decide for Machines {
    type Object = DockerMachine;
    type Normal = Normal;
    /// The cluster's name, if known (the Machine and the Cluster may be gone).
    type Delete = Option<String>;

    fn decide_normal(dm: &DockerMachine, owners: &Owners, bound: Bound) -> Normal {
        normal(dm, owners.docker_cluster.as_deref(), bound)
    }

    fn decide_delete(_: &DockerMachine, owners: &Owners) -> Option<String> {
        owners.cluster_name.clone()
    }
}

/// Pure: what the lifecycle's gate reads of a DockerMachine's owners.
pub fn facts(kind: &str, dm: &DockerMachine, o: &Owners) -> Facts<Bound> {
    let ns = dm.namespace().unwrap_or_default();
    let bound = match (&o.machine, &o.cluster, &o.cluster_name) {
        (None, _, _) => Err(format!("owner Machine {ns}/{} not found", owner_name(dm))),
        (Some(_), None, name) => Err(format!(
            "Cluster {ns}/{} of Machine {} not found",
            name.as_deref()
                .unwrap_or("<no cluster.x-k8s.io/cluster-name label>"),
            owner_name(dm)
        )),
        (Some(machine), Some(cluster), Some(cluster_name)) => Ok(Bound {
            machine: machine.clone(),
            cluster: cluster.clone(),
            cluster_name: cluster_name.clone(),
            namespace: ns,
        }),
        (Some(_), Some(_), None) => Err("the Machine has no cluster name".into()),
    };
    Facts {
        bound,
        named_elsewhere: o.machine.as_ref().and_then(|m| not_named_by(kind, dm, m)),
        cluster: o.cluster.clone(),
    }
}

/// Pure: why the cluster's load balancer is not serving after it did (removed, stopped, being
/// created again), from its DockerCluster's `LoadBalancerAvailable`; `None` while it serves, or
/// only its configuration is refused (the running one is kept).
pub fn load_balancer_down(dc: &DockerCluster) -> Option<&str> {
    let status = dc.status.as_ref()?;
    let provisioned = status.initialization.as_ref().and_then(|i| i.provisioned);
    let lb = conditions::get(
        status.conditions.as_deref()?,
        types::LOAD_BALANCER_AVAILABLE,
    )?;
    (provisioned == Some(true)
        && lb.status == conditions::ConditionStatus::False
        && [reasons::NOT_AVAILABLE, reasons::CONTAINER_RESTARTING].contains(&lb.reason.as_str()))
    .then_some(lb.message.as_str())
}

/// Pure: what a DockerMachine whose Machine and Cluster exist does next.
pub fn normal(dm: &DockerMachine, dc: Option<&DockerCluster>, bound: Bound) -> Normal {
    if !bound.cluster.infrastructure_provisioned() {
        return Normal::Wait(Desired::false_(
            types::CONTAINER_PROVISIONED,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            "Waiting for the Cluster's infrastructure to be provisioned",
        ));
    }
    if dm
        .spec
        .provider_id
        .as_deref()
        .is_some_and(|p| !p.is_empty())
    {
        return Normal::Refresh(bound);
    }
    // A node created now could not join (its bootstrap dials the endpoint), and its container
    // would race the new LB for the endpoint's address, which the engine gives to whichever
    // container asks first once it is released.
    if let Some(why) = dc.and_then(load_balancer_down) {
        return Normal::Wait(Desired::false_(
            types::CONTAINER_PROVISIONED,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!("Waiting for the cluster's load balancer: {why}"),
        ));
    }
    let Some(secret) = bound.machine.data_secret_name().map(str::to_string) else {
        return Normal::Wait(
            if !bound.machine.is_control_plane() && !bound.cluster.control_plane_initialized() {
                Desired::false_(
                    types::CONTAINER_PROVISIONED,
                    reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZED,
                    "Waiting for the control plane to be initialized",
                )
            } else {
                Desired::false_(
                    types::CONTAINER_PROVISIONED,
                    reasons::WAITING_FOR_BOOTSTRAP_DATA,
                    "Waiting for Machine.spec.bootstrap.dataSecretName",
                )
            },
        );
    };
    Normal::Provision(bound, secret)
}

/// `None` when the Machine's `spec.infrastructureRef` names `dm` (group, kind, name; same
/// namespace by the contract), else the condition saying whom it names. A Machine of a
/// MachinePool names its DockerMachine the same way (CAPI v1.14 sets the ref when it creates
/// the Machine for the pool's instance).
fn not_named_by(kind: &str, dm: &DockerMachine, machine: &Machine) -> Option<Desired> {
    let name = dm.name_any();
    let named = machine
        .spec
        .infrastructure_ref
        .as_ref()
        .and_then(|r| r.name_if(crate::api::GROUP, kind));
    if named == Some(name.as_str()) {
        return None;
    }
    let ns = dm.namespace().unwrap_or_default();
    let machine_name = machine.name_any();
    let whom = match machine.spec.infrastructure_ref.as_ref() {
        Some(r) => format!(
            "{} {}",
            r.kind.as_deref().unwrap_or("<no kind>"),
            r.name.as_deref().unwrap_or("<no name>")
        ),
        None => "nothing".into(),
    };
    Some(Desired::false_(
        types::CONTAINER_PROVISIONED,
        reasons::NOT_MACHINE_INFRASTRUCTURE,
        format!(
            "Machine {ns}/{machine_name} owns this {kind} but its spec.infrastructureRef names {whom}: \
             not provisioned (it would get that Machine's bootstrap data)"
        ),
    ))
}

fn owner_name(dm: &DockerMachine) -> String {
    capi::capi_owner(&dm.metadata, "Machine")
        .map(|o| o.name.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    use super::*;
    use crate::controllers::docker_machine::{FINALIZER, Machines};
    use crate::{
        api::DockerMachineSpec,
        capi::{
            Bootstrap, ClusterInitialization, ClusterSpec, ClusterStatus, ContractRef, MachineSpec,
        },
        controllers::kit::lifecycle::{Gate, Plan, PlanOf},
    };

    fn dm() -> DockerMachine {
        let mut dm = DockerMachine::new("m", DockerMachineSpec::default());
        dm.metadata.namespace = Some("ns".into());
        dm.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            name: "m".into(),
            uid: "mu".into(),
            ..Default::default()
        }]);
        dm
    }

    fn owners(infra: bool, cp_initialized: bool, secret: Option<&str>, cp: bool) -> Owners {
        let mut machine = Machine::new(
            "m",
            MachineSpec {
                cluster_name: Some("c".into()),
                infrastructure_ref: Some(infra_ref("DockerMachine", "m")),
                bootstrap: Some(Bootstrap {
                    data_secret_name: secret.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        if cp {
            machine.metadata.labels =
                Some([(capi::CONTROL_PLANE_LABEL.to_string(), String::new())].into());
        }
        let mut cluster = Cluster::new("c", ClusterSpec::default());
        cluster.status = Some(ClusterStatus {
            initialization: Some(ClusterInitialization {
                infrastructure_provisioned: Some(infra),
                control_plane_initialized: Some(cp_initialized),
            }),
            ..Default::default()
        });
        Owners {
            machine: Some(Arc::new(machine)),
            cluster: Some(Arc::new(cluster)),
            docker_cluster: None,
            cluster_name: Some("c".into()),
        }
    }

    fn infra_ref(kind: &str, name: &str) -> ContractRef {
        ContractRef {
            api_group: Some(crate::api::GROUP.into()),
            kind: Some(kind.into()),
            name: Some(name.into()),
        }
    }

    fn decide(kind: &str, dm: &DockerMachine, o: &Owners) -> PlanOf<Machines> {
        crate::controllers::kit::lifecycle::decide::<Machines>(kind, dm, o)
    }

    fn reason(plan: PlanOf<Machines>) -> &'static str {
        match plan {
            Plan::Normal(Normal::Wait(d)) => d.reason,
            other => panic!("not a wait: {other:?}"),
        }
    }

    #[test]
    fn a_new_node_waits_while_the_clusters_load_balancer_is_down() {
        use crate::api::{
            DockerClusterStatus,
            common::Initialization,
            conditions::{Condition, ConditionStatus},
        };
        let dc = |provisioned: bool, status: ConditionStatus, reason: &str| {
            let mut dc = DockerCluster::new("c", Default::default());
            dc.status = Some(DockerClusterStatus {
                initialization: Some(Initialization {
                    provisioned: Some(provisioned),
                }),
                conditions: Some(vec![Condition {
                    type_: types::LOAD_BALANCER_AVAILABLE.into(),
                    status,
                    reason: reason.into(),
                    message: "container c-lb is being removed".into(),
                    observed_generation: None,
                    last_transition_time: chrono::Utc::now(),
                }]),
                ..Default::default()
            });
            dc
        };
        let down = dc(true, ConditionStatus::False, reasons::NOT_AVAILABLE);
        assert_eq!(
            load_balancer_down(&down),
            Some("container c-lb is being removed")
        );
        let restarting = dc(true, ConditionStatus::False, reasons::CONTAINER_RESTARTING);
        assert!(load_balancer_down(&restarting).is_some());
        // Up; never provisioned yet (CAPI's infrastructure gate waits then); or only its
        // configuration refused while the old one keeps serving.
        for up in [
            dc(true, ConditionStatus::True, reasons::AVAILABLE),
            dc(false, ConditionStatus::False, reasons::NOT_AVAILABLE),
            dc(
                true,
                ConditionStatus::False,
                reasons::INVALID_HAPROXY_CONFIG_TEMPLATE,
            ),
        ] {
            assert_eq!(load_balancer_down(&up), None, "{:?}", up.status);
        }

        let o = owners(true, true, Some("s"), false);
        let bound = || Bound {
            machine: o.machine.clone().unwrap(),
            cluster: o.cluster.clone().unwrap(),
            cluster_name: "c".into(),
            namespace: "ns".into(),
        };
        match normal(&dm(), Some(&down), bound()) {
            Normal::Wait(d) => {
                assert_eq!(d.reason, reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE);
                assert!(d.message.contains("being removed"), "{}", d.message);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            normal(&dm(), Some(&restarting), bound()),
            Normal::Wait(_)
        ));
        // A provisioned machine is not held back: it only refreshes its container.
        let mut provisioned = dm();
        provisioned.spec.provider_id = Some("docker:////c-m".into());
        assert!(matches!(
            normal(&provisioned, Some(&down), bound()),
            Normal::Refresh(_)
        ));
        assert!(matches!(
            normal(
                &dm(),
                Some(&dc(true, ConditionStatus::True, "Available")),
                bound()
            ),
            Normal::Provision(..)
        ));
    }

    #[test]
    fn an_unserved_backend_is_reported_before_anything_else() {
        let mut view = dm();
        view.metadata.annotations = Some(
            [(
                crate::api::dev::UNSERVED_BACKEND.to_string(),
                "inMemory".to_string(),
            )]
            .into(),
        );
        assert_eq!(
            decide("DevMachine", &view, &Owners::default()),
            Plan::Gate(Gate::Unserved("inMemory".into())),
            "no owners needed to say so"
        );
    }

    #[test]
    fn owner_and_management() {
        let mut orphan = dm();
        orphan.metadata.owner_references = None;
        assert_eq!(
            decide("DockerMachine", &orphan, &Owners::default()),
            Plan::Gate(Gate::AwaitOwner)
        );
        orphan.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(
            decide("DockerMachine", &orphan, &Owners::default()),
            Plan::Gate(Gate::Release)
        );

        let mut managed = dm();
        managed.metadata.annotations =
            Some([(capi::MANAGED_BY_ANNOTATION.to_string(), "x".into())].into());
        assert_eq!(
            decide("DockerMachine", &managed, &owners(true, true, None, false)),
            Plan::Gate(Gate::LeaveAlone)
        );
        managed.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        managed.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert!(
            matches!(
                decide("DockerMachine", &managed, &owners(true, true, None, false)),
                Plan::Delete(_)
            ),
            "our finalizer is honoured even when managed elsewhere"
        );
    }

    #[test]
    fn missing_owners_wait_but_deletion_does_not() {
        let mut o = owners(true, true, Some("s"), false);
        o.cluster = None;
        assert!(
            matches!(decide("DockerMachine", &dm(), &o), Plan::Gate(Gate::Missing(m)) if m.contains("Cluster ns/c"))
        );
        o.machine = None;
        assert!(
            matches!(decide("DockerMachine", &dm(), &o), Plan::Gate(Gate::Missing(m)) if m.contains("Machine ns/m"))
        );
        let mut deleting = dm();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(
            decide("DockerMachine", &deleting, &o),
            Plan::Delete(Some("c".into()))
        );
    }

    #[test]
    fn paused_wins_over_everything_but_ownership() {
        let mut o = owners(true, true, Some("s"), false);
        Arc::make_mut(o.cluster.as_mut().unwrap()).spec.paused = Some(true);
        assert!(
            matches!(decide("DockerMachine", &dm(), &o), Plan::Gate(Gate::Paused(why)) if why.len() == 1)
        );
        let mut deleting = dm();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(matches!(
            decide("DockerMachine", &deleting, &o),
            Plan::Gate(Gate::Paused(_))
        ));
    }

    #[test]
    fn waits_in_contract_order() {
        assert_eq!(
            reason(decide(
                "DockerMachine",
                &dm(),
                &owners(false, false, Some("s"), false)
            )),
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE
        );
        assert_eq!(
            reason(decide(
                "DockerMachine",
                &dm(),
                &owners(true, false, None, false)
            )),
            reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZED
        );
        assert_eq!(
            reason(decide(
                "DockerMachine",
                &dm(),
                &owners(true, false, None, true)
            )),
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            "a control-plane machine does not wait for an initialized control plane"
        );
        assert_eq!(
            reason(decide(
                "DockerMachine",
                &dm(),
                &owners(true, true, None, false)
            )),
            reasons::WAITING_FOR_BOOTSTRAP_DATA
        );
    }

    #[test]
    fn provision_then_refresh() {
        let o = owners(true, true, Some("s"), true);
        match decide("DockerMachine", &dm(), &o) {
            Plan::Normal(Normal::Provision(b, secret)) => {
                assert_eq!((b.cluster_name.as_str(), secret.as_str()), ("c", "s"));
                assert!(!b.leaves_load_balancer());
            }
            other => panic!("{other:?}"),
        }
        let mut provisioned = dm();
        provisioned.spec.provider_id = Some("docker:////c-m".into());
        let mut o = o;
        Arc::make_mut(o.machine.as_mut().unwrap())
            .metadata
            .deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        match decide("DockerMachine", &provisioned, &o) {
            Plan::Normal(Normal::Refresh(b)) => assert!(b.leaves_load_balancer()),
            other => panic!("{other:?}"),
        }
    }

    /// An ownerRef alone does not make a DockerMachine the Machine's: the Machine must name it
    /// back, or an impostor gets the bootstrap Secret and the container name.
    #[test]
    fn a_machine_that_names_another_infrastructure_provisions_nothing() {
        let o = owners(true, true, Some("s"), true);
        let mut impostor = dm();
        impostor.metadata.name = Some("impostor".into());
        for refs in [
            Some(infra_ref("DockerMachine", "m")),
            Some(infra_ref("DevMachine", "impostor")),
            Some(ContractRef {
                api_group: Some("other.example.com".into()),
                ..infra_ref("DockerMachine", "impostor")
            }),
            None,
        ] {
            let mut o = o.clone();
            Arc::make_mut(o.machine.as_mut().unwrap())
                .spec
                .infrastructure_ref = refs.clone();
            for view in [impostor.clone(), {
                let mut p = impostor.clone();
                p.spec.provider_id = Some("docker:////c-m".into());
                p
            }] {
                match decide("DockerMachine", &view, &o) {
                    Plan::Gate(Gate::NotInfrastructure(d)) => {
                        assert_eq!(d.type_, types::CONTAINER_PROVISIONED);
                        assert_eq!(d.reason, reasons::NOT_MACHINE_INFRASTRUCTURE);
                        assert!(d.message.contains("ns/m"), "{}", d.message);
                    }
                    other => panic!("{refs:?}: {other:?}"),
                }
            }
        }
        // The one it names is provisioned; so is a DevMachine its Machine names.
        assert!(matches!(
            decide("DockerMachine", &dm(), &o),
            Plan::Normal(Normal::Provision(..))
        ));
        let mut dev = o.clone();
        Arc::make_mut(dev.machine.as_mut().unwrap())
            .spec
            .infrastructure_ref = Some(infra_ref("DevMachine", "m"));
        assert!(matches!(
            decide("DevMachine", &dm(), &dev),
            Plan::Normal(Normal::Provision(..))
        ));
        // Deleting an impostor is not refused: it removes only what carries its own UID.
        impostor.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(matches!(
            decide("DockerMachine", &impostor, &o),
            Plan::Delete(_)
        ));
    }
}
