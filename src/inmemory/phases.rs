//! The pure decisions of the in-memory backend, as upstream CAPD v1.14 makes them: for one
//! DevMachine, which of its phases (VM → Node → for control planes, etcd and the API server)
//! to provision now, how long to wait for the others, and the conditions to report; for one
//! DevCluster, what to write to its `controlPlaneEndpoint`. Nothing here reads a clock, draws a
//! random number or talks to anything: the caller passes `now`, the jitter draws and the
//! result of its port allocation. The controllers' in-memory arms act on them.
//!
//! Upstream's machine, in order, on every reconcile:
//! 1. Gates: the Cluster's infrastructure is provisioned, then the Machine has bootstrap data
//!    (a worker without it waits for the control plane to be initialized first). A closed gate
//!    sets VMProvisioned False with its reason and every later phase False
//!    `WaitingForVMProvisioned`, and waits for a change (no requeue).
//! 2. VM: provisioned `vm` delay after the VM record's creation.
//! 3. Node: `node` delay after VMProvisioned became True.
//! 4. Control planes only, both from NodeProvisioned becoming True: etcd (`etcd` delay) and the
//!    API server (`apiServer` delay); each waits for the VM, then for the Node.
//! 5. Once the machine's last phase is True (the API server on a control plane, the Node on a
//!    worker), the Machine is annotated [`BOOTSTRAPPED_ANNOTATION`]; a Machine carrying it
//!    skips every delay (how upstream rebuilds its state at once after a restart).
//!
//! A delay is `startupDuration + draw × startupJitter × startupDuration`
//! ([`Provisioning::delay`]). Phases that come due in the same reconcile are provisioned
//! together, the later one timed from `now` (the time the earlier one's condition will carry).
//! The requeue is the shortest wait left.
//!
//! One deliberate difference: upstream re-times every phase on every reconcile with a new
//! draw, so a phase already True can turn False again; here a phase whose condition is True
//! stays provisioned (its objects must exist, see [`PhaseState::Provisioned`]).
use std::{collections::BTreeMap, time::Duration};

use chrono::{DateTime, TimeDelta, Utc};

use super::spec::{Draw, InMemoryMachineSpec, Provisioning};
use crate::api::{
    common::ApiEndpoint,
    conditions::{Condition, ConditionStatus, Desired, reasons, types},
};

/// On a Machine once its in-memory DevMachine is fully provisioned; it makes every phase skip
/// its delay (upstream's name, kept so that clusters move between upstream and capd-rs).
pub const BOOTSTRAPPED_ANNOTATION: &str =
    "machine.inmemory.infrastructure.cluster.x-k8s.io/bootstrapped";

/// On an in-memory DevCluster: the name of its listener, `<namespace>/<cluster>`.
pub const LISTENER_ANNOTATION: &str = "inmemorycluster.infrastructure.cluster.x-k8s.io/listener";

/// The scheme of an in-memory machine's providerID.
pub const PROVIDER_ID_PREFIX: &str = "in-memory://";

/// Upstream's port range for the workload clusters' fake API servers (both ends included).
pub const DEFAULT_MIN_PORT: u16 = 20000;
pub const DEFAULT_MAX_PORT: u16 = 30000;

/// The port capd-rs's DevCluster schema defaulted `spec.controlPlaneEndpoint.port` to on every
/// backend before it stopped defaulting it (upstream's webhook defaults it for the docker
/// backend only). Objects and templates written then still carry it. Without a host it says
/// nothing, and a port is allocated instead.
pub const SCHEMA_DEFAULT_PORT: i32 = 6443;

/// How soon upstream looks again after moving an endpoint to a new host.
pub const HOST_MOVED_REQUEUE: Duration = Duration::from_secs(1);

/// An in-memory machine's providerID: `in-memory://<DevMachine name>` (its Node has the same
/// name as the DevMachine).
pub fn provider_id(dev_machine: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{dev_machine}")
}

