//! DockerCluster reconciler (DevCluster's too, as its view): an HAProxy load-balancer container
//! per cluster.
//!
//! fetch (the owner Cluster, from the cache) -> decide ([`decide`], pure) -> act (the load
//! balancer) -> status (one guarded merge patch, only when it changed).
use std::sync::Arc;

use chrono::Utc;
use kube::{ResourceExt, runtime::controller::Action};
use serde_json::json;
use tracing::{Instrument, info, info_span, warn};

use super::{
    caches,
    context::Context,
    error::{Error, Result},
    events,
    kinds::Kinds,
    load_balancer,
    patch::Patcher,
};
use crate::{
    api::{
        ApiEndpoint, DockerCluster, DockerClusterStatus, Initialization,
        conditions::{self, Desired, reasons, types},
        dev,
    },
    capi::{self, Cluster},
    docker::labels,
};

/// Upstream's; a DevCluster carries the same one.
pub const FINALIZER: &str = "dockercluster.infrastructure.cluster.x-k8s.io";

pub async fn reconcile(dc: Arc<DockerCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dc.namespace().unwrap_or_default();
    let owner = capi::capi_owner(&dc.metadata, "Cluster").map(|o| o.name.clone());
    let span = info_span!("reconcile", kind = ctx.kinds.cluster, namespace = %ns, name = %dc.name_any(), cluster = owner.as_deref().unwrap_or(""));
    reconcile_inner(dc, ctx).instrument(span).await
}

/// What a DockerCluster reconcile does, decided from the object and its owner Cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Externally managed (`cluster.x-k8s.io/managed-by`): not ours to touch.
    LeaveAlone,
    /// No owner Cluster yet: CAPI sets it.
    AwaitOwner,
    /// Deleted before it ever had an owner: remove what carries its UID, then let go.
    DeleteOrphan,
    /// A DevCluster whose backend this provider does not serve: say so, and let it be deleted.
    Unserved {
        backend: String,
        deleting: bool,
    },
    /// The owner Cluster does not exist (transient: it may appear).
    Missing(String),
    Paused(Vec<String>),
    Delete {
        cluster_name: String,
        /// The owner Cluster if it still exists: its `spec.infrastructureRef` decides whether
        /// a previous infrastructure object's LB is this one's to remove.
        cluster: Option<Arc<Cluster>>,
    },
    Normal(Arc<Cluster>),
}

/// Pure: the plan for `dc` (of kind `kind`) whose owner Cluster (from the cache) is `cluster`.
pub fn decide(kind: &str, dc: &DockerCluster, cluster: Option<Arc<Cluster>>) -> Plan {
    let deleting = dc.metadata.deletion_timestamp.is_some();
    let ownership = capi::ownership(&dc.metadata, FINALIZER, "Cluster");
    if let Some(backend) = dev::unserved_backend(&dc.metadata)
        && !matches!(ownership, capi::Ownership::External)
    {
        let backend = backend.to_string();
        return Plan::Unserved { backend, deleting };
    }
    let owner = match ownership {
        capi::Ownership::External => return Plan::LeaveAlone,
        capi::Ownership::Unowned { deleting: true } => return Plan::DeleteOrphan,
        capi::Ownership::Unowned { deleting: false } => return Plan::AwaitOwner,
        capi::Ownership::Owned(owner) => owner,
    };
    if cluster.is_none() && !deleting {
        let ns = dc.namespace().unwrap_or_default();
        return Plan::Missing(format!("owner Cluster {ns}/{owner} not found"));
    }
    let paused = capi::paused_reasons(cluster.as_deref(), &dc.metadata, kind);
    if !paused.is_empty() {
        return Plan::Paused(paused);
    }
    match cluster {
        Some(c) if !deleting => Plan::Normal(c),
        c => Plan::Delete {
            cluster_name: c.as_ref().map_or(owner.to_string(), |c| c.name_any()),
            cluster: c,
        },
    }
}

