//! The "act" half of the three controllers, tested in process and in milliseconds: each test
//! calls a public `reconcile` entry point against an in-memory API server ([`api_server`]) and
//! a container engine with state ([`engine`]), set up by one fixture ([`scenario`]), and asserts
//! on what a user or CAPI could observe: objects as stored (conditions with reasons,
//! finalizers, spec fields), the requests sent with their bodies, the containers with their
//! labels and the files written into them.
//!
//! What needs a real management plane and a Docker Engine (watches and triggers, a node's
//! bootstrap actually running, a workload cluster's Node, the engine's own behaviour) stays in
//! tests/controllers.rs and the other plane tests.
mod api_server;
mod engine;
mod scenario;

mod cluster;
mod gates;
mod in_memory;
mod machine;
mod pool;
