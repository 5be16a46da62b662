//! The in-memory backend's arms (upstream CAPD v1.14's `inMemory` for DevCluster and
//! DevMachine): no container, the workload cluster is a set of objects in this process
//! ([`crate::inmemory::Cloud`]), served over HTTPS to CAPI's controllers. The DevCluster and
//! DevMachine controllers call these arms, through the same lifecycle, for views marked
//! [`crate::api::dev::IN_MEMORY_BACKEND`]; what to do is decided in [`crate::inmemory::phases`]
//! (pure), what is made in [`crate::inmemory::objects`].
pub mod cluster;
pub mod machine;

use std::time::Duration;

use crate::{
    api::conditions::reasons,
    controllers::kit::{context::Context, error::Error},
    inmemory::{ApiError, Cloud},
};

/// How soon an arm that could not act looks again.
const RETRY: Duration = Duration::from_secs(10);

/// The manager's in-memory backend. A view is marked in-memory only when it is served, so its
/// absence here is a wiring fault, reported rather than panicked on.
fn cloud<'a>(ctx: &'a Context, condition: &'static str) -> Result<&'a Cloud, Error> {
    ctx.in_memory.as_deref().ok_or_else(|| {
        Error::blocked(
            condition,
            reasons::BACKEND_NOT_SERVED,
            "the in-memory backend is not served by this manager",
            Duration::from_secs(300),
        )
    })
}

/// A write to the workload cluster's store that failed (its quota, most likely): reported
/// under `condition` as upstream reports an error of a phase.
fn store_error(condition: &'static str, e: ApiError) -> Error {
    Error::blocked(
        condition,
        reasons::INTERNAL_ERROR,
        format!("the in-memory workload cluster refused a write: {e}"),
        RETRY,
    )
}
