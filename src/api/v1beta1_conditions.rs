//! The v1beta1 conditions (`status.deprecated.v1beta1.conditions`, shown as `.status.conditions`
//! to a v1beta1 reader), derived from the v1beta2 conditions each controller computes: one pure
//! mapping, applied where status is written ([`V1Beta1Mirror`]), so no controller sets them itself.
//!
//! Types, reasons and severities are upstream CAPD's v1beta1 ones (`LoadBalancerAvailable`,
//! `ContainerProvisioned`, `BootstrapExecSucceeded`, `ReplicasReady`), and `Ready` is their
//! summary as CAPI's v1beta1 condition utilities compute it: the worst group (False Error, False
//! Warning, False Info, True, Unknown) decides status, severity, reason and message, with an
//! "x of y completed" message while provisioning. Upstream v1.14 itself stopped maintaining most of
//! them (it marks only the waiting and deleting states, so a machine that waited keeps a stale
//! False); these are kept current from the v1beta2 state, as upstream CAPD did up to v1.10.
use chrono::{DateTime, SecondsFormat, Utc};

use super::common::{Deprecated, DeprecatedV1Beta1, V1Beta1Condition};
use super::conditions::{Condition, ConditionStatus, reasons, types};

/// v1beta1 severities.
pub mod severity {
    pub const ERROR: &str = "Error";
    pub const WARNING: &str = "Warning";
    pub const INFO: &str = "Info";
}

/// Upstream's v1beta1 condition types and reasons that differ from the v1beta2 ones.
pub mod v1beta1 {
    pub const BOOTSTRAP_EXEC_SUCCEEDED: &str = "BootstrapExecSucceeded";
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    pub const WAITING_FOR_CONTROL_PLANE_AVAILABLE: &str = "WaitingForControlPlaneAvailable";
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    pub const CONTAINER_PROVISIONING_FAILED: &str = "ContainerProvisioningFailed";
    pub const BOOTSTRAPPING: &str = "Bootstrapping";
    pub const BOOTSTRAP_FAILED: &str = "BootstrapFailed";
    pub const LOAD_BALANCER_PROVISIONING_FAILED: &str = "LoadBalancerProvisioningFailed";
    pub const DELETING: &str = "Deleting";
}

/// Which object's v1beta1 set to derive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cluster,
    Machine,
    MachinePool,
}

/// What the mapping needs beside the v1beta2 conditions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Context {
    /// The object has a deletionTimestamp: no step counter (as upstream).
    pub deleting: bool,
    /// `initialization.provisioned`: a machine stops counting steps once provisioned (upstream
    /// stops when `spec.providerID` is set, which happens at the same time).
    pub provisioned: bool,
}

fn v1(
    type_: &str,
    status: ConditionStatus,
    severity: Option<&str>,
    reason: &str,
    message: &str,
) -> V1Beta1Condition {
    let status = match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    };
    let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    V1Beta1Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        severity: severity.map(str::to_string),
        reason: nonempty(reason),
        message: nonempty(message),
        last_transition_time: None,
    }
}

/// A v1beta2 condition to its v1beta1 form: True stays True (no reason, as MarkTrue); Unknown
/// keeps its reason; False takes the reason and severity `false_as` gives for its v1beta2 reason.
fn map_one(
    c: &Condition,
    type_: &str,
    false_as: impl Fn(&str) -> (&'static str, &'static str),
) -> V1Beta1Condition {
    match c.status {
        ConditionStatus::True => v1(type_, ConditionStatus::True, None, "", ""),
        ConditionStatus::Unknown => {
            v1(type_, ConditionStatus::Unknown, None, &c.reason, &c.message)
        }
        ConditionStatus::False => {
            let (reason, sev) = false_as(&c.reason);
            // Waiting states carry no message upstream; failures carry the error.
            let message = if reason.starts_with("WaitingFor") || reason == v1beta1::DELETING {
                ""
            } else {
                &c.message
            };
            v1(type_, ConditionStatus::False, Some(sev), reason, message)
        }
    }
}