/// The listener (and object store group) of a workload cluster: `<namespace>/<cluster>`.
pub fn listener_name(namespace: &str, cluster: &str) -> String {
    format!("{namespace}/{cluster}")
}

/// Whether a Machine's annotations carry [`BOOTSTRAPPED_ANNOTATION`] (any value).
pub fn has_bootstrapped_annotation(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| a.contains_key(BOOTSTRAPPED_ANNOTATION))
}

/// A phase of an in-memory machine, in upstream's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Vm,
    Node,
    Etcd,
    ApiServer,
}

const WORKER_PHASES: &[Phase] = &[Phase::Vm, Phase::Node];
const CONTROL_PLANE_PHASES: &[Phase] = &[Phase::Vm, Phase::Node, Phase::Etcd, Phase::ApiServer];
const WORKER_CONDITIONS: &[&str] = &[types::VM_PROVISIONED, types::NODE_PROVISIONED];
const CONTROL_PLANE_CONDITIONS: &[&str] = &[
    types::VM_PROVISIONED,
    types::NODE_PROVISIONED,
    types::ETCD_PROVISIONED,
    types::API_SERVER_PROVISIONED,
];

impl Phase {
    /// The phases of a machine: all four for a control plane, VM and Node for a worker.
    pub fn of(control_plane: bool) -> &'static [Phase] {
        if control_plane {
            CONTROL_PLANE_PHASES
        } else {
            WORKER_PHASES
        }
    }

    /// The condition that reports this phase.
    pub fn condition_type(self) -> &'static str {
        match self {
            Phase::Vm => types::VM_PROVISIONED,
            Phase::Node => types::NODE_PROVISIONED,
            Phase::Etcd => types::ETCD_PROVISIONED,
            Phase::ApiServer => types::API_SERVER_PROVISIONED,
        }
    }

    fn provisioning(self, spec: &InMemoryMachineSpec) -> Option<&Provisioning> {
        match self {
            Phase::Vm => spec.vm.as_ref(),
            Phase::Node => spec.node.as_ref(),
            Phase::Etcd => spec.etcd.as_ref(),
            Phase::ApiServer => spec.api_server.as_ref(),
        }
    }
}

/// The conditions an in-memory machine's Ready summarises (upstream's, by role).
pub const fn ready_from(control_plane: bool) -> &'static [&'static str] {
    if control_plane {
        CONTROL_PLANE_CONDITIONS
    } else {
        WORKER_CONDITIONS
    }
}

/// One jitter draw per phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Draws {
    pub vm: Draw,
    pub node: Draw,
    pub etcd: Draw,
    pub api_server: Draw,
}

impl Draws {
    /// The same draw for every phase.
    pub fn all(draw: Draw) -> Self {
        Self {
            vm: draw,
            node: draw,
            etcd: draw,
            api_server: draw,
        }
    }

    fn get(&self, phase: Phase) -> Draw {
        match phase {
            Phase::Vm => self.vm,
            Phase::Node => self.node,
            Phase::Etcd => self.etcd,
            Phase::ApiServer => self.api_server,
        }
    }
}

/// Since when each phase is provisioned: its condition's lastTransitionTime while it is True.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Provisioned {
    pub vm: Option<DateTime<Utc>>,
    pub node: Option<DateTime<Utc>>,
    pub etcd: Option<DateTime<Utc>>,
    pub api_server: Option<DateTime<Utc>>,
}

impl Provisioned {
    /// Read from a DevMachine's conditions: a phase is provisioned while its condition is True.
    pub fn from_conditions(conditions: &[Condition]) -> Self {
        let since = |phase: Phase| {
            conditions
                .iter()
                .find(|c| c.type_ == phase.condition_type())
                .filter(|c| c.status == ConditionStatus::True)
                .map(|c| c.last_transition_time)
        };
        Self {
            vm: since(Phase::Vm),
            node: since(Phase::Node),
            etcd: since(Phase::Etcd),
            api_server: since(Phase::ApiServer),
        }
    }

