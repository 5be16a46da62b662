//! The in-memory backend's fake workload API server (issue 29): per workload cluster an object
//! store ([`store`]) and an HTTPS listener serving the Kubernetes API over it ([`server`]), for
//! the clients CAPI, KCP and CABPK point at an in-memory cluster; it takes JSON bodies, and the
//! protobuf bodies controller-runtime sends for the built-in kinds they write ([`protobuf`]),
//! and port-forwards ([`portforward`] over [`spdy`]) to a fake etcd ([`etcd`], gRPC by
//! [`grpc`]) for KCP. Nothing runs a machine: the objects are the cluster. The typed
//! `spec.backend.inMemory` ([`spec`]), the pure phase and endpoint decisions of an in-memory
//! machine and cluster ([`phases`]), the per-manager state ([`cloud`]) and the objects a machine
//! makes ([`objects`]) are here too; the controllers' arms call them. docs/in-memory.md says
//! what is served and what is not.
pub mod certs;
pub mod cloud;
pub mod etcd;
pub mod grpc;
pub mod kinds;
pub mod objects;
pub mod patch;
pub mod phases;
pub mod portforward;
pub mod protobuf;
pub mod selector;
pub mod server;
pub mod spdy;
pub mod spec;
pub mod status;
pub mod store;

pub use cloud::Cloud;
pub use server::Listener;
pub use status::ApiError;
pub use store::{Group, Limits, Store};