fn load_balancer(reason: &str) -> (&'static str, &'static str) {
    match reason {
        reasons::DELETING => (v1beta1::DELETING, severity::INFO),
        _ => (
            v1beta1::LOAD_BALANCER_PROVISIONING_FAILED,
            severity::WARNING,
        ),
    }
}

fn container(reason: &str) -> (&'static str, &'static str) {
    match reason {
        reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE => {
            (v1beta1::WAITING_FOR_CLUSTER_INFRASTRUCTURE, severity::INFO)
        }
        reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZED => {
            (v1beta1::WAITING_FOR_CONTROL_PLANE_AVAILABLE, severity::INFO)
        }
        reasons::WAITING_FOR_BOOTSTRAP_DATA => {
            (v1beta1::WAITING_FOR_BOOTSTRAP_DATA, severity::INFO)
        }
        reasons::DELETING => (v1beta1::DELETING, severity::INFO),
        _ => (v1beta1::CONTAINER_PROVISIONING_FAILED, severity::WARNING),
    }
}

fn bootstrap(reason: &str) -> (&'static str, &'static str) {
    match reason {
        reasons::BOOTSTRAPPING
        | reasons::WAITING_FOR_CGROUPS
        | reasons::WAITING_FOR_PRELOADED_IMAGES
        | reasons::WAITING_FOR_BOOTSTRAP_DATA => (v1beta1::BOOTSTRAPPING, severity::INFO),
        reasons::DELETING => (v1beta1::DELETING, severity::INFO),
        _ => (v1beta1::BOOTSTRAP_FAILED, severity::WARNING),
    }
}

/// An in-memory DevMachine's phase conditions, in upstream's order.
const IN_MEMORY_PHASES: &[&str] = &[
    types::VM_PROVISIONED,
    types::NODE_PROVISIONED,
    types::ETCD_PROVISIONED,
    types::API_SERVER_PROVISIONED,
];

/// As a container's, but for the phases' own waits; a failure is upstream's InternalError.
fn in_memory_phase(reason: &str) -> (&'static str, &'static str) {
    match reason {
        reasons::WAITING_FOR_STARTUP_TIMEOUT => {
            (reasons::WAITING_FOR_STARTUP_TIMEOUT, severity::INFO)
        }
        reasons::WAITING_FOR_VM_PROVISIONED => {
            (reasons::WAITING_FOR_VM_PROVISIONED, severity::INFO)
        }
        reasons::WAITING_FOR_NODE_PROVISIONED => {
            (reasons::WAITING_FOR_NODE_PROVISIONED, severity::INFO)
        }
        _ => match container(reason) {
            (v1beta1::CONTAINER_PROVISIONING_FAILED, _) => {
                (reasons::INTERNAL_ERROR, severity::WARNING)
            }
            waiting => waiting,
        },
    }
}

fn replicas(reason: &str) -> (&'static str, &'static str) {
    match reason {
        reasons::DELETING => (v1beta1::DELETING, severity::INFO),
        reasons::SCALING_UP => (reasons::SCALING_UP, severity::INFO),
        reasons::SCALING_DOWN => (reasons::SCALING_DOWN, severity::INFO),
        reasons::ROLLING_OUT => (reasons::ROLLING_OUT, severity::INFO),
        _ => (reasons::NOT_READY, severity::WARNING),
    }
}

/// The merge priority of CAPI's v1beta1 summary: lower wins.
fn priority(c: &V1Beta1Condition) -> u8 {
    match (c.status.as_str(), c.severity.as_deref()) {
        ("False", Some(severity::ERROR)) => 0,
        ("False", Some(severity::WARNING)) => 1,
        ("False", _) => 2,
        ("True", _) => 3,
        _ => 4,
    }
}

