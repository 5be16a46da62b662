//! The objects both controllers read, cached by the watches `run` starts anyway: a reconcile
//! looks its owners up here instead of sending a GET per pass. A cache miss (an object created
//! a moment ago whose watch event has not arrived) falls back to one GET, so a new object is
//! never reported missing because of watch lag.
use std::sync::Arc;

use kube::{
    Api, Client, Resource,
    runtime::reflector::{self, ObjectRef, Store, store::Writer},
};
use serde::de::DeserializeOwned;

use super::error::Result;
use crate::capi::{Cluster, Machine, MachinePool};

/// Read handles of the shared caches.
#[derive(Clone)]
pub struct Caches {
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    /// Read by the pool controller and by every reconcile of a pool's instance (its bootstrap
    /// data and version are the MachinePool's).
    pub machine_pools: Store<MachinePool>,
}

/// The write ends, consumed by the watches in [`super::run`].
pub struct CacheWriters {
    pub clusters: Writer<Cluster>,
    pub machines: Writer<Machine>,
    pub machine_pools: Writer<MachinePool>,
}

/// Empty caches and the writers that fill them.
pub fn caches() -> (Caches, CacheWriters) {
    let (clusters, cw) = reflector::store();
    let (machines, mw) = reflector::store();
    let (machine_pools, pw) = reflector::store();
    (
        Caches {
            clusters,
            machines,
            machine_pools,
        },
        CacheWriters {
            clusters: cw,
            machines: mw,
            machine_pools: pw,
        },
    )
}

impl Caches {
    /// Wait until every watch has listed once (a reconcile must never mistake "not listed yet"
    /// for "gone").
    pub async fn ready(&self) {
        // A writer is only dropped when its watch ends, i.e. at shutdown: nothing to wait for.
        let _ = futures::join!(
            self.clusters.wait_until_ready(),
            self.machines.wait_until_ready(),
            self.machine_pools.wait_until_ready(),
        );
    }
}

/// `namespace/name` of `K` from `store`, or from the API server when the cache has not seen it
/// (yet). `Ok(None)`: it does not exist.
pub async fn get<K>(
    store: &Store<K>,
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Arc<K>>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    if let Some(obj) = store.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some(obj));
    }
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
        .map(Arc::new))
}
