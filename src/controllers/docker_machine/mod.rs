//! DockerMachine reconciler (DevMachine's too, as its view): one node container per machine,
//! bootstrapped from CAPI's data, through the [`lifecycle`](super::lifecycle).
//!
//! fetch ([`Owners`], from the caches) -> the contract's gate -> normal ([`decide::normal`],
//! pure; then [`provision`]) or delete ([`delete`]) -> status. A DevMachine of the in-memory
//! backend has its own reconciler ([`InMemoryMachines`]) behind the same lifecycle: a simulated
//! machine, no container.
mod backends;
pub mod bootstrap;
pub mod decide;
mod delete;
mod in_memory;
pub mod node;
mod provision;

use std::sync::Arc;

use kube::{ResourceExt, runtime::controller::Action};

pub use decide::{Bound, Normal, Owners, Status};
pub use in_memory::InMemoryMachines;

use super::kit::{
    caches,
    context::Context,
    error::Result,
    kinds::Kinds,
    lifecycle::{Deleted, Facts, Reconciler, Step, Subject},
};
use crate::{
    api::{DockerMachine, DockerMachineStatus, conditions::types},
    capi,
};

/// Upstream's; a DevMachine carries the same one.
pub const FINALIZER: &str = "dockermachine.infrastructure.cluster.x-k8s.io";

/// The DockerMachine (DevMachine) controller.
pub struct Machines;

/// What a DockerMachine (DevMachine) is to the contract, whichever backend serves it.
impl Subject for DockerMachine {
    type Fetched = Owners;
    type Bound = Bound;
    type Status = DockerMachineStatus;

    const FINALIZER: &'static str = FINALIZER;
    const OWNER_KIND: &'static str = "Machine";

    fn kind(kinds: Kinds) -> &'static str {
        kinds.machine
    }

    fn status(dm: &DockerMachine) -> Option<&DockerMachineStatus> {
        dm.status.as_ref()
    }

    async fn fetch(dm: &DockerMachine, ctx: &Context) -> Result<Owners> {
        fetch(dm, ctx).await
    }

    fn facts(kind: &str, dm: &DockerMachine, owners: &Owners) -> Facts<Bound> {
        decide::facts(kind, dm, owners)
    }
}

impl Reconciler for Machines {
    const PRIMARY: &'static str = types::CONTAINER_PROVISIONED;
    const DELETING: &'static str = "Deleting the node container";
    const READY_FROM: &'static [&'static str] = &[
        types::CONTAINER_PROVISIONED,
        types::CGROUPS_READY,
        types::PRE_LOADED_IMAGES_READY,
        types::BOOTSTRAP_COMPLETED,
    ];
    /// Upstream v1.14's set; what capd-rs reported before in its place goes.
    const RETIRED: &'static [&'static str] = &[types::LEGACY_BOOTSTRAP_EXEC_SUCCEEDED];

    async fn normal(step: &mut Step<'_, Self>, plan: Normal) -> Result<Action> {
        match plan {
            Normal::Wait(waiting) => {
                step.report.set(&waiting);
                Ok(Action::requeue(step.ctx.settings.resync))
            }
            Normal::Refresh(bound) => {
                let Step {
                    obj,
                    fetched,
                    ctx,
                    patcher,
                    report,
                    ..
                } = step;
                provision::refresh(&bound, obj, fetched, ctx, patcher, report).await
            }
            Normal::Provision(bound, secret) => {
                provision::Provisioning {
                    bound: &bound,
                    dm: step.obj,
                    owners: step.fetched,
                    ctx: step.ctx,
                    patcher: &mut step.patcher,
                    secret_name: &secret,
                }
                .run(&mut step.report)
                .await
            }
        }
    }

    async fn delete(step: &mut Step<'_, Self>, cluster_name: Option<String>) -> Result<Deleted> {
        delete::containers(step.obj, step.fetched, cluster_name.as_deref(), step.ctx).await?;
        Ok(Deleted::Released)
    }
}

/// The owner Machine, its Cluster and the Cluster's DockerCluster (DevCluster), from the caches.
async fn fetch(dm: &DockerMachine, ctx: &Context) -> Result<Owners> {
    let ns = dm.namespace().unwrap_or_default();
    let Some(owner) = capi::capi_owner(&dm.metadata, "Machine") else {
        return Ok(Owners::default());
    };
    let c = &ctx.caches;
    let mut machine = caches::get(&c.machines, &ctx.client, &ns, &owner.name).await?;
    if let (Some(m), Some(pool)) = (&machine, dm.labels().get(capi::MACHINE_POOL_NAME_LABEL)) {
        let pool = caches::get(&c.machine_pools, &ctx.client, &ns, pool).await?;
        machine = pool.map(|p| Arc::new(pool_instance(m, &p)));
    }
    let cluster_name = machine
        .as_ref()
        .and_then(|m| m.cluster_name().map(str::to_string))
        .or_else(|| dm.labels().get(capi::CLUSTER_NAME_LABEL).cloned());
    let cluster = match &cluster_name {
        Some(name) => caches::get(&c.clusters, &ctx.client, &ns, name).await?,
        None => None,
    };
    let docker_cluster = match cluster
        .as_ref()
        .and_then(|c| c.spec.infrastructure_ref.as_ref())
        .and_then(|r| r.name_if(crate::api::GROUP, ctx.kinds.cluster))
    {
        Some(name) => ctx.infra_cluster(&ns, name).await?,
        None => None,
    };
    Ok(Owners {
        machine,
        cluster,
        docker_cluster,
        cluster_name,
    })
}

/// The Machine CAPI core gives a MachinePool instance carries no bootstrap data and no version
/// (it only mirrors the pool): the instance boots from the pool's. `None` above (the pool is
/// gone) reads as a missing owner: the instance waits, or is deleted with its pool.
fn pool_instance(machine: &capi::Machine, pool: &capi::MachinePool) -> capi::Machine {
    let mut m = machine.clone();
    if m.data_secret_name().is_none() {
        m.spec
            .bootstrap
            .get_or_insert_with(Default::default)
            .data_secret_name = pool.data_secret_name().map(str::to_string);
    }
    if m.spec.version.as_deref().is_none_or(str::is_empty) {
        m.spec.version = pool.version().map(str::to_string);
    }
    m
}