/// CAPI's v1beta1 `SetSummary` over `inputs` (in priority order): `None` when none is present.
pub fn summary(
    conds: &[V1Beta1Condition],
    inputs: &[&str],
    step_counter: bool,
) -> Option<V1Beta1Condition> {
    let in_scope: Vec<&V1Beta1Condition> = conds
        .iter()
        .filter(|c| c.type_ != types::READY && inputs.contains(&c.type_.as_str()))
        .collect();
    let top = in_scope.iter().map(|c| priority(c)).min()?;
    let group: Vec<&&V1Beta1Condition> = in_scope.iter().filter(|c| priority(c) == top).collect();
    if top == 3 {
        return Some(v1(types::READY, ConditionStatus::True, None, "", ""));
    }
    // The first of the top group in the order of `inputs`.
    let first = inputs
        .iter()
        .find_map(|t| group.iter().find(|c| c.type_ == *t))
        .unwrap_or(&group[0]);
    let message = if step_counter {
        let done = in_scope.iter().filter(|c| priority(c) == 3).count();
        format!("{done} of {} completed", inputs.len())
    } else {
        first.message.clone().unwrap_or_default()
    };
    let reason = first.reason.clone().unwrap_or_default();
    Some(if top == 4 {
        v1(
            types::READY,
            ConditionStatus::Unknown,
            None,
            &reason,
            &message,
        )
    } else {
        v1(
            types::READY,
            ConditionStatus::False,
            first.severity.as_deref(),
            &reason,
            &message,
        )
    })
}

/// The v1beta1 conditions of an object of `kind` with v1beta2 `conditions`. `previous` (what the
/// object has now) keeps each lastTransitionTime while type, status, severity, reason and message
/// stay the same (CAPI's rule); a changed or new one gets `now`. Ordered as CAPI orders them:
/// Ready first, then by type.
pub fn derive(
    kind: Kind,
    conditions: &[Condition],
    ctx: Context,
    previous: &[V1Beta1Condition],
    now: DateTime<Utc>,
) -> Vec<V1Beta1Condition> {
    let get = |t: &str| conditions.iter().find(|c| c.type_ == t);
    let mut out = Vec::new();
    let inputs: &[&str] = match kind {
        Kind::Cluster => {
            if let Some(c) = get(types::LOAD_BALANCER_AVAILABLE) {
                out.push(map_one(c, types::LOAD_BALANCER_AVAILABLE, load_balancer));
            }
            &[types::LOAD_BALANCER_AVAILABLE]
        }
        // An in-memory DevMachine: its phases, each mirrored under its own type (upstream v1.14).
        Kind::Machine if get(types::VM_PROVISIONED).is_some() => {
            for t in IN_MEMORY_PHASES {
                if let Some(c) = get(t) {
                    out.push(map_one(c, t, in_memory_phase));
                }
            }
            IN_MEMORY_PHASES
        }
        Kind::Machine => {
            if let Some(c) = get(types::CONTAINER_PROVISIONED) {
                out.push(map_one(c, types::CONTAINER_PROVISIONED, container));
            }
            // Upstream generates it once there is a container to bootstrap.
            if let Some(c) = get(types::BOOTSTRAP_COMPLETED)
                .filter(|c| c.reason != reasons::WAITING_FOR_CONTAINER)
            {
                out.push(map_one(c, v1beta1::BOOTSTRAP_EXEC_SUCCEEDED, bootstrap));
            }
            &[
                types::CONTAINER_PROVISIONED,
                v1beta1::BOOTSTRAP_EXEC_SUCCEEDED,
            ]
        }
        Kind::MachinePool => {
            if let Some(c) = get(types::REPLICAS_READY) {
                out.push(map_one(c, types::REPLICAS_READY, replicas));
            }
            &[types::REPLICAS_READY]
        }
    };
    let step_counter = match kind {
        Kind::Cluster => !ctx.deleting,
        Kind::Machine => !ctx.deleting && !ctx.provisioned,
        Kind::MachinePool => false,
    };
    if let Some(ready) = summary(&out, inputs, step_counter) {
        out.push(ready);
    }
    let stamp = now.to_rfc3339_opts(SecondsFormat::Secs, true);
    for c in &mut out {
        let kept = previous.iter().find(|p| {
            p.type_ == c.type_
                && p.status == c.status
                && p.severity == c.severity
                && p.reason == c.reason
                && p.message == c.message
        });
        c.last_transition_time = Some(
            kept.and_then(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| stamp.clone()),
        );
    }
    out.sort_by(|a, b| {
        (a.type_ != types::READY, &a.type_).cmp(&(b.type_ != types::READY, &b.type_))
    });
    out
}