    fn get(&self, phase: Phase) -> Option<DateTime<Utc>> {
        match phase {
            Phase::Vm => self.vm,
            Phase::Node => self.node,
            Phase::Etcd => self.etcd,
            Phase::ApiServer => self.api_server,
        }
    }
}

/// What the machine's decision reads, besides its spec and the draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineFacts {
    /// The Machine is a control plane's (CAPI's `cluster.x-k8s.io/control-plane` label).
    pub control_plane: bool,
    /// The Machine carries [`BOOTSTRAPPED_ANNOTATION`].
    pub bootstrapped: bool,
    /// The Cluster's `status.initialization.infrastructureProvisioned`.
    pub cluster_infrastructure_provisioned: bool,
    /// The Cluster's ControlPlaneInitialized condition is True.
    pub control_plane_initialized: bool,
    /// The Machine's `spec.bootstrap.dataSecretName` is set.
    pub bootstrap_data: bool,
    /// When the VM record was created: the VM's delay counts from here.
    pub vm_created: DateTime<Utc>,
    /// The phases already provisioned, and since when.
    pub provisioned: Provisioned,
    pub now: DateTime<Utc>,
}

/// Where a phase stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseState {
    /// Provisioned since then (its condition is True): its objects must exist (after a restart
    /// the caller recreates them, without a delay).
    Provisioned { since: DateTime<Utc> },
    /// Its delay is over (or the Machine is bootstrapped): provision it in this reconcile.
    ProvisionNow,
    /// Its delay runs until then.
    Starting { until: DateTime<Utc> },
    /// It waits for something else; the reason says what.
    Waiting { reason: &'static str },
}

impl PhaseState {
    /// Provisioned, or to be in this reconcile.
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Provisioned { .. } | Self::ProvisionNow)
    }

    fn condition(&self, phase: Phase) -> Desired {
        let type_ = phase.condition_type();
        match *self {
            Self::Provisioned { .. } | Self::ProvisionNow => {
                Desired::true_(type_, reasons::PROVISIONED)
            }
            Self::Starting { .. } => {
                Desired::false_(type_, reasons::WAITING_FOR_STARTUP_TIMEOUT, "")
            }
            Self::Waiting { reason } => Desired::false_(type_, reason, ""),
        }
    }
}

/// What to do with one in-memory machine now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachinePlan {
    /// Each of the machine's phases ([`Phase::of`]), in order.
    pub phases: Vec<(Phase, PhaseState)>,
    /// The condition of each phase, in the same order (Ready is the caller's summary of them,
    /// [`ready_from`]).
    pub conditions: Vec<Desired>,
    /// The shortest delay still running, if any.
    pub requeue_after: Option<Duration>,
    /// Annotate the Machine [`BOOTSTRAPPED_ANNOTATION`] (its last phase is done, and it is not
    /// annotated yet).
    pub annotate_bootstrapped: bool,
}

impl MachinePlan {
    pub fn state(&self, phase: Phase) -> Option<PhaseState> {
        self.phases
            .iter()
            .find(|(p, _)| *p == phase)
            .map(|(_, s)| *s)
    }

    /// The phases to provision in this reconcile, in order.
    pub fn provision_now(&self) -> Vec<Phase> {
        self.phases
            .iter()
            .filter(|(_, s)| *s == PhaseState::ProvisionNow)
            .map(|(p, _)| *p)
            .collect()
    }
}

/// A delay that does not fit a timestamp (only with durations of centuries on a clock far off).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PhaseError {
    #[error("the {0:?} phase's delay runs past the last representable time")]
    TimeOutOfRange(Phase),
}

