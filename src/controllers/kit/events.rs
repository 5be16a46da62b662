//! Kubernetes Events for the problems users look for first (`kubectl describe`, `kubectl get
//! events`): a condition turning to one of these reasons publishes one Warning Event, with the
//! condition's message (which never holds secret data). Only transitions publish, so a machine
//! that stays blocked does not repeat itself on every pass.
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::debug;

use crate::api::conditions::{Condition, ConditionStatus, reasons};

/// The API server refuses an events.k8s.io/v1 Event whose `note` is longer than this many bytes;
/// kube-runtime's `Recorder` writes that API (and sends the note as given).
pub const NOTE_LIMIT: usize = 1024;

/// Reasons that need a person's attention.
const WARNINGS: [&str; 13] = [
    reasons::BOOTSTRAP_FAILED,
    reasons::BOOTSTRAP_TIMED_OUT,
    reasons::NODE_STOPPED_DURING_BOOTSTRAP,
    reasons::CONTAINER_RESTARTING,
    reasons::INVALID_HAPROXY_CONFIG,
    reasons::INVALID_HAPROXY_CONFIG_TEMPLATE,
    reasons::BOOTSTRAP_DATA_INVALID,
    reasons::BOOTSTRAP_DATA_NOT_FOUND,
    reasons::NAME_CONFLICT,
    reasons::IMAGE_UNAVAILABLE,
    reasons::INVALID_SPEC,
    reasons::BACKEND_NOT_SERVED,
    reasons::DOCKER_UNAVAILABLE,
];

/// The (reason, message) of every condition that newly went False with a warning reason.
pub fn warnings(before: &[Condition], after: &[Condition]) -> Vec<(String, String)> {
    after
        .iter()
        .filter(|c| c.status == ConditionStatus::False && WARNINGS.contains(&c.reason.as_str()))
        .filter(|c| {
            !before
                .iter()
                .any(|b| b.type_ == c.type_ && b.reason == c.reason && b.status == c.status)
        })
        .map(|c| (c.reason.clone(), c.message.clone()))
        .collect()
}

/// Publish the warnings of a status change on the object `regarding` refers to (best effort:
/// an Event that cannot be written never fails a reconcile).
pub async fn publish(
    recorder: &Recorder,
    regarding: &ObjectReference,
    before: &[Condition],
    after: &[Condition],
) {
    for (reason, message) in warnings(before, after) {
        let event = warning(reason, message);
        if let Err(e) = recorder.publish(&event, regarding).await {
            debug!(error = %e, "cannot publish an Event");
        }
    }
}

/// One Warning Event saying the API server refused a status write, with its (bounded) message:
/// the status, where a condition would say it, is what cannot be written. Best effort.
pub async fn publish_status_rejected(
    recorder: &Recorder,
    regarding: &ObjectReference,
    message: &str,
) {
    let event = Event {
        type_: EventType::Warning,
        reason: reasons::STATUS_UPDATE_REJECTED.into(),
        note: Some(fit_note(message.to_string())),
        action: "UpdateStatus".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, regarding).await {
        debug!(error = %e, "cannot publish an Event");
    }
}

/// One Warning Event naming the cloud-config modules a node's bootstrap accepted but cannot
/// honour (`ntp`, `mounts`, ...): names only, never values. Best effort.
pub async fn publish_modules_skipped(
    recorder: &Recorder,
    regarding: &ObjectReference,
    skipped: &[String],
) {
    let event = Event {
        type_: EventType::Warning,
        reason: reasons::BOOTSTRAP_MODULES_SKIPPED.into(),
        note: Some(fit_note(skipped_message(skipped))),
        action: "Bootstrap".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, regarding).await {
        debug!(error = %e, "cannot publish an Event");
    }
}

/// The note of [`publish_modules_skipped`].
pub fn skipped_message(skipped: &[String]) -> String {
    format!(
        "cloud-config modules skipped (a kind-style node cannot honour them): {}",
        skipped.join(", ")
    )
}

/// The Warning Event for one condition.
fn warning(reason: String, message: String) -> Event {
    Event {
        type_: EventType::Warning,
        reason,
        note: Some(fit_note(message)),
        action: "Reconcile".into(),
        secondary: None,
    }
}

/// `message` cut to [`NOTE_LIMIT`] bytes on a character boundary, ending in `…` when cut: an
/// Event the API server refuses would tell nobody anything, so a long message is shortened,
/// never dropped.
fn fit_note(message: String) -> String {
    crate::api::conditions::truncate(&message, NOTE_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::{
            DockerMachineStatus,
            conditions::{Desired, types},
        },
        controllers::kit::report::Report,
    };

    fn conds(ds: &[Desired]) -> Vec<Condition> {
        let mut report = Report::<DockerMachineStatus>::new(None, Some(1));
        for d in ds {
            report.set(d);
        }
        report.conditions().to_vec()
    }

    #[test]
    fn a_long_message_is_cut_to_fit_the_api_never_dropped() {
        // 5000 characters, two of them two bytes long right where the cut falls.
        let mut message = "x".repeat(1020);
        message.push_str("éé");
        message.push_str(&"y".repeat(5000 - 1022));
        assert_eq!(message.chars().count(), 5000);
        let event = warning(reasons::BOOTSTRAP_FAILED.into(), message.clone());
        let note = event.note.expect("the message is kept");
        assert!(note.len() <= NOTE_LIMIT, "{} bytes", note.len());
        assert!(note.ends_with('…'), "marked as cut");
        assert!(message.starts_with(note.trim_end_matches('…')));
        assert!(note.len() > NOTE_LIMIT - 8, "no more is cut than needed");
        let short = warning(reasons::BOOTSTRAP_FAILED.into(), "short".into());
        assert_eq!(short.note.as_deref(), Some("short"));
    }

    #[test]
    fn only_new_warnings_are_published() {
        let failed = Desired::false_(
            types::BOOTSTRAP_COMPLETED,
            reasons::BOOTSTRAP_FAILED,
            "step 3/9 failed: run kubeadm exited with code 1",
        );
        let waiting = Desired::false_(
            types::CONTAINER_PROVISIONED,
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            "Waiting",
        );
        let before = conds(std::slice::from_ref(&waiting));
        let after = conds(&[waiting.clone(), failed.clone()]);
        assert_eq!(
            warnings(&before, &after),
            vec![(
                reasons::BOOTSTRAP_FAILED.to_string(),
                failed.message.clone()
            )]
        );
        assert!(
            warnings(&after, &after).is_empty(),
            "no repeat while it stays"
        );
        assert!(
            warnings(&[], &conds(&[waiting])).is_empty(),
            "waiting is not a warning"
        );
    }
}
