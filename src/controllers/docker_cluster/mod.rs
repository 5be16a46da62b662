//! DockerCluster reconciler (DevCluster's too, as its view): an HAProxy load-balancer container
//! per cluster, through the [`lifecycle`].
//!
//! fetch (the owner Cluster, from the cache) -> the contract's gate -> normal (the load balancer
//! and the control-plane endpoint) or delete (the load balancer) -> status. A DevCluster of the
//! in-memory backend has its own reconciler ([`InMemoryClusters`]) behind the same lifecycle: a
//! port and the endpoint, no container.
mod in_memory;

pub use in_memory::InMemoryClusters;

use std::sync::Arc;

use kube::{ResourceExt, runtime::controller::Action};
use serde_json::json;

use super::{
    kit::{
        caches,
        context::Context,
        error::Result,
        lifecycle::{Decide, Deleted, Facts, Reconciler, Step, Subject},
    },
    load_balancer,
};
use crate::{
    api::{
        ApiEndpoint, DockerCluster, DockerClusterStatus, Initialization,
        conditions::{Desired, reasons, types},
    },
    capi::{self, Cluster},
    controllers::kit::kinds::Kinds,
    docker::labels,
};

/// Upstream's; a DevCluster carries the same one.
pub const FINALIZER: &str = "dockercluster.infrastructure.cluster.x-k8s.io";

/// The DockerCluster (DevCluster) controller's part of the lifecycle.
pub struct Clusters;

/// What deleting a DockerCluster removes.
#[derive(Clone, Debug, PartialEq)]
pub struct Delete {
    pub cluster_name: String,
    /// The owner Cluster if it still exists: its `spec.infrastructureRef` decides whether a
    /// previous infrastructure object's LB is this one's to remove.
    pub cluster: Option<Arc<Cluster>>,
}

/// What a DockerCluster (DevCluster) is to the contract, whichever backend serves it.
impl Subject for DockerCluster {
    /// The owner Cluster.
    type Fetched = Option<Arc<Cluster>>;
    type Bound = Arc<Cluster>;
    type Status = DockerClusterStatus;

    const FINALIZER: &'static str = FINALIZER;
    const OWNER_KIND: &'static str = "Cluster";

    fn kind(kinds: Kinds) -> &'static str {
        kinds.cluster
    }

    fn status(dc: &DockerCluster) -> Option<&DockerClusterStatus> {
        dc.status.as_ref()
    }

    async fn fetch(dc: &DockerCluster, ctx: &Context) -> Result<Option<Arc<Cluster>>> {
        let ns = dc.namespace().unwrap_or_default();
        match capi::capi_owner(&dc.metadata, "Cluster") {
            Some(owner) => caches::get(&ctx.caches.clusters, &ctx.client, &ns, &owner.name).await,
            None => Ok(None),
        }
    }

    fn facts(_: &str, dc: &DockerCluster, cluster: &Option<Arc<Cluster>>) -> Facts<Arc<Cluster>> {
        Facts {
            bound: cluster.clone().ok_or_else(|| {
                let ns = dc.namespace().unwrap_or_default();
                format!("owner Cluster {ns}/{} not found", owner_name(dc))
            }),
            named_elsewhere: None,
            cluster: cluster.clone(),
        }
    }
}

impl Decide for Clusters {
    type Object = DockerCluster;
    /// The load balancer and the endpoint, for this Cluster.
    type Normal = Arc<Cluster>;
    type Delete = Delete;

    fn decide_normal(_: &DockerCluster, _: &Option<Arc<Cluster>>, c: Arc<Cluster>) -> Arc<Cluster> {
        c
    }

    fn decide_delete(dc: &DockerCluster, cluster: &Option<Arc<Cluster>>) -> Delete {
        Delete {
            cluster_name: cluster
                .as_ref()
                .map_or_else(|| owner_name(dc), |c| c.name_any()),
            cluster: cluster.clone(),
        }
    }
}

