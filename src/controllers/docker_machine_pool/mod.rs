//! DockerMachinePool reconciler: a MachinePool's replicas as DockerMachines (a DevMachinePool's,
//! reconciled as its view, as DevMachines).
//!
//! The pool never touches Docker. It keeps one DockerMachine per replica (labelled with the
//! cluster and pool names, and `status.infrastructureMachineKind: DockerMachine`); CAPI core
//! gives each a Machine ("MachinePool Machines"), and the DockerMachine controller makes it a
//! node booted from the pool's bootstrap data. Scaling down deletes Machines, so CAPI drains
//! their nodes first.
//!
//! fetch ([`decide::Fetched`]: the MachinePool and its Cluster from the caches, the instances and
//! their Machines listed from the API server: the counts must not lag) -> decide ([`decide::decide`], pure) ->
//! act (create, delete) -> spec and status.
pub mod decide;

use std::{
    hash::{BuildHasher, Hasher},
    time::Duration,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::info;

use decide::{Bound, Delete, Fetched, Normal, Scale};

use super::kit::{
    caches,
    context::Context,
    error::Result,
    kinds::Kinds,
    lifecycle::{Decide, Deleted, Facts, Reconciler, Step, Subject},
    patch::Patcher,
};
use crate::{
    api::{
        API_VERSION, DockerMachine, DockerMachinePool, DockerMachinePoolStatus, DockerMachineSpec,
        conditions::{self, Desired, reasons, types},
        dev::DevMachine,
    },
    capi::{self, CLUSTER_NAME_LABEL, MACHINE_POOL_NAME_LABEL, Machine},
    docker::naming,
};

/// Upstream's; a DevMachinePool carries the same one.
pub const FINALIZER: &str = "dockermachinepool.infrastructure.cluster.x-k8s.io";
/// On each instance: the template it was made from (see [`decide::template_hash`]).
pub const TEMPLATE_HASH_ANNOTATION: &str =
    "infrastructure.cluster.x-k8s.io/docker-machine-pool-template";
/// While instances are being created or removed: look again this soon, on top of the watches.
const SCALING_RECHECK: Duration = Duration::from_secs(5);

/// How soon a pool that is not where it should be looks again: [`SCALING_RECHECK`] at first,
/// then backing off (its instances' changes wake it anyway; instances that never get ready must
/// not be polled every 5 s forever).
fn recheck(ctx: &Context, dmp: &DockerMachinePool) -> Duration {
    ctx.waits
        .next_delay(&super::key(ctx.kinds.pool, dmp))
        .max(SCALING_RECHECK)
}

/// The DockerMachinePool (DevMachinePool) controller.
pub struct Pools;

/// What a DockerMachinePool (DevMachinePool) is to the contract.
impl Subject for DockerMachinePool {
    type Fetched = Fetched;
    type Bound = Bound;
    type Status = DockerMachinePoolStatus;

    const FINALIZER: &'static str = FINALIZER;
    const OWNER_KIND: &'static str = "MachinePool";

    fn kind(kinds: Kinds) -> &'static str {
        kinds.pool
    }

    fn status(dmp: &DockerMachinePool) -> Option<&DockerMachinePoolStatus> {
        dmp.status.as_ref()
    }

    async fn fetch(dmp: &DockerMachinePool, ctx: &Context) -> Result<Fetched> {
        fetch(dmp, ctx).await
    }

    fn facts(kind: &str, dmp: &DockerMachinePool, f: &Fetched) -> Facts<Bound> {
        decide::facts(kind, dmp, f)
    }
}

impl Decide for Pools {
    type Object = DockerMachinePool;
    type Normal = Normal;
    type Delete = Delete;

    fn decide_normal(dmp: &DockerMachinePool, f: &Fetched, bound: Bound) -> Normal {
        decide::normal(dmp, f, bound)
    }

    fn decide_delete(_: &DockerMachinePool, f: &Fetched) -> Delete {
        decide::delete(f)
    }
}

impl Reconciler for Pools {
    const PRIMARY: &'static str = types::REPLICAS_READY;
    const DELETING: &'static str = "Deleting the instances";
    const READY_FROM: &'static [&'static str] = &[types::REPLICAS_READY];

    /// A pool makes no containers: its instances are DockerMachines, which it owns.
    async fn normal(step: &mut Step<'_, Self>, plan: Normal) -> Result<Action> {
        let (dmp, ctx) = (step.obj, step.ctx);
        let s = match plan {
            Normal::AwaitBootstrapData => {
                step.report.set(&Desired::false_(
                    types::REPLICAS_READY,
                    reasons::WAITING_FOR_BOOTSTRAP_DATA,
                    "Waiting for the MachinePool's bootstrap data",
                ));
                return Ok(Action::requeue(ctx.settings.resync));
            }
            Normal::Scale(s) => s,
        };
        let ns = dmp.namespace().unwrap_or_default();
        create(&s, dmp, &ns, ctx).await?;
        remove(&s.delete, &ns, ctx).await?;
        write_spec(&mut step.patcher, dmp, &s).await?;
        let status = &mut step.report;
        status.replicas = i32::try_from(s.replicas).unwrap_or(i32::MAX);
        // Sticky, as upstream's: CAPI core stops copying providerIDList while it is false.
        status.ready = status.ready || s.all_have_provider_ids;
        status.infrastructure_machine_kind = Some(ctx.kinds.machine.into());
        status.observed_generation = dmp.metadata.generation;
        status.set(&s.replicas_ready);
        if s.replicas_ready.status == conditions::ConditionStatus::True {
            ctx.waits.reset(&step.key());
            Ok(Action::requeue(ctx.settings.resync))
        } else {
            Ok(Action::requeue(recheck(ctx, dmp)))
        }
    }

    async fn delete(step: &mut Step<'_, Self>, plan: Delete) -> Result<Deleted> {
        match plan {
            Delete::Release => Ok(Deleted::Released),
            Delete::Remove(machines) => {
                let ns = step.obj.namespace().unwrap_or_default();
                remove(&machines, &ns, step.ctx).await?;
                Ok(Deleted::Pending(Action::requeue(recheck(
                    step.ctx, step.obj,
                ))))
            }
        }
    }
}

