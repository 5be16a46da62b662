//! Our CRD types, group `infrastructure.cluster.x-k8s.io`, version `v1beta2` (the storage version).
//!
//! Field names, types, optionality and bounds follow upstream CAPD v1.13.5 so that manifests
//! written for CAPD apply unchanged. Where upstream relies on admission webhooks for validation we
//! use CEL rules in the schema instead (no cert-manager needed); see [`docker_cluster`] and
//! [`docker_machine`].
pub mod common;
pub mod conditions;
pub mod crds;
pub mod docker_cluster;
pub mod docker_machine;
pub mod templates;

pub use common::*;
pub use docker_cluster::*;
pub use docker_machine::*;
pub use templates::*;

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const VERSION: &str = "v1beta2";
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta2";
