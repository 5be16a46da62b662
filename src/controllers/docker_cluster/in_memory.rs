//! An in-memory DevCluster: a port for its workload cluster's API server, written to
//! `spec.controlPlaneEndpoint` once, then `provisioned`. The listener itself starts with the
//! first control-plane machine's API server (it needs the cluster CA KCP makes after this);
//! deleting the DevCluster drops the listener and every object of the workload cluster.
//!
//! It is one more reconciler behind the same lifecycle as the load balancer's ([`Clusters`]),
//! sharing its fetch and gate; the view's backend mark picks it.
use std::sync::Arc;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::info;

use crate::{
    api::DockerCluster,
    api::{
        ApiEndpoint, Initialization,
        conditions::{Desired, reasons, types},
    },
    capi::Cluster,
    controllers::{
        docker_cluster::{Clusters, Delete},
        kit::{
            error::{Error, IN_MEMORY_RETRY, Result},
            lifecycle::{Decide, Deleted, Reconciler, Reports, Step},
            workload::kubeconfig,
        },
    },
    inmemory::phases::{self, ClusterFacts, ClusterStep, LISTENER_ANNOTATION},
};

/// The conditions an in-memory DevCluster reports: Ready only (upstream owns none but Paused;
/// Ready here says when no port is left), set by this arm.
pub const PRIMARY: &str = types::READY;

/// The DevCluster controller of the in-memory backend.
pub struct InMemoryClusters;

impl Decide for InMemoryClusters {
    type Object = DockerCluster;
    type Normal = Arc<Cluster>;
    type Delete = Delete;

    fn decide_normal(_: &DockerCluster, _: &Option<Arc<Cluster>>, c: Arc<Cluster>) -> Arc<Cluster> {
        c
    }

    fn decide_delete(dc: &DockerCluster, c: &Option<Arc<Cluster>>) -> Delete {
        Clusters::decide_delete(dc, c)
    }
}

impl Reconciler for InMemoryClusters {
    const PRIMARY: &'static str = PRIMARY;
    const DELETING: &'static str = "Deleting the workload cluster's listener and objects";
    /// Ready is set by the normal arm.
    const READY_FROM: &'static [&'static str] = &[];
    const REPORTS: Reports = Reports {
        primary: PRIMARY,
        ready_from: None,
    };

    async fn normal(step: &mut Step<'_, Self>, cluster: Arc<Cluster>) -> Result<Action> {
        normal(step, &cluster).await
    }

    async fn delete(step: &mut Step<'_, Self>, plan: Delete) -> Result<Deleted> {
        delete(step, &plan.cluster_name)?;
        Ok(Deleted::Released)
    }
}

