//! `metav1.Condition`-shaped conditions: types, reasons, the desired form a reconcile sets.
//! Setting them (generation, time, the Ready summary) is the lifecycle's status writer's job
//! (`controllers::kit::report::Report`).
//!
//! Our own struct rather than k8s-openapi's: the CRD schema must carry upstream's bounds, and
//! reasons must be validated the same way.
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition types and reasons (upstream CAPD's v1beta2 names, plus ours where upstream has none).
pub mod types {
    pub const READY: &str = "Ready";
    pub const PAUSED: &str = "Paused";
    pub const LOAD_BALANCER_AVAILABLE: &str = "LoadBalancerAvailable";
    pub const CONTAINER_PROVISIONED: &str = "ContainerProvisioned";
    /// DockerMachine (upstream v1.14): the node's init system and container runtime are up.
    pub const CGROUPS_READY: &str = "CGroupsReady";
    /// DockerMachine (upstream v1.14): `preLoadImages` are imported into the node.
    pub const PRE_LOADED_IMAGES_READY: &str = "PreLoadedImagesReady";
    /// DockerMachine (upstream v1.14): the bootstrap commands ran to the success sentinel.
    pub const BOOTSTRAP_COMPLETED: &str = "BootstrapCompleted";
    /// What v1.13 and earlier capd-rs reported instead of the three above; dropped from status.
    pub const LEGACY_BOOTSTRAP_EXEC_SUCCEEDED: &str = "BootstrapExecSucceeded";
    /// DockerMachinePool: every replica exists, is up to date and provisioned.
    pub const REPLICAS_READY: &str = "ReplicasReady";
    /// DevMachine, in-memory backend (upstream v1.14): the fake VM is up (its providerID set).
    pub const VM_PROVISIONED: &str = "VMProvisioned";
    /// DevMachine, in-memory backend: the fake Node exists in the workload cluster.
    pub const NODE_PROVISIONED: &str = "NodeProvisioned";
    /// DevMachine, in-memory backend, control planes only: the fake etcd member is up.
    pub const ETCD_PROVISIONED: &str = "EtcdProvisioned";
    /// DevMachine, in-memory backend, control planes only: the fake API server is up.
    pub const API_SERVER_PROVISIONED: &str = "APIServerProvisioned";
}

pub mod reasons {
    // Shared.
    pub const READY: &str = "Ready";
    pub const NOT_READY: &str = "NotReady";
    pub const READY_UNKNOWN: &str = "ReadyUnknown";
    pub const PAUSED: &str = "Paused";
    pub const NOT_PAUSED: &str = "NotPaused";
    pub const DELETING: &str = "Deleting";
    /// Ours: the Docker Engine could not be reached or failed (5xx).
    pub const DOCKER_UNAVAILABLE: &str = "DockerUnavailable";
    /// Ours: a container with the name we need exists but belongs to someone else.
    pub const NAME_CONFLICT: &str = "ContainerNameConflict";
    /// Ours: the image is missing locally and could not be pulled.
    pub const IMAGE_UNAVAILABLE: &str = "ImageUnavailable";
    // DockerCluster.
    pub const AVAILABLE: &str = "Available";
    pub const NOT_AVAILABLE: &str = "NotAvailable";
    // DockerMachine.
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructureReady";
    pub const WAITING_FOR_CONTROL_PLANE_INITIALIZED: &str = "WaitingForControlPlaneInitialized";
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    // DevMachine, in-memory backend (upstream v1.14).
    /// A phase's startup time (`startupDuration` plus jitter) is not over yet.
    pub const WAITING_FOR_STARTUP_TIMEOUT: &str = "WaitingForStartupTimeout";
    pub const WAITING_FOR_VM_PROVISIONED: &str = "WaitingForVMProvisioned";
    pub const WAITING_FOR_NODE_PROVISIONED: &str = "WaitingForNodeProvisioned";
    /// Upstream's reason for an error while provisioning a phase.
    pub const INTERNAL_ERROR: &str = "InternalError";
    // DevCluster, in-memory backend.
    /// Ours (upstream only returns an error): no port is left for the workload cluster's
    /// fake API server.
    pub const PORT_RANGE_EXHAUSTED: &str = "PortRangeExhausted";
    pub const PROVISIONED: &str = "Provisioned";
    pub const NOT_PROVISIONED: &str = "NotProvisioned";
    pub const NOT_SUCCEEDED: &str = "NotSucceeded";
    /// BootstrapCompleted: done.
    pub const COMPLETED: &str = "Completed";
    /// The bootstrap conditions before there is a container to run in.
    pub const WAITING_FOR_CONTAINER: &str = "WaitingForContainer";
    pub const WAITING_FOR_CGROUPS: &str = "WaitingForCGroups";
    pub const WAITING_FOR_PRELOADED_IMAGES: &str = "WaitingForPreloadedImages";
    /// Ours: bootstrap commands are running right now.
    pub const BOOTSTRAPPING: &str = "Bootstrapping";
    /// Ours: a bootstrap command exited non-zero (terminal: commands are not re-run).
    pub const BOOTSTRAP_FAILED: &str = "BootstrapFailed";
    /// Ours: bootstrap exceeded its timeout.
    pub const BOOTSTRAP_TIMED_OUT: &str = "BootstrapTimedOut";
    /// Ours: the node container stopped while its bootstrap commands ran (`poweroff`, `reboot`,
    /// a command that kills PID 1); terminal until the DockerMachine's spec or the Machine's
    /// bootstrap data Secret changes.
    pub const NODE_STOPPED_DURING_BOOTSTRAP: &str = "NodeStoppedDuringBootstrap";
    /// Ours: a provisioned node container (or the load balancer) keeps stopping; it is started
    /// again with a growing delay.
    pub const CONTAINER_RESTARTING: &str = "ContainerRestarting";
    /// Ours: haproxy rejects the custom haproxy.cfg (`haproxy -c`); the running config is kept.
    pub const INVALID_HAPROXY_CONFIG: &str = "InvalidHAProxyConfig";
    /// Ours: the customHAProxyConfigTemplateRef template does not parse or evaluate (Go
    /// template syntax, upstream's data and functions); the running config is kept.
    pub const INVALID_HAPROXY_CONFIG_TEMPLATE: &str = "InvalidHAProxyConfigTemplate";
    /// Ours: the bootstrap Secret is missing, lacks `value`, or holds data we cannot use.
    pub const BOOTSTRAP_DATA_INVALID: &str = "BootstrapDataInvalid";
    pub const BOOTSTRAP_DATA_NOT_FOUND: &str = "BootstrapDataNotFound";
    /// Ours, an Event only: cloud-config modules a kind-style node cannot honour were skipped.
    pub const BOOTSTRAP_MODULES_SKIPPED: &str = "BootstrapModulesSkipped";
    /// Ours: the spec cannot be acted on (e.g. no version and no customImage).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The workload cluster's kubeconfig Secret asks for more than inline data or another server.
    pub const WORKLOAD_KUBECONFIG_REFUSED: &str = "WorkloadKubeconfigRefused";
    /// A Dev* object asks for a backend other than docker (upstream's in-memory test backend).
    pub const BACKEND_NOT_SERVED: &str = "BackendNotServed";
    /// Ours: the API server refused a status write as invalid (422/400); the message is its.
    pub const STATUS_UPDATE_REJECTED: &str = "StatusUpdateRejected";
    /// Ours: the owner Machine's `spec.infrastructureRef` names another object.
    pub const NOT_MACHINE_INFRASTRUCTURE: &str = "NotMachineInfrastructure";
    // DockerMachinePool (CAPI's MachineSet/MachinePool words).
    pub const SCALING_UP: &str = "ScalingUp";
    pub const SCALING_DOWN: &str = "ScalingDown";
    pub const ROLLING_OUT: &str = "RollingOut";
}

/// Status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of condition in CamelCase.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    #[schemars(regex(
        pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
    ))]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// The `.metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the status last changed.
    pub last_transition_time: DateTime<Utc>,
    /// Machine-readable reason in CamelCase.
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    )]
    pub reason: String,
    /// Human-readable details.
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// What a controller wants a condition to say; time and generation are filled in by [`set`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: String,
}

