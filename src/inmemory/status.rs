//! Failures as the API server reports them: an HTTP code and a `Status` object (kind `Status`,
//! `status: Failure`, a machine-readable `reason`), which client-go and kube-rs both decode.
use serde_json::json;

use super::kinds::Resource;

/// A failed request, as the fake API server answers it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details`: the object's name, its group and the resource (kind) it is of.
    pub details: Option<(String, String, String)>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn about(mut self, r: &Resource, name: &str) -> Self {
        self.details = Some((name.into(), r.group.into(), r.plural.into()));
        self
    }

    pub fn not_found(r: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", r.qualified()),
        )
        .about(r, name)
    }

    pub fn already_exists(r: &Resource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", r.qualified()),
        )
        .about(r, name)
    }

    /// An optimistic-lock failure: the write named a resourceVersion (or uid) that is not the
    /// stored one.
    pub fn conflict(r: &Resource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                r.qualified()
            ),
        )
        .about(r, name)
    }

    pub fn stale(r: &Resource, name: &str) -> Self {
        Self::conflict(
            r,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn invalid(r: &Resource, name: &str, message: impl Into<String>) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {}", r.kind, message.into()),
        )
        .about(r, name)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// A watch (or list continuation) from a resourceVersion the store no longer holds events
    /// for: the client must list again.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// The `Status` object of this failure.
    pub fn to_status(&self) -> serde_json::Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((name, group, kind)) = &self.details {
            status["details"] = json!({"name": name, "group": group, "kind": kind});
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inmemory::kinds::{RESOURCES, by_kind};

    #[test]
    fn a_status_decodes_as_kube_rs_reads_it() {
        let node = &RESOURCES[by_kind("Node").unwrap()];
        let status = ApiError::stale(node, "n1").to_status();
        let decoded: kube::core::Status = serde_json::from_value(status).unwrap();
        assert_eq!(decoded.code, 409);
        assert_eq!(decoded.reason, "Conflict");
        assert!(
            decoded.message.contains("nodes \"n1\""),
            "{}",
            decoded.message
        );
        assert_eq!(decoded.details.unwrap().name, "n1");
    }
}
