//! The controllers: what turns Docker*/Dev* objects into containers, and how they are run.
//!
//! - [`wiring`]: watches, triggers, predicates, mappers, instrumentation and error policy: how
//!   the controllers are run (the top: it knows every controller, nothing knows it).
//! - [`docker_cluster`], [`docker_machine`], [`docker_machine_pool`]: one controller each, every
//!   one a [`kit::lifecycle::Reconciler`]; each holds what it alone uses.
//! - [`machine_template`]: the machine templates' status-only controller.
//! - [`load_balancer`]: the cluster's HAProxy container, used by the cluster and machine
//!   controllers.
//! - [`kit`]: what every controller shares: the reconcile lifecycle, the context, the kinds, the
//!   caches, backoff, errors, the writes to an object, Events, and the services the context holds
//!   (bootstrap tasks, workload-cluster clients).
//!
//! They run once per family of kinds ([`kit::kinds`]): Docker* and Dev*.
#[cfg(test)]
mod act_tests;
pub mod docker_cluster;
pub mod docker_machine;
pub mod docker_machine_pool;
pub mod kit;
pub mod load_balancer;
pub mod machine_template;
pub mod wiring;

pub use kit::{CacheWriters, Caches, Context, Settings, Shared, caches, key};
pub use wiring::{Concurrency, DockerTriggers, FAMILIES, Scope, docker_triggers, run};