/// Decides what to do with one in-memory machine (see the module's documentation).
pub fn decide_machine(
    spec: &InMemoryMachineSpec,
    facts: &MachineFacts,
    draws: &Draws,
) -> Result<MachinePlan, PhaseError> {
    let phases = Phase::of(facts.control_plane);

    let gate = if !facts.cluster_infrastructure_provisioned {
        Some(reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE)
    } else if !facts.bootstrap_data {
        Some(
            if !facts.control_plane && !facts.control_plane_initialized {
                reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZED
            } else {
                reasons::WAITING_FOR_BOOTSTRAP_DATA
            },
        )
    } else {
        None
    };

    let mut states: Vec<(Phase, PhaseState)> = Vec::with_capacity(phases.len());
    if let Some(reason) = gate {
        for &phase in phases {
            let reason = if phase == Phase::Vm {
                reason
            } else {
                reasons::WAITING_FOR_VM_PROVISIONED
            };
            states.push((phase, PhaseState::Waiting { reason }));
        }
        return Ok(plan(states, facts, false));
    }

    // When a phase is (or is about to be) provisioned: what the next phase's delay counts from.
    let done_at = |state: PhaseState| match state {
        PhaseState::Provisioned { since } => Some(since),
        PhaseState::ProvisionNow => Some(facts.now),
        _ => None,
    };
    let timed = |phase: Phase, start: DateTime<Utc>| -> Result<PhaseState, PhaseError> {
        if let Some(since) = facts.provisioned.get(phase) {
            return Ok(PhaseState::Provisioned { since });
        }
        if facts.bootstrapped {
            return Ok(PhaseState::ProvisionNow);
        }
        let delay = phase
            .provisioning(spec)
            .map_or(Duration::ZERO, |p| p.delay(draws.get(phase)));
        let until = TimeDelta::from_std(delay)
            .ok()
            .and_then(|d| start.checked_add_signed(d))
            .ok_or(PhaseError::TimeOutOfRange(phase))?;
        Ok(if facts.now < until {
            PhaseState::Starting { until }
        } else {
            PhaseState::ProvisionNow
        })
    };

    let vm = timed(Phase::Vm, facts.vm_created)?;
    states.push((Phase::Vm, vm));
    let vm_at = done_at(vm);

    let node = match vm_at {
        None => PhaseState::Waiting {
            reason: reasons::WAITING_FOR_VM_PROVISIONED,
        },
        Some(start) => timed(Phase::Node, start)?,
    };
    states.push((Phase::Node, node));
    let node_at = done_at(node);

    for &phase in &phases[2..] {
        let state = match (vm_at, node_at) {
            (None, _) => PhaseState::Waiting {
                reason: reasons::WAITING_FOR_VM_PROVISIONED,
            },
            (Some(_), None) => PhaseState::Waiting {
                reason: reasons::WAITING_FOR_NODE_PROVISIONED,
            },
            (Some(_), Some(start)) => timed(phase, start)?,
        };
        states.push((phase, state));
    }

    let last = if facts.control_plane {
        Phase::ApiServer
    } else {
        Phase::Node
    };
    let complete = states.iter().any(|(p, s)| *p == last && s.is_done());
    Ok(plan(states, facts, complete && !facts.bootstrapped))
}

fn plan(
    phases: Vec<(Phase, PhaseState)>,
    facts: &MachineFacts,
    annotate_bootstrapped: bool,
) -> MachinePlan {
    let conditions = phases.iter().map(|(p, s)| s.condition(*p)).collect();
    let requeue_after = phases
        .iter()
        .filter_map(|(_, s)| match s {
            PhaseState::Starting { until } => (*until - facts.now).to_std().ok(),
            _ => None,
        })
        .min();
    MachinePlan {
        phases,
        conditions,
        requeue_after,
        annotate_bootstrapped,
    }
}

/// What an in-memory DevCluster's endpoint decision reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterFacts<'a> {
    /// `spec.controlPlaneEndpoint`.
    pub endpoint: Option<&'a ApiEndpoint>,
    /// `status.initialization.provisioned`.
    pub provisioned: bool,
    /// The host this process's listeners bind (its pod IP).
    pub host: &'a str,
}

/// A `spec.controlPlaneEndpoint.port` that is no TCP port (the schema allows 1-65535 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.controlPlaneEndpoint.port {0} is not a TCP port (1-65535)")]
pub struct BadPort(pub i32);

