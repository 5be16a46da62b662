//! capd-rs: a Cluster API infrastructure provider for Docker.
//!
//! Layers, each in its own module and each talking to one outside system only:
//! - [`api`]: our CRD types (DockerCluster, DockerMachine and their templates) and conditions.
//! - [`capi`]: read-only shims of the CAPI `Cluster` and `Machine` we read, plus contract constants.
//! - [`docker`]: the [`docker::ContainerRuntime`] trait, its only bollard adapter, and the pure
//!   builders for node and load-balancer containers and haproxy.cfg.
//! - [`bootstrap`]: bootstrap data (cloud-config, ignition) turned into commands to exec.
//! - [`controllers`]: the two reconcilers; the only code that talks to the API server.
//! - [`telemetry`] and [`http`]: logging, metrics and the health endpoints.
//! - [`diagnostics`]: `/metrics` over HTTPS behind TokenReview and SubjectAccessReview.
//! - [`webhook`]: the conversion webhook's TLS server (v1beta1 <-> v1beta2, [`api::conversion`]).
//! - [`manager`]: flags, start-up order (leader election, Docker, CRDs) and shutdown.
pub mod api;
pub mod bootstrap;
pub mod capi;
pub mod controllers;
pub mod diagnostics;
pub mod docker;
pub mod http;
pub mod manager;
pub mod telemetry;
pub mod webhook;