async fn fetch(dmp: &DockerMachinePool, ctx: &Context) -> Result<Fetched> {
    let ns = dmp.namespace().unwrap_or_default();
    let Some(owner) = capi::capi_owner(&dmp.metadata, "MachinePool") else {
        return Ok(Fetched::default());
    };
    let machine_pool =
        caches::get(&ctx.caches.machine_pools, &ctx.client, &ns, &owner.name).await?;
    let Some(cluster_name) = machine_pool
        .as_ref()
        .and_then(|mp| mp.cluster_name().map(str::to_string))
        .or_else(|| dmp.labels().get(CLUSTER_NAME_LABEL).cloned())
    else {
        return Ok(Fetched {
            machine_pool,
            ..Default::default()
        });
    };
    let cluster = caches::get(&ctx.caches.clusters, &ctx.client, &ns, &cluster_name).await?;
    let selector = ListParams::default().labels(&format!(
        "{CLUSTER_NAME_LABEL}={cluster_name},{MACHINE_POOL_NAME_LABEL}={}",
        owner.name
    ));
    let instances = if ctx.kinds.is_dev() {
        let list = Api::<DevMachine>::namespaced(ctx.client.clone(), &ns)
            .list(&selector)
            .await?;
        list.items.iter().map(DevMachine::view).collect()
    } else {
        Api::<DockerMachine>::namespaced(ctx.client.clone(), &ns)
            .list(&selector)
            .await?
            .items
    };
    let machines = Api::<Machine>::namespaced(ctx.client.clone(), &ns)
        .list(&selector)
        .await?
        .items;
    Ok(Fetched {
        machine_pool,
        cluster,
        instances,
        machines,
    })
}

/// New instances: DockerMachines (DevMachines) named `<cluster>-<pool>-<random>` (the node
/// container's name too), owned by the pool and labelled for CAPI core, which gives each a
/// Machine.
async fn create(s: &Scale, dmp: &DockerMachinePool, ns: &str, ctx: &Context) -> Result<()> {
    let owner = OwnerReference {
        api_version: API_VERSION.into(),
        kind: ctx.kinds.pool.into(),
        name: dmp.name_any(),
        uid: dmp.uid().unwrap_or_default(),
        block_owner_deletion: Some(true),
        ..Default::default()
    };
    let mut labels = dmp
        .labels()
        .iter()
        .filter(|(k, _)| *k == capi::WATCH_FILTER_LABEL)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect::<std::collections::BTreeMap<_, _>>();
    labels.insert(CLUSTER_NAME_LABEL.into(), s.cluster_name.clone());
    labels.insert(MACHINE_POOL_NAME_LABEL.into(), s.pool_name.clone());
    for _ in 0..s.create {
        let name = naming::machine_container_name(
            &s.cluster_name,
            &format!("{}-{}", s.pool_name, random_suffix()),
        );
        let mut dm = DockerMachine::new(
            &name,
            DockerMachineSpec {
                custom_image: dmp.spec.template.custom_image.clone(),
                pre_load_images: dmp.spec.template.pre_load_images.clone(),
                extra_mounts: dmp.spec.template.extra_mounts.clone(),
                ..Default::default()
            },
        );
        dm.metadata.namespace = Some(ns.into());
        dm.metadata.labels = Some(labels.clone());
        dm.metadata.annotations = Some(
            [(
                TEMPLATE_HASH_ANNOTATION.to_string(),
                s.template_hash.clone(),
            )]
            .into(),
        );
        dm.metadata.owner_references = Some(vec![owner.clone()]);
        let pp = PostParams::default();
        if ctx.kinds.is_dev() {
            let api = Api::<DevMachine>::namespaced(ctx.client.clone(), ns);
            api.create(&pp, &DevMachine::from_view(dm)).await?;
        } else {
            let api = Api::<DockerMachine>::namespaced(ctx.client.clone(), ns);
            api.create(&pp, &dm).await?;
        }
        info!(kind = ctx.kinds.machine, instance = %name, "instance created");
    }
    Ok(())
}

/// Delete the Machines of the instances that go.
async fn remove(machines: &[String], ns: &str, ctx: &Context) -> Result<()> {
    let api = Api::<Machine>::namespaced(ctx.client.clone(), ns);
    for name in machines {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => info!(machine = %name, "instance deleted through its Machine"),
            // Already gone: what we wanted.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The contract's spec fields: the pool's own providerID and its instances' (sorted).
async fn write_spec(patcher: &mut Patcher<'_>, dmp: &DockerMachinePool, s: &Scale) -> Result<()> {
    let provider_id = format!("docker:////{}-dmp-{}", s.cluster_name, dmp.name_any());
    if dmp.spec.provider_id.as_deref() != Some(provider_id.as_str())
        || dmp.spec.provider_id_list.as_deref().unwrap_or_default() != s.provider_ids.as_slice()
    {
        patcher
            .spec(json!({"providerID": provider_id, "providerIDList": s.provider_ids}))
            .await?;
    }
    Ok(())
}

/// Five characters of [a-z0-9], as CAPI names generated objects.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    let mut n = h.finish();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}