/// Which port the cluster's listener takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortRequest {
    /// The endpoint's own (after a restart, an adoption, or a port the user chose); an
    /// allocator must not hand it out again.
    Keep(u16),
    /// The allocator's next free port.
    Allocate,
}

/// What the port allocator answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortAllocation {
    Port(u16),
    /// No port left in the range (both ends included).
    Exhausted {
        min: u16,
        max: u16,
    },
}

/// The first half of a DevCluster's reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterStep {
    /// Provisioned on another host (the pod moved, or restarted with a new IP): write the new
    /// host, same port, to `spec.controlPlaneEndpoint` and to the server of the
    /// `<cluster>-kubeconfig` Secret, and look again after `requeue_after`.
    MoveHost {
        endpoint: ApiEndpoint,
        kubeconfig_server: String,
        requeue_after: Duration,
    },
    /// Reserve the listener's port, then decide with [`cluster_listened`].
    Listen(PortRequest),
}

fn port(p: i32) -> Result<u16, BadPort> {
    u16::try_from(p).ok().filter(|p| *p != 0).ok_or(BadPort(p))
}

/// `https://host:port`, the host bracketed when it is an IPv6 address (as Go's JoinHostPort).
pub fn server_url(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// Decides the first half of an in-memory DevCluster's reconcile.
pub fn cluster_step(facts: &ClusterFacts<'_>) -> Result<ClusterStep, BadPort> {
    let host = facts.endpoint.and_then(|e| e.host.as_deref());
    let given = facts.endpoint.and_then(|e| e.port).map(port).transpose()?;
    if let (true, Some(p)) = (facts.provisioned, given)
        && host != Some(facts.host)
    {
        return Ok(ClusterStep::MoveHost {
            endpoint: ApiEndpoint {
                host: Some(facts.host.to_owned()),
                port: Some(i32::from(p)),
            },
            kubeconfig_server: server_url(facts.host, p),
            requeue_after: HOST_MOVED_REQUEUE,
        });
    }
    Ok(ClusterStep::Listen(match (host, given) {
        (Some(_), Some(p)) => PortRequest::Keep(p),
        (None, Some(p)) if i32::from(p) != SCHEMA_DEFAULT_PORT => PortRequest::Keep(p),
        _ => PortRequest::Allocate,
    }))
}

/// What to write once the listener's port is known.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterPlan {
    /// The new `spec.controlPlaneEndpoint` (None: leave it as it is).
    pub endpoint: Option<ApiEndpoint>,
    /// Set `status.initialization.provisioned` true.
    pub provisioned: bool,
    /// The condition to report, if any (upstream reports none but Paused).
    pub condition: Option<Desired>,
}

/// Decides the second half of an in-memory DevCluster's reconcile: the endpoint is written
/// once, when it has no host yet (this host and the listener's port; a host that differs from
/// this one is replaced by [`ClusterStep::MoveHost`] once provisioned, as upstream).
/// With no port left, nothing is written and Ready says [`reasons::PORT_RANGE_EXHAUSTED`]
/// (upstream returns an error, and says so in its log only).
pub fn cluster_listened(facts: &ClusterFacts<'_>, allocation: PortAllocation) -> ClusterPlan {
    match allocation {
        PortAllocation::Port(p) => {
            let has_host = facts.endpoint.is_some_and(|e| e.host.is_some());
            ClusterPlan {
                endpoint: (!has_host).then(|| ApiEndpoint {
                    host: Some(facts.host.to_owned()),
                    port: Some(i32::from(p)),
                }),
                provisioned: true,
                condition: None,
            }
        }
        PortAllocation::Exhausted { min, max } => ClusterPlan {
            endpoint: None,
            provisioned: false,
            condition: Some(Desired::false_(
                types::READY,
                reasons::PORT_RANGE_EXHAUSTED,
                format!(
                    "no free port left in {min}-{max} for the workload cluster's API server; \
                     delete another in-memory cluster or widen the range"
                ),
            )),
        },
    }
}

#[cfg(test)]
mod tests;
