//! The in-memory backend's fake workload API server (issue 29): per workload cluster an object
//! store ([`store`]) and an HTTPS listener serving the Kubernetes API over it ([`server`]), for
//! the clients CAPI, KCP and CABPK point at an in-memory cluster; it takes JSON bodies, and the
//! protobuf bodies controller-runtime sends for the built-in kinds they write ([`protobuf`]).
//! Nothing runs a machine: the
//! objects are the cluster. The typed `spec.backend.inMemory` ([`spec`]) and the pure phase
//! and endpoint decisions of an in-memory machine and cluster ([`phases`]) are here too. Not
//! wired to the controllers yet; docs/in-memory.md says what is served and what is not.
pub mod certs;
pub mod cloud;
pub mod kinds;
pub mod objects;
pub mod patch;
pub mod phases;
pub mod protobuf;
pub mod selector;
pub mod server;
pub mod spec;
pub mod status;
pub mod store;

pub use cloud::Cloud;
pub use server::Listener;
pub use status::ApiError;
pub use store::{Group, Limits, Store};