/// `status.deprecated` with the derived conditions (none derived: `None`, nothing written).
pub fn deprecated(
    kind: Kind,
    conditions: Option<&[Condition]>,
    ctx: Context,
    previous: Option<&Deprecated>,
    now: DateTime<Utc>,
) -> Option<Deprecated> {
    let previous = previous
        .and_then(|d| d.v1beta1.as_ref())
        .and_then(|d| d.conditions.as_deref())
        .unwrap_or_default();
    let conds = derive(kind, conditions.unwrap_or_default(), ctx, previous, now);
    (!conds.is_empty()).then_some(Deprecated {
        v1beta1: Some(DeprecatedV1Beta1 {
            conditions: Some(conds),
        }),
    })
}

/// A status type whose v1beta1 conditions follow from its v1beta2 ones. The status writer calls
/// it on every status it writes, so the two never disagree.
pub trait V1Beta1Mirror: Sized {
    /// `self` with `deprecated` derived; `current` is the status the object has now.
    fn with_v1beta1(&self, current: Option<&Self>, deleting: bool, now: DateTime<Utc>) -> Self;
}

impl V1Beta1Mirror for super::DockerClusterStatus {
    fn with_v1beta1(&self, current: Option<&Self>, deleting: bool, now: DateTime<Utc>) -> Self {
        let ctx = Context {
            deleting,
            provisioned: false,
        };
        Self {
            deprecated: deprecated(
                Kind::Cluster,
                self.conditions.as_deref(),
                ctx,
                current.and_then(|c| c.deprecated.as_ref()),
                now,
            ),
            ..self.clone()
        }
    }
}

impl V1Beta1Mirror for super::DockerMachineStatus {
    fn with_v1beta1(&self, current: Option<&Self>, deleting: bool, now: DateTime<Utc>) -> Self {
        let provisioned = self
            .initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false);
        let ctx = Context {
            deleting,
            provisioned,
        };
        Self {
            deprecated: deprecated(
                Kind::Machine,
                self.conditions.as_deref(),
                ctx,
                current.and_then(|c| c.deprecated.as_ref()),
                now,
            ),
            ..self.clone()
        }
    }
}

