//! Our CRD types, group `infrastructure.cluster.x-k8s.io`, version `v1beta2` (the storage version),
//! and the `v1beta1` shapes served beside it ([`v1beta1`], [`conversion`]).
//!
//! Field names, types, optionality and bounds follow upstream CAPD v1.13.5 so that manifests
//! written for CAPD apply unchanged. Where upstream relies on admission webhooks for validation we
//! use CEL rules in the schema instead (no cert-manager needed); see [`docker_cluster`] and
//! [`docker_machine`].
pub mod common;
pub mod conditions;
pub mod conversion;
pub mod crds;
pub mod dev;
pub mod docker_cluster;
pub mod docker_machine;
pub mod docker_machine_pool;
pub mod prune;
pub mod templates;
pub mod v1beta1;
pub mod v1beta1_conditions;

pub use common::*;
pub use docker_cluster::*;
pub use docker_machine::*;
pub use docker_machine_pool::*;
pub use templates::*;

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const VERSION: &str = "v1beta2";
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta2";
