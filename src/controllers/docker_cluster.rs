//! DockerCluster reconciler: an HAProxy load-balancer container per cluster.
//!
//! fetch (object, owner Cluster) -> decide (paused, managed-by, deleting) -> act (Docker) ->
//! status (one merge patch, only when it changed).
use std::{sync::Arc, time::Duration};

use chrono::Utc;
use kube::{Api, ResourceExt, runtime::controller::Action};
use serde_json::json;
use tracing::{info, warn};

use super::{
    context::Context,
    error::{Error, Result},
    load_balancer::{self, DEFAULT_FRONTEND_PORT, LbTarget},
    patch,
};
use crate::{
    api::{
        ApiEndpoint, DockerCluster, DockerClusterStatus, Initialization,
        conditions::{self, Desired, reasons, types},
    },
    capi::{self, Cluster, IpFamily},
    docker::{ContainerInfo, NetworkSpec, RuntimeError, labels, naming, specs},
};

pub const FINALIZER: &str = "dockercluster.infrastructure.cluster.x-k8s.io";
const KIND: &str = "DockerCluster";

pub async fn reconcile(dc: Arc<DockerCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dc.namespace().unwrap_or_default();
    let api: Api<DockerCluster> = Api::namespaced(ctx.client.clone(), &ns);

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
            remove_owned_containers(&ctx, &dc).await?;
            patch::remove_finalizer(&api, &dc, FINALIZER).await?;
        } else {
            info!(dockercluster = %dc.name_any(), "waiting for the Cluster controller to set the owner reference");
        }
        return Ok(Action::requeue(ctx.settings.resync));
    };
    let cluster = match Api::<Cluster>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&owner.name)
        .await?
    {
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
        .map_or(owner.name.clone(), ResourceExt::name_any);

    let mut status = dc.status.clone().unwrap_or_default();
    let generation = dc.metadata.generation;
    let now = Utc::now();
    let conds = status.conditions.get_or_insert_with(Vec::new);

    let paused = capi::paused_reasons(cluster.as_ref(), &dc.metadata, KIND);
    if !paused.is_empty() {
        conditions::set(conds, &conditions::paused(&paused), generation, now);
        patch::patch_status_if_changed(&api, &dc.name_any(), dc.status.as_ref(), &status).await?;
        return Ok(Action::requeue(ctx.settings.resync));
    }
    conditions::set(conds, &conditions::paused(&[]), generation, now);

    if deleting {
        return reconcile_delete(&api, &dc, &ctx, &cluster_name, status).await;
    }
    patch::add_finalizer(&api, &dc, FINALIZER).await?;
    let cluster = cluster.ok_or_else(|| Error::Missing("owner Cluster vanished".into()))?;
    reconcile_normal(&api, &dc, &ctx, &cluster, status).await
}