async fn reconcile_inner(dc: Arc<DockerCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dc.namespace().unwrap_or_default();
    let cluster = match capi::capi_owner(&dc.metadata, "Cluster") {
        Some(owner) => caches::get(&ctx.caches.clusters, &ctx.client, &ns, &owner.name).await?,
        None => None,
    };
    let kind = ctx.kinds.cluster;
    let plan = decide(kind, &dc, cluster);

    let mut patcher = Patcher::new(
        Kinds::api(kind, &ctx.client, &ns),
        dc.as_ref(),
        &ctx.own_writes,
    );
    let mut status = dc.status.clone().unwrap_or_default();
    let set_paused = |status: &mut DockerClusterStatus, why: &[String]| {
        conditions::set(
            status.conditions.get_or_insert_with(Vec::new),
            &conditions::paused(why),
            dc.metadata.generation,
            Utc::now(),
        );
    };
    match plan {
        Plan::LeaveAlone => Ok(Action::await_change()),
        Plan::AwaitOwner => {
            info!("waiting for the Cluster controller to set the owner reference");
            Ok(Action::requeue(ctx.settings.resync))
        }
        // An unserved backend may have been docker before: nothing of it may stay either.
        Plan::DeleteOrphan | Plan::Unserved { deleting: true, .. } => {
            let uid = dc.uid().unwrap_or_default();
            crate::docker::remove_owned_by(ctx.runtime.as_ref(), &uid).await?;
            patcher.remove_finalizer(dc.as_ref(), FINALIZER).await?;
            ctx.forget(&super::key(kind, dc.as_ref()), &uid);
            Ok(Action::await_change())
        }
        Plan::Unserved { backend, .. } => {
            let why = Desired::false_(
                types::LOAD_BALANCER_AVAILABLE,
                reasons::BACKEND_NOT_SERVED,
                dev::unserved_message(kind, &backend),
            );
            let conds = status.conditions.get_or_insert_with(Vec::new);
            conditions::set(conds, &why, dc.metadata.generation, Utc::now());
            let ready = conditions::summarize_ready(conds, &[types::LOAD_BALANCER_AVAILABLE]);
            conditions::set(conds, &ready, dc.metadata.generation, Utc::now());
            patcher.status(dc.status.as_ref(), &status).await?;
            let before = dc.status.as_ref().and_then(|s| s.conditions.as_ref());
            let regarding = Kinds::reference(kind, &dc.metadata);
            events::publish(
                &ctx.recorder,
                &regarding,
                before,
                status.conditions.as_ref(),
            )
            .await;
            Ok(Action::await_change())
        }
        Plan::Missing(message) => Err(Error::Missing(message)),
        Plan::Paused(why) => {
            set_paused(&mut status, &why);
            patcher.status(dc.status.as_ref(), &status).await?;
            Ok(Action::requeue(ctx.settings.resync))
        }
        Plan::Delete {
            cluster_name,
            cluster,
        } => {
            set_paused(&mut status, &[]);
            let cluster = cluster.as_deref();
            reconcile_delete(&mut patcher, &dc, &ctx, &cluster_name, cluster, status).await
        }
        Plan::Normal(cluster) => {
            set_paused(&mut status, &[]);
            patcher.add_finalizer(dc.as_ref(), FINALIZER).await?;
            reconcile_normal(&mut patcher, &dc, &ctx, &cluster, status).await
        }
    }
}

async fn reconcile_normal(
    patcher: &mut Patcher<'_>,
    dc: &DockerCluster,
    ctx: &Context,
    cluster: &Cluster,
    mut status: DockerClusterStatus,
) -> Result<Action> {
    let generation = dc.metadata.generation;
    let ns = dc.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    status.failure_domains = dc.spec.failure_domains.clone();

    let uid = dc.uid().unwrap_or_default();
    let key = super::key(ctx.kinds.cluster, dc);
    let owner = owner(ctx, dc, &cluster_name, &ns, &uid);
    let outcome = load_balancer::ensure(ctx, dc, &owner, cluster, patcher).await;
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let now = Utc::now();
    let (action, result) = match outcome {
        Ok(load_balancer::Ensured::Ready { ip, frontend_port }) => {
            ctx.waits.reset(&key);
            // The endpoint is set once; CAPI core copies it when provisioned turns true, so it
            // must be in spec before status says so.
            let endpoint = dc.spec.control_plane_endpoint.clone().unwrap_or_default();
            if !endpoint.is_valid() {
                let desired = ApiEndpoint {
                    host: endpoint.host.filter(|h| !h.is_empty()).or(Some(ip)),
                    port: endpoint.port.or(Some(i32::from(frontend_port))),
                };
                patcher
                    .spec(json!({ "controlPlaneEndpoint": desired }))
                    .await?;
            }
            conditions::set(
                conds,
                &Desired::true_(types::LOAD_BALANCER_AVAILABLE, reasons::AVAILABLE),
                generation,
                now,
            );
            status.initialization = Some(Initialization {
                provisioned: Some(true),
            });
            status.ready = Some(true);
            (Action::requeue(ctx.settings.resync), Ok(()))
        }
        Ok(load_balancer::Ensured::Waiting {
            reason,
            message,
            retry,
        }) => {
            conditions::set(
                conds,
                &Desired::false_(types::LOAD_BALANCER_AVAILABLE, reason, message),
                generation,
                now,
            );
            // A wait that lasts backs off (2 s, doubling, at most 5 min): the pass succeeds, so
            // the failure backoff would start over every time.
            let retry = retry.unwrap_or_else(|| ctx.waits.next_delay(&key));
            (Action::requeue(retry), Ok(()))
        }
        Err(e) => {
            if e.fixed_retry().is_some() {
                warn!(error = %e, "load balancer blocked");
            }
            let reason = e.reason().unwrap_or(reasons::NOT_AVAILABLE);
            conditions::set(
                conds,
                &Desired::false_(types::LOAD_BALANCER_AVAILABLE, reason, e.to_string()),
                generation,
                now,
            );
            match e.fixed_retry() {
                Some(retry) => (Action::requeue(retry), Ok(())),
                None => (Action::await_change(), Err(e)),
            }
        }
    };
    let ready = conditions::summarize_ready(conds, &[types::LOAD_BALANCER_AVAILABLE]);
    conditions::set(conds, &ready, generation, now);
    conditions::restamp(conds, generation, patcher.observed_generation());
    patcher.status(dc.status.as_ref(), &status).await?;
    events::publish(
        &ctx.recorder,
        &Kinds::reference(ctx.kinds.cluster, &dc.metadata),
        dc.status.as_ref().and_then(|s| s.conditions.as_ref()),
        status.conditions.as_ref(),
    )
    .await;
    result.map(|_| action)
}

