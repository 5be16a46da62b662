//! Errors of a reconcile, classified for backoff and for conditions.
use crate::docker::RuntimeError;

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
    #[error("serializing {0}")]
    Serialize(#[from] serde_json::Error),
}

impl Error {
    /// Short label for the errors-by-kind metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Runtime(RuntimeError::Unavailable(_)) => "docker_unavailable",
            Error::Runtime(_) => "docker",
            Error::Missing(_) => "missing",
            Error::LoadBalancer(_) => "load_balancer",
            Error::ContainerStillExists(_) => "docker",
            Error::Serialize(_) => "serialize",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
