//! capd-rs: a Cluster API infrastructure provider for Docker.
//!
//! Layers, each in its own module and each talking to one outside system only:
//! - [`api`]: our CRD types (the Docker* and Dev* kinds, their templates and pools), conditions,
//!   the v1beta1 shapes and their conversion; pure.
//! - [`capi`]: read-only shims of the CAPI `Cluster`, `Machine` and `MachinePool` we read, plus
//!   the contract's labels, annotations and pure decisions (owner, paused, managed-by).
//! - [`docker`]: the [`docker::ContainerRuntime`] port, its only bollard adapter, and the pure
//!   builders for node and load-balancer containers and haproxy.cfg.
//! - [`bootstrap`]: bootstrap data (cloud-config, Ignition) planned into steps (pure), and the
//!   runner that execs them through the port.
//! - [`controllers`]: the cluster, machine, pool and template controllers, through one reconcile
//!   lifecycle, and how they are wired; with [`manager`] and [`diagnostics`], the only code that
//!   talks to the API server.
//! - [`telemetry`] and [`http`]: logging, metrics and the health endpoints.
//! - [`diagnostics`]: `/metrics` over HTTPS behind TokenReview and SubjectAccessReview.
//! - [`webhook`]: the conversion webhook's TLS server (v1beta1 <-> v1beta2, [`api::conversion`]).
//! - [`manager`]: flags, start-up order (leader election, Docker, CRDs) and shutdown.
//! - [`inmemory`]: the in-memory backend's fake workload API server (object store, HTTPS
//!   listener per cluster), the typed `spec.backend.inMemory` ([`inmemory::spec`]) and the pure
//!   phase and endpoint decisions of an in-memory machine and cluster ([`inmemory::phases`]),
//!   which the in-memory DevCluster and DevMachine reconcilers act on.
//!
//! docs/architecture.md has the module map and one reconcile walked through.
pub mod api;
pub mod bootstrap;
pub mod capi;
pub mod controllers;
pub mod diagnostics;
pub mod docker;
pub mod http;
pub mod inmemory;
pub mod manager;
pub mod telemetry;
pub mod webhook;