/// The normal arm: reserve the port, write the endpoint once, say provisioned.
async fn normal(step: &mut Step<'_, InMemoryClusters>, cluster: &Cluster) -> Result<Action> {
    let (dc, ctx) = (step.obj, step.ctx);
    let cluster_name = &cluster.name_any();
    let cloud = ctx.in_memory(PRIMARY)?;
    let ns = dc.namespace().unwrap_or_default();
    let listener = phases::listener_name(&ns, cluster_name);
    let provisioned = dc
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        .unwrap_or(false);
    // CAPI copies the DevCluster's endpoint to the Cluster once it is provisioned, and every
    // client (the kubeconfig KCP writes) dials the Cluster's port. A ClusterClass's topology may
    // afterwards put its template's defaulted port (6443) back on the DevCluster: the Cluster's
    // port stays the one served, and no port is written back (no fight with topology). The
    // host is still the DevCluster's, so a manager that moved writes its new one once.
    let endpoint = match (dc.spec.control_plane_endpoint.clone(), cluster.endpoint()) {
        (Some(mut e), Some((_, port))) => {
            e.port = Some(port);
            Some(e)
        }
        (None, Some((host, port))) => Some(ApiEndpoint {
            host: Some(host.to_string()),
            port: Some(port),
        }),
        (e, None) => e,
    };
    let facts = ClusterFacts {
        endpoint: endpoint.as_ref(),
        provisioned,
        host: cloud.host(),
    };
    let step_one = match phases::cluster_step(&facts) {
        Ok(s) => s,
        Err(bad) => {
            step.report.set(&Desired::false_(
                PRIMARY,
                reasons::INVALID_SPEC,
                bad.to_string(),
            ));
            return Ok(Action::await_change());
        }
    };
    let request = match step_one {
        ClusterStep::MoveHost {
            endpoint,
            kubeconfig_server,
            requeue_after,
        } => {
            // The manager came back on another address: the endpoint follows it, the
            // kubeconfig's server first, so a failure leaves the move to the next pass.
            move_kubeconfig(step, cluster_name, &kubeconfig_server).await?;
            info!(
                host = cloud.host(),
                "in-memory endpoint moves to this manager's address"
            );
            step.patcher
                .spec(json!({ "controlPlaneEndpoint": endpoint }))
                .await?;
            return Ok(Action::requeue(requeue_after));
        }
        ClusterStep::Listen(request) => request,
    };
    let plan = phases::cluster_listened(&facts, cloud.reserve_port(&listener, request));
    // The listener's name and, the first time, the endpoint: one write. The endpoint goes in
    // spec before status says provisioned: CAPI copies it when provisioned turns true.
    let annotate = (dc.annotations().get(LISTENER_ANNOTATION) != Some(&listener))
        .then(|| json!({ LISTENER_ANNOTATION: listener }));
    let endpoint = plan
        .endpoint
        .map(|endpoint| json!({ "controlPlaneEndpoint": endpoint }));
    step.patcher
        .annotations_and_spec(annotate, endpoint)
        .await?;
    match plan.condition {
        Some(why) => {
            step.report.set(&why);
            Ok(Action::requeue(ctx.settings.resync))
        }
        None => {
            step.report.set(&Desired::true_(PRIMARY, reasons::READY));
            if plan.provisioned {
                step.report.initialization = Some(Initialization {
                    provisioned: Some(true),
                });
                step.report.ready = Some(true);
            }
            Ok(Action::requeue(ctx.settings.resync))
        }
    }
}

/// The server of the `<cluster>-kubeconfig` Secret set to `server`, as upstream does when the
/// manager's address moves. CAPI copies the endpoint to the Cluster once and writes the
/// kubeconfig once, so neither follows the move by itself. The write is guarded by the Secret's
/// resourceVersion. A cluster with no kubeconfig yet has nothing to rewrite. Upstream retries
/// until the Secret exists, but a Cluster without a control-plane provider never gets one.
async fn move_kubeconfig(
    step: &Step<'_, InMemoryClusters>,
    cluster: &str,
    server: &str,
) -> Result<()> {
    let ns = step.obj.namespace().unwrap_or_default();
    let name = format!("{cluster}-kubeconfig");
    let api = Api::<Secret>::namespaced(step.ctx.client.clone(), &ns);
    let Some(secret) = api.get_opt(&name).await? else {
        info!(secret = %name, "no kubeconfig Secret to move to the new address");
        return Ok(());
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map(|v| v.0.as_slice());
    match kubeconfig::with_server(value, cluster, server) {
        Ok(None) => Ok(()),
        Ok(Some(moved)) => {
            let patch = json!({
                "metadata": { "resourceVersion": secret.resource_version() },
                "data": { "value": ByteString(moved) },
            });
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            info!(secret = %name, %server, "kubeconfig server moved to this manager's address");
            Ok(())
        }
        Err(refused) => Err(Error::blocked(
            PRIMARY,
            reasons::WORKLOAD_KUBECONFIG_REFUSED,
            format!(
                "Secret {ns}/{name}: {refused}; its server cannot follow the manager's new address"
            ),
            IN_MEMORY_RETRY,
        )),
    }
}

/// The delete arm: the workload cluster goes, listener, port and objects.
fn delete(step: &Step<'_, InMemoryClusters>, cluster_name: &str) -> Result<()> {
    let (dc, ctx) = (step.obj, step.ctx);
    let ns = dc.namespace().unwrap_or_default();
    if let Some(cloud) = &ctx.in_memory {
        cloud.remove_cluster(&phases::listener_name(&ns, cluster_name));
    }
    ctx.workload.forget(&ns, cluster_name);
    Ok(())
}
