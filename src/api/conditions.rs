//! `metav1.Condition`-shaped conditions, and the pure helpers to set and summarize them.
//!
//! Our own struct rather than k8s-openapi's: the CRD schema must carry upstream's bounds, and
//! reasons must be validated the same way.
use chrono::{DateTime, SubsecRound, Utc};
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

/// Messages are capped well below the schema's 32 KiB so one noisy command cannot bloat status.
const MAX_MESSAGE: usize = 4096;

fn cap_message(message: &str) -> String {
    truncate(message, MAX_MESSAGE)
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

/// Set `desired` in `conditions`. `lastTransitionTime` moves only when the status changes;
/// returns true if anything changed.
/// Conditions computed from generation `from` now carry `to`: the object's generation after a
/// spec write of the reconcile's own that none of them depends on (see
/// `controllers::kit::patch::Patcher::observed_generation`).
pub fn restamp(conditions: &mut [Condition], from: Option<i64>, to: Option<i64>) {
    if from == to {
        return;
    }
    for c in conditions
        .iter_mut()
        .filter(|c| c.observed_generation == from)
    {
        c.observed_generation = to;
    }
}

pub fn set(
    conditions: &mut Vec<Condition>,
    desired: &Desired,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    let message = cap_message(&desired.message);
    let now = now.trunc_subsecs(0);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == desired.type_) {
        let changed = existing.status != desired.status
            || existing.reason != desired.reason
            || existing.message != message
            || existing.observed_generation != generation;
        if existing.status != desired.status {
            existing.last_transition_time = now;
        }
        existing.status = desired.status;
        existing.reason = desired.reason.to_string();
        existing.message = message;
        existing.observed_generation = generation;
        return changed;
    }
    conditions.push(Condition {
        type_: desired.type_.to_string(),
        status: desired.status,
        observed_generation: generation,
        last_transition_time: now,
        reason: desired.reason.to_string(),
        message,
    });
    true
}

pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True)
}

/// The `Ready` summary of the given condition types, as CAPI's summary does: True when all are
/// True; otherwise False (or Unknown) with the messages of the ones that are not, in order.
/// A missing input counts as Unknown, "Condition not yet reported".
pub fn summarize_ready(conditions: &[Condition], inputs: &[&'static str]) -> Desired {
    let mut falses = Vec::new();
    let mut unknowns = Vec::new();
    for t in inputs {
        match get(conditions, t) {
            Some(c) if c.status == ConditionStatus::True => {}
            Some(c) => {
                let line = if c.message.is_empty() {
                    format!("{t}: {}", c.reason)
                } else {
                    format!("{t}: {}", c.message)
                };
                if c.status == ConditionStatus::False {
                    falses.push(line)
                } else {
                    unknowns.push(line)
                }
            }
            None => unknowns.push(format!("{t}: Condition not yet reported")),
        }
    }
    if !falses.is_empty() {
        falses.extend(unknowns);
        Desired::false_(types::READY, reasons::NOT_READY, falses.join("; "))
    } else if !unknowns.is_empty() {
        Desired::unknown(types::READY, reasons::READY_UNKNOWN, unknowns.join("; "))
    } else {
        Desired::true_(types::READY, reasons::READY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restamp_moves_only_conditions_of_the_view_generation() {
        let mut c = Vec::new();
        set(&mut c, &Desired::true_("A", "R"), Some(3), Utc::now());
        set(&mut c, &Desired::true_("B", "R"), Some(2), Utc::now());
        restamp(&mut c, Some(3), Some(4));
        let gens: Vec<_> = c.iter().map(|c| c.observed_generation).collect();
        assert_eq!(gens, [Some(4), Some(2)]);
        restamp(&mut c, Some(4), Some(4));
        assert_eq!(c[0].observed_generation, Some(4));
    }
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut cs = Vec::new();
        assert!(set(
            &mut cs,
            &Desired::false_("A", "Waiting", "x"),
            Some(1),
            t(0)
        ));
        assert!(!set(
            &mut cs,
            &Desired::false_("A", "Waiting", "x"),
            Some(1),
            t(5)
        ));
        assert_eq!(cs[0].last_transition_time, t(0));
        assert!(set(
            &mut cs,
            &Desired::false_("A", "Other", "y"),
            Some(1),
            t(6)
        ));
        assert_eq!(
            cs[0].last_transition_time,
            t(0),
            "reason change keeps the time"
        );
        assert!(set(&mut cs, &Desired::true_("A", "Ok"), Some(2), t(7)));
        assert_eq!(cs[0].last_transition_time, t(7));
        assert_eq!(cs[0].observed_generation, Some(2));
        assert_eq!(cs.len(), 1);
    }

    #[test]
    fn long_messages_are_capped() {
        let mut cs = Vec::new();
        set(
            &mut cs,
            &Desired::false_("A", "R", "é".repeat(10_000)),
            None,
            t(0),
        );
        assert!(cs[0].message.len() <= MAX_MESSAGE);
    }

    #[test]
    fn ready_summary() {
        let mut cs = Vec::new();
        let s = summarize_ready(&cs, &["A", "B"]);
        assert_eq!(
            (s.status, s.reason),
            (ConditionStatus::Unknown, reasons::READY_UNKNOWN)
        );
        assert!(s.message.contains("A: Condition not yet reported"));

        set(&mut cs, &Desired::true_("A", "Ok"), None, t(0));
        set(
            &mut cs,
            &Desired::false_("B", "Broken", "engine down"),
            None,
            t(0),
        );
        let s = summarize_ready(&cs, &["A", "B"]);
        assert_eq!(
            (s.status, s.reason),
            (ConditionStatus::False, reasons::NOT_READY)
        );
        assert_eq!(s.message, "B: engine down");

        set(&mut cs, &Desired::true_("B", "Ok"), None, t(0));
        assert_eq!(
            summarize_ready(&cs, &["A", "B"]).status,
            ConditionStatus::True
        );
    }
}