async fn reconcile_delete(
    patcher: &mut Patcher<'_>,
    dc: &DockerCluster,
    ctx: &Context,
    cluster_name: &str,
    cluster: Option<&Cluster>,
    mut status: DockerClusterStatus,
) -> Result<Action> {
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let now = Utc::now();
    conditions::set(
        conds,
        &Desired::false_(
            types::LOAD_BALANCER_AVAILABLE,
            reasons::DELETING,
            "Deleting the load balancer",
        ),
        dc.metadata.generation,
        now,
    );
    conditions::set(
        conds,
        &Desired::false_(types::READY, reasons::DELETING, "Deleting"),
        dc.metadata.generation,
        now,
    );
    patcher.status(dc.status.as_ref(), &status).await?;

    let ns = dc.namespace().unwrap_or_default();
    let uid = dc.uid().unwrap_or_default();
    let lb_owner = owner(ctx, dc, cluster_name, &ns, &uid);
    load_balancer::delete(ctx, dc, &lb_owner, cluster).await?;
    ctx.workload.forget(&ns, cluster_name);
    patcher.remove_finalizer(dc, FINALIZER).await?;
    ctx.forget(&super::key(ctx.kinds.cluster, dc), &uid);
    Ok(Action::await_change())
}

/// The LB container's owner: this DockerCluster (or DevCluster).
fn owner<'a>(
    ctx: &Context,
    dc: &'a DockerCluster,
    cluster_name: &'a str,
    ns: &'a str,
    uid: &'a str,
) -> labels::Owner<'a> {
    labels::Owner {
        cluster_name,
        cluster_namespace: ns,
        kind: ctx.kinds.cluster,
        name: dc.metadata.name.as_deref().unwrap_or_default(),
        uid,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    use super::*;
    use crate::capi::ClusterSpec;

    fn dc(owned: bool, deleting: bool) -> DockerCluster {
        let mut dc = DockerCluster::new("c", Default::default());
        dc.metadata.namespace = Some("ns".into());
        if owned {
            dc.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "Cluster".into(),
                name: "c".into(),
                uid: "cu".into(),
                ..Default::default()
            }]);
        }
        if deleting {
            dc.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        dc
    }

    fn cluster(paused: bool) -> Option<Arc<Cluster>> {
        let mut c = Cluster::new("c", ClusterSpec::default());
        c.spec.paused = Some(paused);
        Some(Arc::new(c))
    }

    #[test]
    fn the_contract_in_order() {
        assert_eq!(
            decide("DockerCluster", &dc(false, false), None),
            Plan::AwaitOwner
        );
        assert_eq!(
            decide("DockerCluster", &dc(false, true), None),
            Plan::DeleteOrphan
        );
        assert!(
            matches!(decide("DockerCluster", &dc(true, false), None), Plan::Missing(m) if m.contains("ns/c"))
        );
        assert!(matches!(
            decide("DockerCluster", &dc(true, false), cluster(true)),
            Plan::Paused(_)
        ));
        assert!(matches!(
            decide("DockerCluster", &dc(true, true), cluster(true)),
            Plan::Paused(_)
        ));
        assert_eq!(
            decide("DockerCluster", &dc(true, true), None),
            Plan::Delete {
                cluster_name: "c".into(),
                cluster: None,
            },
            "a Cluster already gone does not block deletion"
        );
        assert!(matches!(
            decide("DockerCluster", &dc(true, false), cluster(false)),
            Plan::Normal(_)
        ));
        let mut managed = dc(true, false);
        managed.metadata.annotations =
            Some([(capi::MANAGED_BY_ANNOTATION.to_string(), String::new())].into());
        assert_eq!(
            decide("DockerCluster", &managed, cluster(false)),
            Plan::LeaveAlone
        );
    }

    #[test]
    fn an_unserved_backend_is_reported_whatever_the_owner_says() {
        let mut view = dc(true, false);
        view.metadata.annotations =
            Some([(dev::UNSERVED_BACKEND.to_string(), "inMemory".to_string())].into());
        let unserved = |deleting| Plan::Unserved {
            backend: "inMemory".into(),
            deleting,
        };
        assert_eq!(
            decide("DevCluster", &view, cluster(true)),
            unserved(false),
            "paused or not"
        );
        assert_eq!(
            decide("DevCluster", &view, None),
            unserved(false),
            "owner or not"
        );
        view.metadata.deletion_timestamp = dc(true, true).metadata.deletion_timestamp;
        assert_eq!(decide("DevCluster", &view, None), unserved(true));
    }
}
