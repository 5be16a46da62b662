//! Engine errors classified (see the module docs of [`super`]).
use bollard::errors::Error as BollardError;

use crate::docker::RuntimeError;

/// The error and its sources, joined (hyper hides the useful part in the source chain).
pub(super) fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// How Podman's Docker API ends its answer to a create naming a network that does not exist,
/// sent as a 500 ("container create: unable to find network with name or ID x: network not
/// found"), where Docker sends a 404. Not an engine that is down: the network is missing.
const PODMAN_NO_SUCH_NETWORK: &str = ": network not found";

/// Map a bollard error onto our classes; `what` names the operation.
pub(super) fn classify(what: &str, err: BollardError) -> RuntimeError {
    match err {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => {
            let text = format!("{what}: {message}");
            match status_code {
                404 => RuntimeError::NotFound(text),
                500 if message.ends_with(PODMAN_NO_SUCH_NETWORK) => RuntimeError::NotFound(text),
                409 => RuntimeError::WrongState(text),
                400..=499 => RuntimeError::Rejected(text),
                _ => RuntimeError::Unavailable(text),
            }
        }
        other => RuntimeError::Unavailable(format!("{what}: {}", chain(&other))),
    }
}

/// [`classify`] for a create, where 409 means the name is taken.
pub(super) fn classify_create(what: &str, err: BollardError) -> RuntimeError {
    match classify(what, err) {
        RuntimeError::WrongState(text) => RuntimeError::Conflict(text),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let e = |status_code| BollardError::DockerResponseServerError {
            status_code,
            message: "engine says".into(),
        };
        assert!(
            matches!(classify("op", e(404)), RuntimeError::NotFound(m) if m == "op: engine says")
        );
        // 409 names a taken name only on a create; elsewhere it is the object's state (Engine
        // 20.10 answers a start of a container being removed so).
        assert!(matches!(
            classify("op", e(409)),
            RuntimeError::WrongState(_)
        ));
        assert!(matches!(
            classify_create("op", e(409)),
            RuntimeError::Conflict(_)
        ));
        assert!(matches!(
            classify_create("op", e(404)),
            RuntimeError::NotFound(_)
        ));
        assert!(matches!(classify("op", e(400)), RuntimeError::Rejected(_)));
        assert!(
            matches!(classify("op", e(500)), RuntimeError::Unavailable(m) if m.contains("engine says"))
        );
        let podman = BollardError::DockerResponseServerError {
            status_code: 500,
            message:
                "container create: unable to find network with name or ID n1: network not found"
                    .into(),
        };
        assert!(
            matches!(classify("op", podman), RuntimeError::NotFound(m) if m.contains("n1")),
            "Podman's missing network is missing, not an engine that is down"
        );
        assert!(matches!(
            classify("op", BollardError::RequestTimeoutError),
            RuntimeError::Unavailable(_)
        ));
    }
}
