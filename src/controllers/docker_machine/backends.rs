//! A control-plane machine's place behind its cluster's load balancer.
use super::decide::{Bound, Owners};
use crate::controllers::{
    kit::{
        context::Context,
        error::{Error, Result},
    },
    load_balancer::{self, LbTarget, SyncOutcome},
};

/// Re-sync the cluster's LB backends, for a control-plane machine only. An unusable custom
/// haproxy config (the DockerCluster's condition says why) means: leave the LB alone.
pub(super) async fn sync(
    b: &Bound,
    owners: &Owners,
    ctx: &Context,
    exclude: Option<&str>,
) -> Result<SyncOutcome> {
    let target = LbTarget::resolve(
        ctx,
        &b.namespace,
        &b.cluster_name,
        owners.docker_cluster.as_deref(),
        Some(&b.cluster),
    )
    .await;
    match target {
        Ok(target) => load_balancer::sync_backends(ctx, &target, exclude).await,
        Err(Error::Blocked(_)) => Ok(SyncOutcome::NoLoadBalancer),
        Err(e) => Err(e),
    }
}
