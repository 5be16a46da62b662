//! DockerCluster reconciler: an HAProxy load-balancer container per cluster.
//!
//! fetch (object, owner Cluster) -> decide (paused, managed-by, deleting) -> act (Docker) ->
//! status (one merge patch, only when it changed).
use std::{sync::Arc, time::Duration};

use chrono::Utc;
use kube::{Api, ResourceExt, runtime::controller::Action};
use serde_json::json;
use tracing::{Instrument, info, info_span, warn};

use super::{
    caches,
    context::Context,
    error::{Error, Result},
    events, load_balancer,
    patch::Patcher,
};
use crate::{
    api::{
        ApiEndpoint, DockerCluster, DockerClusterStatus, Initialization,
        conditions::{self, Desired, reasons, types},
    },
    capi::{self, Cluster},
    docker::labels,
};

pub const FINALIZER: &str = "dockercluster.infrastructure.cluster.x-k8s.io";
const KIND: &str = "DockerCluster";

pub async fn reconcile(dc: Arc<DockerCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dc.namespace().unwrap_or_default();
    let owner = capi::capi_owner(&dc.metadata, "Cluster").map(|o| o.name.clone());
    let span = info_span!("reconcile", kind = KIND, namespace = %ns, name = %dc.name_any(), cluster = owner.as_deref().unwrap_or(""));
    reconcile_inner(dc, ctx).instrument(span).await
}

async fn reconcile_inner(dc: Arc<DockerCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dc.namespace().unwrap_or_default();
    let api: Api<DockerCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let mut patcher = Patcher::new(api, &dc);

    let deleting = dc.metadata.deletion_timestamp.is_some();
    // Externally managed objects are left alone, except that a finalizer we added before the
    // annotation appeared is still honoured (or deletion would hang and containers leak).
    let ours_to_delete = deleting && dc.finalizers().iter().any(|f| f == FINALIZER);
    if capi::is_externally_managed(&dc.metadata) && !ours_to_delete {
        return Ok(Action::await_change());
    }

    let Some(owner) = capi::capi_owner(&dc.metadata, "Cluster") else {
        if deleting {
            // Never got an owner: remove whatever we created for this very object, then let go.
            crate::docker::remove_owned_by(ctx.runtime.as_ref(), &dc.uid().unwrap_or_default())
                .await?;
            patcher.remove_finalizer(&dc, FINALIZER).await?;
            ctx.forget(&super::key(dc.as_ref()), &dc.uid().unwrap_or_default());
        } else {
            info!(dockercluster = %dc.name_any(), "waiting for the Cluster controller to set the owner reference");
        }
        return Ok(Action::requeue(ctx.settings.resync));
    };
    let cluster = match caches::get(&ctx.caches.clusters, &ctx.client, &ns, &owner.name).await? {
        Some(c) => Some(c),
        None if deleting => None,
        None => {
            return Err(Error::Missing(format!(
                "owner Cluster {ns}/{} not found",
                owner.name
            )));
        }
    };
    let cluster_name = cluster
        .as_ref()
        .map_or(owner.name.clone(), |c| c.name_any());

    let mut status = dc.status.clone().unwrap_or_default();
    let generation = dc.metadata.generation;
    let now = Utc::now();
    let conds = status.conditions.get_or_insert_with(Vec::new);

    let paused = capi::paused_reasons(cluster.as_deref(), &dc.metadata, KIND);
    if !paused.is_empty() {
        conditions::set(conds, &conditions::paused(&paused), generation, now);
        patcher
            .status(dc.status.as_ref(), &status, &ctx.status_versions)
            .await?;
        return Ok(Action::requeue(ctx.settings.resync));
    }
    conditions::set(conds, &conditions::paused(&[]), generation, now);

    if deleting {
        return reconcile_delete(&mut patcher, &dc, &ctx, &cluster_name, status).await;
    }
    let cluster = cluster.ok_or_else(|| Error::Missing("owner Cluster vanished".into()))?;
    patcher.add_finalizer(&dc, FINALIZER).await?;
    reconcile_normal(&mut patcher, &dc, &ctx, &cluster, status).await
}

async fn reconcile_normal(
    patcher: &mut Patcher<DockerCluster>,
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
    let outcome =
        load_balancer::ensure(ctx, dc, &owner(dc, &cluster_name, &ns, &uid), cluster).await;
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let now = Utc::now();
    let (action, result) = match outcome {
        Ok(load_balancer::Ensured::Ready { ip, frontend_port }) => {
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
        Ok(load_balancer::Ensured::Waiting(message)) => {
            conditions::set(
                conds,
                &Desired::false_(
                    types::LOAD_BALANCER_AVAILABLE,
                    reasons::NOT_AVAILABLE,
                    message,
                ),
                generation,
                now,
            );
            (Action::requeue(Duration::from_secs(2)), Ok(()))
        }
        Err(e) => {
            if e.fixed_retry().is_some() {
                warn!(dockercluster = %dc.name_any(), error = %e, "load balancer blocked");
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
    patcher
        .status(dc.status.as_ref(), &status, &ctx.status_versions)
        .await?;
    events::publish(
        &ctx.recorder,
        dc,
        dc.status.as_ref().and_then(|s| s.conditions.as_ref()),
        status.conditions.as_ref(),
    )
    .await;
    result.map(|_| action)
}

async fn reconcile_delete(
    patcher: &mut Patcher<DockerCluster>,
    dc: &DockerCluster,
    ctx: &Context,
    cluster_name: &str,
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
    patcher
        .status(dc.status.as_ref(), &status, &ctx.status_versions)
        .await?;

    let ns = dc.namespace().unwrap_or_default();
    let uid = dc.uid().unwrap_or_default();
    load_balancer::delete(ctx, &owner(dc, cluster_name, &ns, &uid)).await?;
    ctx.workload.forget(&ns, cluster_name);
    patcher.remove_finalizer(dc, FINALIZER).await?;
    ctx.forget(&super::key(dc), &uid);
    Ok(Action::await_change())
}

/// The LB container's owner: this DockerCluster.
fn owner<'a>(
    dc: &'a DockerCluster,
    cluster_name: &'a str,
    ns: &'a str,
    uid: &'a str,
) -> labels::Owner<'a> {
    labels::Owner {
        cluster_name,
        cluster_namespace: ns,
        kind: KIND,
        name: dc.metadata.name.as_deref().unwrap_or_default(),
        uid,
    }
}
