//! The in-memory backend's fake workload API server (issue 29): per workload cluster an object
//! store ([`store`]) and an HTTPS listener serving the Kubernetes API over it ([`server`]), for
//! the clients CAPI, KCP and CABPK point at an in-memory cluster, with port-forward
//! ([`portforward`] over [`spdy`]) to a fake etcd ([`etcd`], gRPC by [`grpc`]) for KCP.
//! Nothing runs a machine: the objects are the cluster. The typed `spec.backend.inMemory` ([`spec`]) and the pure phase
//! and endpoint decisions of an in-memory machine and cluster ([`phases`]) are here too. Not
//! wired to the controllers yet; docs/in-memory.md says what is served and what is not.
pub mod certs;
pub mod etcd;
pub mod grpc;
pub mod kinds;
pub mod patch;
pub mod phases;
pub mod portforward;
pub mod selector;
pub mod server;
pub mod spdy;
pub mod spec;
pub mod status;
pub mod store;

pub use server::Listener;
pub use status::ApiError;
pub use store::{Group, Limits, Store};