impl Reconciler for Clusters {
    const PRIMARY: &'static str = types::LOAD_BALANCER_AVAILABLE;
    const DELETING: &'static str = "Deleting the load balancer";
    const READY_FROM: &'static [&'static str] = &[types::LOAD_BALANCER_AVAILABLE];

    async fn normal(step: &mut Step<'_, Self>, cluster: Arc<Cluster>) -> Result<Action> {
        let (dc, ctx) = (step.obj, step.ctx);
        let ns = dc.namespace().unwrap_or_default();
        let cluster_name = cluster.name_any();
        step.report.failure_domains = dc.spec.failure_domains.clone();

        let uid = dc.uid().unwrap_or_default();
        let key = step.key();
        let owner = owner(ctx, dc, &cluster_name, &ns, &uid);
        let lb = types::LOAD_BALANCER_AVAILABLE;
        match load_balancer::ensure(ctx, dc, &owner, &cluster, &mut step.patcher).await {
            Ok(load_balancer::Ensured::Ready { ip, frontend_port }) => {
                ctx.waits.reset(&key);
                // The endpoint is set once; CAPI core copies it when provisioned turns true, so
                // it must be in spec before status says so.
                let endpoint = dc.spec.control_plane_endpoint.clone().unwrap_or_default();
                if !endpoint.is_valid() {
                    let desired = ApiEndpoint {
                        host: endpoint.host.filter(|h| !h.is_empty()).or(Some(ip)),
                        port: endpoint.port.or(Some(i32::from(frontend_port))),
                    };
                    step.patcher
                        .spec(json!({ "controlPlaneEndpoint": desired }))
                        .await?;
                }
                step.report.set(&Desired::true_(lb, reasons::AVAILABLE));
                step.report.initialization = Some(Initialization {
                    provisioned: Some(true),
                });
                step.report.ready = Some(true);
                Ok(Action::requeue(ctx.settings.resync))
            }
            Ok(load_balancer::Ensured::Waiting {
                reason,
                message,
                retry,
            }) => {
                step.report.set(&Desired::false_(lb, reason, message));
                // A wait that lasts backs off (2 s, doubling, at most 5 min): the pass succeeds,
                // so the failure backoff would start over every time.
                Ok(Action::requeue(
                    retry.unwrap_or_else(|| ctx.waits.next_delay(&key)),
                ))
            }
            Err(e) => {
                // Any load-balancer failure is the condition's, classified or not.
                if e.reason().is_none() {
                    let why = Desired::false_(lb, reasons::NOT_AVAILABLE, e.to_string());
                    step.report.set(&why);
                }
                Err(e)
            }
        }
    }

    async fn delete(step: &mut Step<'_, Self>, plan: Delete) -> Result<Deleted> {
        let (dc, ctx) = (step.obj, step.ctx);
        let ns = dc.namespace().unwrap_or_default();
        let uid = dc.uid().unwrap_or_default();
        let lb_owner = owner(ctx, dc, &plan.cluster_name, &ns, &uid);
        load_balancer::delete(ctx, dc, &lb_owner, plan.cluster.as_deref()).await?;
        ctx.workload.forget(&ns, &plan.cluster_name);
        Ok(Deleted::Released)
    }
}

/// The owner Cluster's name, from the owner reference.
fn owner_name(dc: &DockerCluster) -> String {
    capi::capi_owner(&dc.metadata, "Cluster")
        .map(|o| o.name.clone())
        .unwrap_or_default()
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
    use crate::{
        api::dev,
        capi::ClusterSpec,
        controllers::kit::lifecycle::{Gate, Plan, PlanOf},
    };

    fn decide(kind: &str, dc: &DockerCluster, cluster: Option<Arc<Cluster>>) -> PlanOf<Clusters> {
        crate::controllers::kit::lifecycle::decide::<Clusters>(kind, dc, &cluster)
    }

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
            Plan::Gate(Gate::AwaitOwner)
        );
        assert_eq!(
            decide("DockerCluster", &dc(false, true), None),
            Plan::Gate(Gate::Release)
        );
        assert!(
            matches!(decide("DockerCluster", &dc(true, false), None), Plan::Gate(Gate::Missing(m)) if m.contains("ns/c"))
        );
        assert!(matches!(
            decide("DockerCluster", &dc(true, false), cluster(true)),
            Plan::Gate(Gate::Paused(_))
        ));
        assert!(matches!(
            decide("DockerCluster", &dc(true, true), cluster(true)),
            Plan::Gate(Gate::Paused(_))
        ));
        assert_eq!(
            decide("DockerCluster", &dc(true, true), None),
            Plan::Delete(Delete {
                cluster_name: "c".into(),
                cluster: None,
            }),
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
            Plan::Gate(Gate::LeaveAlone)
        );
    }

    #[test]
    fn an_unserved_backend_is_reported_whatever_the_owner_says() {
        let mut view = dc(true, false);
        view.metadata.annotations =
            Some([(dev::UNSERVED_BACKEND.to_string(), "inMemory".to_string())].into());
        let unserved = Plan::Gate(Gate::Unserved("inMemory".into()));
        assert_eq!(
            decide("DevCluster", &view, cluster(true)),
            unserved,
            "paused or not"
        );
        assert_eq!(decide("DevCluster", &view, None), unserved, "owner or not");
        view.metadata.deletion_timestamp = dc(true, true).metadata.deletion_timestamp;
        assert_eq!(decide("DevCluster", &view, None), Plan::Gate(Gate::Release));
    }
}