impl Desired {
    pub fn true_(type_: &'static str, reason: &'static str) -> Self {
        Self {
            type_,
            status: ConditionStatus::True,
            reason,
            message: String::new(),
        }
    }
    pub fn false_(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: ConditionStatus::False,
            reason,
            message: message.into(),
        }
    }
    pub fn unknown(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: ConditionStatus::Unknown,
            reason,
            message: message.into(),
        }
    }
}

/// A status that carries conditions: what the reconcile lifecycle's status writer needs of it.
pub trait WithConditions {
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

macro_rules! with_conditions {
    ($($status:ty),*) => {$(
        impl WithConditions for $status {
            fn conditions(&self) -> &[Condition] {
                self.conditions.as_deref().unwrap_or_default()
            }
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                self.conditions.get_or_insert_with(Vec::new)
            }
        }
    )*};
}
with_conditions!(
    super::DockerClusterStatus,
    super::DockerMachineStatus,
    super::DockerMachinePoolStatus
);

/// The `Paused` condition for the given reasons (empty: not paused).
pub fn paused(why: &[String]) -> Desired {
    if why.is_empty() {
        Desired::false_(types::PAUSED, reasons::NOT_PAUSED, "")
    } else {
        Desired {
            type_: types::PAUSED,
            status: ConditionStatus::True,
            reason: reasons::PAUSED,
            message: why.join(", "),
        }
    }
}

/// `message` cut to at most `max` bytes on a character boundary, ending in `…` when cut: the one
/// way a message that has a limit (a condition, an Event, a log line) is shortened.
pub fn truncate(message: &str, max: usize) -> String {
    const ELLIPSIS: char = '…';
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max.saturating_sub(ELLIPSIS.len_utf8());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", &message[..end])
}

pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True)
}