async fn reconcile_normal(
    api: &Api<DockerCluster>,
    dc: &DockerCluster,
    ctx: &Context,
    cluster: &Cluster,
    mut status: DockerClusterStatus,
) -> Result<Action> {
    let generation = dc.metadata.generation;
    let ns = dc.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    status.failure_domains = dc.spec.failure_domains.clone();

    let outcome = ensure_load_balancer(dc, ctx, cluster, &cluster_name, &ns).await;
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let now = Utc::now();
    let (action, result) = match outcome {
        Ok(LbOutcome::Ready { ip, frontend_port }) => {
            // The endpoint is set once; CAPI core copies it when provisioned turns true, so it
            // must be in spec before status says so.
            let endpoint = dc.spec.control_plane_endpoint.clone().unwrap_or_default();
            if !endpoint.is_valid() {
                let desired = ApiEndpoint {
                    host: endpoint.host.filter(|h| !h.is_empty()).or(Some(ip)),
                    port: endpoint.port.or(Some(i32::from(frontend_port))),
                };
                patch::patch_spec(
                    api,
                    &dc.name_any(),
                    json!({ "controlPlaneEndpoint": desired }),
                )
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
        Ok(LbOutcome::Waiting(message)) => {
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
        Ok(LbOutcome::Blocked { reason, message }) => {
            warn!(dockercluster = %dc.name_any(), %message, "load balancer blocked");
            conditions::set(
                conds,
                &Desired::false_(types::LOAD_BALANCER_AVAILABLE, reason, message),
                generation,
                now,
            );
            (Action::requeue(Duration::from_secs(60)), Ok(()))
        }
        Err(e) => {
            let reason = match &e {
                Error::Runtime(RuntimeError::Unavailable(_)) => reasons::DOCKER_UNAVAILABLE,
                Error::Runtime(RuntimeError::Image { .. }) => reasons::IMAGE_UNAVAILABLE,
                _ => reasons::NOT_AVAILABLE,
            };
            conditions::set(
                conds,
                &Desired::false_(types::LOAD_BALANCER_AVAILABLE, reason, e.to_string()),
                generation,
                now,
            );
            (Action::await_change(), Err(e))
        }
    };
    let ready = conditions::summarize_ready(conds, &[types::LOAD_BALANCER_AVAILABLE]);
    conditions::set(conds, &ready, generation, now);
    patch::patch_status_if_changed(api, &dc.name_any(), dc.status.as_ref(), &status).await?;
    result.map(|_| action)
}

enum LbOutcome {
    Ready {
        ip: String,
        frontend_port: u16,
    },
    /// Transient: e.g. the container has no address yet.
    Waiting(String),
    /// Needs a human: e.g. the name is taken by someone else's container.
    Blocked {
        reason: &'static str,
        message: String,
    },
}

async fn ensure_load_balancer(
    dc: &DockerCluster,
    ctx: &Context,
    cluster: &Cluster,
    cluster_name: &str,
    ns: &str,
) -> Result<LbOutcome> {
    let ip_family = match cluster.ip_family() {
        Ok(f) => f,
        Err(message) => {
            return Ok(LbOutcome::Blocked {
                reason: reasons::INVALID_SPEC,
                message,
            });
        }
    };
    let frontend_port = dc
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DEFAULT_FRONTEND_PORT);
    let custom_config = match custom_config(dc, ctx).await? {
        Ok(c) => c,
        Err(message) => {
            return Ok(LbOutcome::Blocked {
                reason: reasons::INVALID_SPEC,
                message,
            });
        }
    };

    let rt = &ctx.runtime;
    let name = naming::load_balancer_name(cluster_name);
    let uid = dc.uid().unwrap_or_default();
    let owner = labels::Owner {
        cluster_name,
        cluster_namespace: ns,
        kind: KIND,
        name: &dc.name_any(),
        uid: &uid,
    };

    let container: ContainerInfo = match rt.inspect(&name).await? {
        Some(existing) => match labels::ownership(&existing.labels, &owner) {
            labels::Ownership::Foreign(why) => {
                return Ok(LbOutcome::Blocked {
                    reason: reasons::NAME_CONFLICT,
                    message: format!(
                        "container {name} already exists and is not this DockerCluster's: {why}"
                    ),
                });
            }
            // Ours, or ours before a re-create/move of the DockerCluster: adopt it.
            _ => existing,
        },
        None => {
            let lb = dc.spec.load_balancer.as_ref();
            let image = specs::lb_image(
                lb.and_then(|l| l.image_repository.as_deref()),
                lb.and_then(|l| l.image_tag.as_deref()),
                &ctx.settings.lb_image,
            );
            rt.ensure_image(&image).await?;
            rt.ensure_network(&NetworkSpec {
                name: ctx.settings.network.clone(),
                labels: ctx.settings.extra_labels.clone(),
            })
            .await?;
            let labels = labels::container_labels(
                &owner,
                labels::ROLE_LOAD_BALANCER,
                &ctx.settings.extra_labels,
            );
            let spec = specs::lb_container_spec(&specs::LbParams {
                cluster_name,
                image: &image,
                network: &ctx.settings.network,
                labels,
                ipv6_only: ip_family == IpFamily::V6,
            });
            info!(container = %name, "creating load balancer container");
            match rt.create_and_start(&spec).await {
                Ok(c) => c,
                // Lost a race with ourselves (another worker or a restart): look again next pass.
                Err(RuntimeError::Conflict(_)) => {
                    return Ok(LbOutcome::Waiting(format!(
                        "container {name} is being created"
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };

    let container = if container.is_running() {
        container
    } else {
        info!(container = %name, state = ?container.state, "load balancer is not running; starting it");
        rt.start(&name).await?;
        rt.inspect(&name).await?.unwrap_or(container)
    };
    let ip = if ip_family == IpFamily::V6 {
        container.ipv6.clone()
    } else {
        container.ipv4.clone()
    };
    let Some(ip) = ip.filter(|i| !i.is_empty()) else {
        return Ok(LbOutcome::Waiting(format!(
            "container {name} has no IP address yet"
        )));
    };

    let target = LbTarget {
        cluster: cluster_name,
        namespace: ns,
        frontend_port,
        ipv6: ip_family == IpFamily::V6,
        custom_config: custom_config.as_deref(),
    };
    load_balancer::sync_backends(ctx, &target, None).await?;
    Ok(LbOutcome::Ready { ip, frontend_port })
}

/// The complete haproxy.cfg from `customHAProxyConfigTemplateRef`, if set. The inner `Err` is a
/// user error for a condition (missing ConfigMap or key, Go template syntax).
pub(super) async fn custom_config(
    dc: &DockerCluster,
    ctx: &Context,
) -> Result<std::result::Result<Option<String>, String>> {
    let Some(name) = dc
        .spec
        .load_balancer
        .as_ref()
        .and_then(|l| l.custom_haproxy_config_template_ref.as_ref())
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
    else {
        return Ok(Ok(None));
    };
    let ns = dc.namespace().unwrap_or_default();
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cm) = api.get_opt(&name).await? else {
        return Ok(Err(format!(
            "customHAProxyConfigTemplateRef: ConfigMap {ns}/{name} not found"
        )));
    };
    let Some(value) = cm.data.and_then(|mut d| d.remove("value")) else {
        return Ok(Err(format!(
            "customHAProxyConfigTemplateRef: ConfigMap {ns}/{name} has no key \"value\""
        )));
    };
    if value.contains("{{") {
        return Ok(Err(format!(
            "customHAProxyConfigTemplateRef: ConfigMap {ns}/{name} uses Go template syntax, which capd-rs does not evaluate; \
             provide a complete haproxy.cfg (backends are then yours to manage)"
        )));
    }
    Ok(Ok(Some(value)))
}

async fn reconcile_delete(
    api: &Api<DockerCluster>,
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
    patch::patch_status_if_changed(api, &dc.name_any(), dc.status.as_ref(), &status).await?;

    let ns = dc.namespace().unwrap_or_default();
    let name = naming::load_balancer_name(cluster_name);
    let (dc_name, uid) = (dc.name_any(), dc.uid().unwrap_or_default());
    let owner = labels::Owner {
        cluster_name,
        cluster_namespace: &ns,
        kind: KIND,
        name: &dc_name,
        uid: &uid,
    };
    let ours = |c: &ContainerInfo| labels::usable_by(&c.labels, &owner);
    if let Some(existing) = ctx.runtime.inspect(&name).await? {
        if ours(&existing) {
            info!(container = %name, "removing load balancer container");
            ctx.runtime.remove(&name).await?;
        } else {
            warn!(container = %name, "not removing a container with our name that belongs to someone else");
        }
    }
    // The finalizer goes only once the container is really gone.
    if ctx.runtime.inspect(&name).await?.is_some_and(|c| ours(&c)) {
        return Err(Error::ContainerStillExists(name));
    }
    ctx.workload.forget(&ns, cluster_name);
    patch::remove_finalizer(api, dc, FINALIZER).await?;
    Ok(Action::await_change())
}

/// Remove every container labelled with this object's UID (used when it never had an owner).
async fn remove_owned_containers(ctx: &Context, dc: &DockerCluster) -> Result<()> {
    let uid = dc.uid().unwrap_or_default();
    let selector = std::collections::BTreeMap::from([(labels::OWNER_UID.to_string(), uid)]);
    for c in ctx.runtime.list(&selector).await? {
        ctx.runtime.remove(&c.name).await?;
    }
    Ok(())
}