impl V1Beta1Mirror for super::DockerMachinePoolStatus {
    fn with_v1beta1(&self, current: Option<&Self>, deleting: bool, now: DateTime<Utc>) -> Self {
        let ctx = Context {
            deleting,
            provisioned: false,
        };
        Self {
            deprecated: deprecated(
                Kind::MachinePool,
                self.conditions.as_deref(),
                ctx,
                current.and_then(|c| c.deprecated.as_ref()),
                now,
            ),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::Condition;

    fn c(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status,
            observed_generation: Some(1),
            last_transition_time: DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .unwrap()
                .into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
    use ConditionStatus::{False, True, Unknown};

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-02-02T02:02:02Z")
            .unwrap()
            .into()
    }

    fn find<'a>(v: &'a [V1Beta1Condition], t: &str) -> &'a V1Beta1Condition {
        v.iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t} in {v:?}"))
    }

    fn shape(c: &V1Beta1Condition) -> (&str, Option<&str>, Option<&str>, Option<&str>) {
        (
            c.status.as_str(),
            c.severity.as_deref(),
            c.reason.as_deref(),
            c.message.as_deref(),
        )
    }

    #[test]
    fn cluster_ready() {
        let v2 = [
            c(types::READY, True, reasons::READY, ""),
            c(types::PAUSED, False, reasons::NOT_PAUSED, ""),
            c(types::LOAD_BALANCER_AVAILABLE, True, reasons::AVAILABLE, ""),
        ];
        let out = derive(Kind::Cluster, &v2, Context::default(), &[], now());
        assert_eq!(
            out.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["Ready", "LoadBalancerAvailable"]
        );
        assert_eq!(shape(&out[0]), ("True", None, None, None));
        assert_eq!(shape(&out[1]), ("True", None, None, None));
        assert_eq!(
            out[0].last_transition_time.as_deref(),
            Some("2026-02-02T02:02:02Z")
        );
    }

    #[test]
    fn cluster_failing_and_deleting() {
        let v2 = [c(
            types::LOAD_BALANCER_AVAILABLE,
            False,
            reasons::DOCKER_UNAVAILABLE,
            "engine down",
        )];
        let out = derive(Kind::Cluster, &v2, Context::default(), &[], now());
        assert_eq!(
            shape(find(&out, "LoadBalancerAvailable")),
            (
                "False",
                Some("Warning"),
                Some("LoadBalancerProvisioningFailed"),
                Some("engine down")
            )
        );
        assert_eq!(
            shape(find(&out, "Ready")),
            (
                "False",
                Some("Warning"),
                Some("LoadBalancerProvisioningFailed"),
                Some("0 of 1 completed")
            )
        );
        let v2 = [c(
            types::LOAD_BALANCER_AVAILABLE,
            False,
            reasons::DELETING,
            "",
        )];
        let ctx = Context {
            deleting: true,
            provisioned: false,
        };
        let out = derive(Kind::Cluster, &v2, ctx, &[], now());
        assert_eq!(
            shape(find(&out, "Ready")),
            ("False", Some("Info"), Some("Deleting"), None)
        );
    }

    #[test]
    fn machine_steps() {
        // Waiting for the cluster: no bootstrap condition yet, one step of two.
        let v2 = [
            c(
                types::CONTAINER_PROVISIONED,
                False,
                reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                "x",
            ),
            c(
                types::BOOTSTRAP_COMPLETED,
                False,
                reasons::WAITING_FOR_CONTAINER,
                "",
            ),
        ];
        let out = derive(Kind::Machine, &v2, Context::default(), &[], now());
        assert_eq!(out.len(), 2);
        assert_eq!(
            shape(find(&out, "ContainerProvisioned")),
            (
                "False",
                Some("Info"),
                Some("WaitingForClusterInfrastructure"),
                None
            )
        );
        assert_eq!(
            shape(find(&out, "Ready")),
            (
                "False",
                Some("Info"),
                Some("WaitingForClusterInfrastructure"),
                Some("0 of 2 completed")
            )
        );
        // Bootstrapping.
        let v2 = [
            c(types::CONTAINER_PROVISIONED, True, reasons::PROVISIONED, ""),
            c(
                types::BOOTSTRAP_COMPLETED,
                False,
                reasons::BOOTSTRAPPING,
                "running",
            ),
        ];
        let out = derive(Kind::Machine, &v2, Context::default(), &[], now());
        assert_eq!(
            shape(find(&out, "BootstrapExecSucceeded")),
            (
                "False",
                Some("Info"),
                Some("Bootstrapping"),
                Some("running")
            )
        );
        assert_eq!(
            shape(find(&out, "Ready")),
            (
                "False",
                Some("Info"),
                Some("Bootstrapping"),
                Some("1 of 2 completed")
            )
        );
        // A failed bootstrap is a Warning.
        let v2 = [
            c(types::CONTAINER_PROVISIONED, True, reasons::PROVISIONED, ""),
            c(
                types::BOOTSTRAP_COMPLETED,
                False,
                reasons::BOOTSTRAP_FAILED,
                "exit 1",
            ),
        ];
        let out = derive(Kind::Machine, &v2, Context::default(), &[], now());
        assert_eq!(
            shape(find(&out, "Ready")),
            (
                "False",
                Some("Warning"),
                Some("BootstrapFailed"),
                Some("1 of 2 completed")
            )
        );
        // Done: every condition True, types ordered as CAPI orders them.
        let v2 = [
            c(types::CONTAINER_PROVISIONED, True, reasons::PROVISIONED, ""),
            c(types::CGROUPS_READY, True, reasons::READY, ""),
            c(types::BOOTSTRAP_COMPLETED, True, reasons::COMPLETED, ""),
        ];
        let ctx = Context {
            deleting: false,
            provisioned: true,
        };
        let out = derive(Kind::Machine, &v2, ctx, &[], now());
        assert_eq!(
            out.iter()
                .map(|c| (c.type_.as_str(), c.status.as_str()))
                .collect::<Vec<_>>(),
            [
                ("Ready", "True"),
                ("BootstrapExecSucceeded", "True"),
                ("ContainerProvisioned", "True")
            ]
        );
    }

    #[test]
    fn worst_group_wins_and_unknown_is_last() {
        let v2 = [
            c(
                types::CONTAINER_PROVISIONED,
                Unknown,
                reasons::READY_UNKNOWN,
                "?",
            ),
            c(types::BOOTSTRAP_COMPLETED, True, reasons::COMPLETED, ""),
        ];
        let out = derive(
            Kind::Machine,
            &v2,
            Context {
                deleting: false,
                provisioned: true,
            },
            &[],
            now(),
        );
        // True beats Unknown in CAPI's v1beta1 merge priority.
        assert_eq!(shape(find(&out, "Ready")), ("True", None, None, None));
        let v2 = [c(
            types::CONTAINER_PROVISIONED,
            Unknown,
            reasons::READY_UNKNOWN,
            "?",
        )];
        let out = derive(
            Kind::Machine,
            &v2,
            Context {
                deleting: false,
                provisioned: true,
            },
            &[],
            now(),
        );
        assert_eq!(
            shape(find(&out, "Ready")),
            ("Unknown", None, Some("ReadyUnknown"), Some("?"))
        );
    }

    #[test]
    fn transition_time_kept_while_unchanged() {
        let v2 = [c(
            types::LOAD_BALANCER_AVAILABLE,
            True,
            reasons::AVAILABLE,
            "",
        )];
        let first = derive(Kind::Cluster, &v2, Context::default(), &[], now());
        let later: DateTime<Utc> = DateTime::parse_from_rfc3339("2026-03-03T03:03:03Z")
            .unwrap()
            .into();
        let again = derive(Kind::Cluster, &v2, Context::default(), &first, later);
        assert_eq!(first, again);
        let v2 = [c(
            types::LOAD_BALANCER_AVAILABLE,
            False,
            reasons::DOCKER_UNAVAILABLE,
            "down",
        )];
        let changed = derive(Kind::Cluster, &v2, Context::default(), &first, later);
        assert!(
            changed
                .iter()
                .all(|c| c.last_transition_time.as_deref() == Some("2026-03-03T03:03:03Z"))
        );
    }

    #[test]
    fn pool_and_nothing_to_derive() {
        let v2 = [c(
            types::REPLICAS_READY,
            False,
            reasons::SCALING_UP,
            "1 of 3",
        )];
        let out = derive(Kind::MachinePool, &v2, Context::default(), &[], now());
        assert_eq!(
            shape(find(&out, "Ready")),
            ("False", Some("Info"), Some("ScalingUp"), Some("1 of 3"))
        );
        assert!(deprecated(Kind::Cluster, None, Context::default(), None, now()).is_none());
    }

    #[test]
    fn mirror_on_a_status() {
        let st = crate::api::DockerMachineStatus {
            conditions: Some(vec![c(
                types::CONTAINER_PROVISIONED,
                True,
                reasons::PROVISIONED,
                "",
            )]),
            ..Default::default()
        };
        let with = st.with_v1beta1(None, false, now());
        let conds = with
            .deprecated
            .unwrap()
            .v1beta1
            .unwrap()
            .conditions
            .unwrap();
        assert_eq!(shape(find(&conds, "Ready")), ("True", None, None, None));
    }
}
