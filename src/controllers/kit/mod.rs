//! What every controller shares: the reconcile [`lifecycle`], the [`context`] (and the services
//! it holds: [`bootstrap_tasks`], [`workload`] clients), the [`kinds`] of a family, the
//! [`caches`], [`backoff`], classified [`error`]s, the writes to an object ([`patch`]), the
//! status a reconcile builds ([`report`]) and [`events`]. Nothing here knows a controller.
pub mod backoff;
pub mod bootstrap_tasks;
pub mod caches;
pub mod context;
pub mod error;
pub mod events;
pub mod kinds;
pub mod lifecycle;
pub mod patch;
pub mod report;
pub mod workload;

use kube::{Resource, ResourceExt};

pub use caches::{CacheWriters, Caches, caches};
pub use context::{Context, Settings, Shared};

/// The backoff key of an object of `kind` (a Dev* object's, though read as its Docker* view).
pub fn key(kind: &str, obj: &impl Resource) -> String {
    format!(
        "{kind}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}
