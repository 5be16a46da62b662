//! Errors of a reconcile, classified for backoff and for conditions, and [`Blocked`]: the one way
//! a reconcile says "cannot go on until something changes that only a person (or another
//! controller) can change".
use std::time::Duration;

use crate::{api::conditions::reasons, docker::RuntimeError};

/// A reconcile that cannot go on: a user's spec, a missing or unusable Secret or ConfigMap, a
/// container with our name that is not ours. Reported in `condition` with `reason` and
/// `message`, looked at again after `retry` (a change of the object triggers a reconcile at
/// once), and never counted as a failure: backing off harder would not fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// The condition type that reports it.
    pub condition: &'static str,
    pub reason: &'static str,
    /// Safe to show: never holds secret data.
    pub message: String,
    pub retry: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A referenced object we need is missing (transient: it may appear).
    #[error("{0}")]
    Missing(String),
    /// The load balancer has no address yet or could not be configured.
    #[error("load balancer: {0}")]
    LoadBalancer(String),
    /// Removal was requested but the container is still there (the finalizer must stay).
    #[error("container {0} still exists after removal")]
    ContainerStillExists(String),
    /// Our view of the object was older than the server's: a guarded write was refused. The
    /// next pass sees the newer object.
    #[error("the object changed since it was read; looking again")]
    Stale,
    #[error("serializing {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("{}", .0.message)]
    Blocked(Blocked),
    /// The API server refused a status write as invalid (422 Invalid or 400 BadRequest): a
    /// value that reached storage some other way, or one we computed, that the schema refuses.
    /// Retrying at once cannot help: it waits at least [`STATUS_REJECTED_RETRY`], and is made
    /// visible as an Event (a condition cannot be written when status cannot).
    #[error("the API server refused the status write: {0}")]
    StatusRejected(String),
}

/// The least a refused status write waits before it is tried again.
pub const STATUS_REJECTED_RETRY: Duration = Duration::from_secs(300);

/// The longest API server message we carry into an Event or condition (an Event's note is
/// limited to 1 KiB).
pub const MAX_REJECTION_MESSAGE: usize = 900;

/// `message` cut to [`MAX_REJECTION_MESSAGE`] bytes at a character boundary.
pub fn bounded_message(message: &str) -> String {
    crate::api::conditions::truncate(message, MAX_REJECTION_MESSAGE)
}

/// How soon an in-memory arm that could not act looks again.
pub const IN_MEMORY_RETRY: Duration = Duration::from_secs(10);

impl Error {
    /// A write to an in-memory workload cluster's store that failed (its quota, most likely):
    /// reported under `condition`, as upstream reports an error of a phase.
    pub fn in_memory_write(condition: &'static str, e: crate::inmemory::ApiError) -> Self {
        Self::blocked(
            condition,
            reasons::INTERNAL_ERROR,
            format!("the in-memory workload cluster refused a write: {e}"),
            IN_MEMORY_RETRY,
        )
    }

    pub fn blocked(
        condition: &'static str,
        reason: &'static str,
        message: impl Into<String>,
        retry: Duration,
    ) -> Self {
        Error::Blocked(Blocked {
            condition,
            reason,
            message: message.into(),
            retry,
        })
    }

    /// Short label for the errors-by-kind metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Runtime(RuntimeError::Unavailable(_)) => "docker_unavailable",
            Error::Runtime(RuntimeError::Rejected(_)) => "docker_rejected",
            Error::Runtime(_) => "docker",
            Error::Missing(_) => "missing",
            Error::LoadBalancer(_) => "load_balancer",
            Error::ContainerStillExists(_) => "docker",
            Error::Stale => "stale",
            Error::Serialize(_) => "serialize",
            Error::Blocked(_) => "blocked",
            Error::StatusRejected(_) => "status_rejected",
        }
    }

    /// The condition reason that reports this error, if a condition should (an API error is not
    /// reported there: the status write would most likely fail too).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Error::Blocked(b) => Some(b.reason),
            Error::Runtime(RuntimeError::Unavailable(_)) => Some(reasons::DOCKER_UNAVAILABLE),
            Error::Runtime(RuntimeError::Image { .. }) => Some(reasons::IMAGE_UNAVAILABLE),
            // The engine refused the request as made: the spec behind it is wrong, not the engine.
            Error::Runtime(RuntimeError::Rejected(_)) => Some(reasons::INVALID_SPEC),
            Error::Runtime(RuntimeError::Conflict(_)) => Some(reasons::NAME_CONFLICT),
            Error::Runtime(RuntimeError::NotFound(_) | RuntimeError::WrongState(_))
            | Error::LoadBalancer(_)
            | Error::ContainerStillExists(_) => Some(reasons::NOT_PROVISIONED),
            Error::Kube(_)
            | Error::Missing(_)
            | Error::Stale
            | Error::Serialize(_)
            | Error::StatusRejected(_) => None,
        }
    }

    /// Whether the API server refused a status write as invalid: an Event reports it.
    pub fn status_rejected(&self) -> Option<&str> {
        match self {
            Error::StatusRejected(m) => Some(m),
            _ => None,
        }
    }

    /// The least time before this error is retried, whatever the backoff says: a refused
    /// status write is not retried faster than [`STATUS_REJECTED_RETRY`] (no hot loop).
    pub fn min_retry(&self) -> Option<Duration> {
        match self {
            Error::StatusRejected(_) => Some(STATUS_REJECTED_RETRY),
            _ => None,
        }
    }

    /// Errors that wait for a change instead of backing off: a blocked reconcile, and a request
    /// the engine refused (retrying it unchanged cannot succeed; a spec change triggers a
    /// reconcile anyway).
    pub fn fixed_retry(&self) -> Option<Duration> {
        match self {
            Error::Blocked(b) => Some(b.retry),
            Error::Runtime(RuntimeError::Rejected(_)) => Some(Duration::from_secs(300)),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_status_write_is_slow_to_retry_and_bounded() {
        let e = Error::StatusRejected(bounded_message(&"x".repeat(10_000)));
        assert_eq!(e.kind(), "status_rejected");
        assert_eq!(e.reason(), None, "no condition from the write that failed");
        assert_eq!(e.min_retry(), Some(STATUS_REJECTED_RETRY));
        assert!(e.status_rejected().unwrap().len() <= MAX_REJECTION_MESSAGE + '…'.len_utf8());
        assert_eq!(bounded_message("ünïcode"), "ünïcode");
        let cut = bounded_message(&"é".repeat(1000));
        assert!(cut.ends_with('…') && cut.len() <= MAX_REJECTION_MESSAGE + 3);
        assert_eq!(Error::Stale.min_retry(), None);
        assert_eq!(Error::Stale.status_rejected(), None);
    }

    #[test]
    fn a_bad_spec_is_not_an_outage() {
        let rejected = Error::Runtime(RuntimeError::Rejected(
            "invalid mount config: mount path must be absolute".into(),
        ));
        assert_eq!(rejected.reason(), Some(reasons::INVALID_SPEC));
        assert!(rejected.fixed_retry().is_some(), "no backoff hot loop");
        let outage = Error::Runtime(RuntimeError::Unavailable("connection refused".into()));
        assert_eq!(outage.reason(), Some(reasons::DOCKER_UNAVAILABLE));
        assert_eq!(outage.fixed_retry(), None, "an outage backs off");
        let blocked = Error::blocked(
            "C",
            reasons::NAME_CONFLICT,
            "taken",
            Duration::from_secs(60),
        );
        assert_eq!(blocked.to_string(), "taken");
        assert_eq!(blocked.fixed_retry(), Some(Duration::from_secs(60)));
    }
}
