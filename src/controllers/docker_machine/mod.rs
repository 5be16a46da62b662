//! DockerMachine reconciler (DevMachine's too, as its view): one node container per machine,
//! bootstrapped from CAPI's data.
//!
//! fetch ([`Owners`], from the caches) -> decide ([`decide::decide`], pure) -> act
//! ([`provision`], [`delete`]) -> status, written once on every exit path.
pub mod decide;
mod delete;
mod provision;

use std::sync::Arc;

use chrono::Utc;
use kube::{ResourceExt, runtime::controller::Action};
use tracing::{Instrument, info, info_span};

pub use decide::{Normal, Owners, Plan};

use super::{
    caches,
    context::Context,
    error::{Error, Result},
    events,
    kinds::Kinds,
    patch::Patcher,
};
use crate::{
    api::{
        DockerMachine, DockerMachineStatus,
        conditions::{self, Desired, reasons, types},
        dev,
    },
    capi,
};

/// Upstream's; a DevMachine carries the same one.
pub const FINALIZER: &str = "dockermachine.infrastructure.cluster.x-k8s.io";

pub async fn reconcile(dm: Arc<DockerMachine>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dm.namespace().unwrap_or_default();
    let owner = capi::capi_owner(&dm.metadata, "Machine").map(|o| o.name.clone());
    let span = info_span!("reconcile", kind = ctx.kinds.machine, namespace = %ns, name = %dm.name_any(), machine = owner.as_deref().unwrap_or(""));
    async move {
        let owners = fetch(&dm, &ctx).await?;
        let plan = decide::decide(ctx.kinds.machine, &dm, &owners);
        act(plan, &dm, &owners, &ctx).await
    }
    .instrument(span)
    .await
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

async fn act(plan: Plan, dm: &DockerMachine, owners: &Owners, ctx: &Context) -> Result<Action> {
    let kind = ctx.kinds.machine;
    let api = Kinds::api(kind, &ctx.client, &dm.namespace().unwrap_or_default());
    let mut patcher = Patcher::new(api, dm, &ctx.own_writes);
    let mut status = dm.status.clone().unwrap_or_default();
    let set = |status: &mut DockerMachineStatus, d: &Desired| {
        conditions::set(
            status.conditions.get_or_insert_with(Vec::new),
            d,
            dm.metadata.generation,
            Utc::now(),
        );
    };
    let outcome = match plan {
        Plan::LeaveAlone => return Ok(Action::await_change()),
        Plan::AwaitOwner => {
            info!("waiting for the Machine controller to set the owner reference");
            return Ok(Action::requeue(ctx.settings.resync));
        }
        Plan::DeleteOrphan | Plan::Unserved { deleting: true, .. } => {
            return delete::orphan(dm, ctx, &mut patcher).await;
        }
        Plan::Unserved { backend, .. } => {
            let why = Desired::false_(
                types::CONTAINER_PROVISIONED,
                reasons::BACKEND_NOT_SERVED,
                dev::unserved_message(kind, &backend),
            );
            set(&mut status, &why);
            Ok(Action::await_change())
        }
        Plan::NotMachineInfrastructure(why) => {
            info!(message = %why.message, "not the owner Machine's infrastructure: not provisioned");
            set(&mut status, &why);
            // The Machine's mapper does not lead here (it follows infrastructureRef): look again
            // at the resync period, never faster.
            Ok(Action::requeue(ctx.settings.resync))
        }
        Plan::Missing(message) => return Err(Error::Missing(message)),
        Plan::Paused(why) => {
            set(&mut status, &conditions::paused(&why));
            patcher.status(dm.status.as_ref(), &status).await?;
            return Ok(Action::await_change());
        }
        Plan::Delete { cluster_name } => {
            set(&mut status, &conditions::paused(&[]));
            // The only early status write: a user watching the deletion sees why it takes time.
            return delete::reconcile(
                dm,
                owners,
                cluster_name.as_deref(),
                ctx,
                &mut patcher,
                status,
            )
            .await;
        }
        Plan::Normal(normal) => {
            set(&mut status, &conditions::paused(&[]));
            match patcher.add_finalizer(dm, FINALIZER).await {
                Err(e) => Err(e),
                Ok(_) => match normal {
                    Normal::Wait(waiting) => {
                        set(&mut status, &waiting);
                        Ok(Action::requeue(ctx.settings.resync))
                    }
                    Normal::Refresh(bound) => {
                        provision::refresh(&bound, dm, owners, ctx, &mut patcher, &mut status).await
                    }
                    Normal::Provision(bound, secret) => {
                        provision::Provisioning {
                            bound: &bound,
                            dm,
                            owners,
                            ctx,
                            patcher: &mut patcher,
                            secret_name: &secret,
                        }
                        .run(&mut status)
                        .await
                    }
                },
            }
        }
    };
    // Status once, whatever happened: an error is reported in the condition it concerns.
    if let Err(e) = &outcome
        && let Some(reason) = e.reason()
    {
        let condition = match e {
            Error::Blocked(b) => b.condition,
            _ => types::CONTAINER_PROVISIONED,
        };
        set(
            &mut status,
            &Desired::false_(condition, reason, e.to_string()),
        );
    }
    let conds = status.conditions.get_or_insert_with(Vec::new);
    // Upstream v1.14's set; what capd-rs reported before in its place goes.
    conds.retain(|c| c.type_ != types::LEGACY_BOOTSTRAP_EXEC_SUCCEEDED);
    let ready = conditions::summarize_ready(
        conds,
        &[
            types::CONTAINER_PROVISIONED,
            types::CGROUPS_READY,
            types::PRE_LOADED_IMAGES_READY,
            types::BOOTSTRAP_COMPLETED,
        ],
    );
    set(&mut status, &ready);
    if let Some(conds) = status.conditions.as_mut() {
        conditions::restamp(conds, dm.metadata.generation, patcher.observed_generation());
    }
    patcher.status(dm.status.as_ref(), &status).await?;
    events::publish(
        &ctx.recorder,
        &Kinds::reference(kind, &dm.metadata),
        dm.status.as_ref().and_then(|s| s.conditions.as_ref()),
        status.conditions.as_ref(),
    )
    .await;
    match outcome {
        Err(e) => match e.fixed_retry() {
            Some(retry) => {
                info!(error = %e, retry_in = ?retry, "blocked until something changes");
                Ok(Action::requeue(retry))
            }
            None => Err(e),
        },
        ok => ok,
    }
}
