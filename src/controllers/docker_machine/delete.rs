//! Deleting a DockerMachine: leave the load balancer (control plane) and remove the node
//! container; the lifecycle lets the object go once this succeeds.
use kube::ResourceExt;
use tracing::info;

use super::{
    backends,
    decide::{Bound, Owners},
    node::adoption_claim,
};
use crate::{
    api::DockerMachine,
    controllers::kit::{
        context::Context,
        error::{Error, Result},
    },
    docker::{adoption, labels, naming},
};

/// Remove the machine's node containers (after leaving the load balancer with each).
pub(super) async fn containers(
    dm: &DockerMachine,
    owners: &Owners,
    cluster_name: Option<&str>,
    ctx: &Context,
) -> Result<()> {
    let uid = dm.uid().unwrap_or_default();
    ctx.bootstraps.cancel(&uid);
    let ns = dm.namespace().unwrap_or_default();
    let dm_name = dm.name_any();
    // Which containers are this machine's: every one labelled with its UID (whatever its name:
    // the name is computed from the first Machine ownerRef and the cluster name, which a user
    // can change), and the one with the computed name only if its labels say it is this
    // object's (its UID, or the same kind, name and cluster: a predecessor it adopted), or it is
    // the upstream CAPD container this machine adopted (or would adopt: see adoption::decide).
    let mut doomed = crate::docker::owned_by(ctx.runtime.as_ref(), &uid).await?;
    if let Some(cluster) = cluster_name {
        let name = naming::machine_container_name(cluster, &capi_machine_name(dm));
        let owner = labels::Owner {
            cluster_name: cluster,
            cluster_namespace: &ns,
            kind: ctx.kinds.machine,
            name: &dm_name,
            uid: &uid,
        };
        let role = match &owners.machine {
            Some(m) if m.is_control_plane() => Some(labels::ROLE_CONTROL_PLANE),
            Some(_) => Some(labels::ROLE_WORKER),
            None => None,
        };
        let adoptable = |c: &crate::docker::ContainerInfo| {
            // The Machine may be gone already: then the container's own role, if a node's.
            let role = role.or_else(|| {
                c.labels
                    .get(labels::KIND_ROLE)
                    .map(String::as_str)
                    .filter(|r| [labels::ROLE_CONTROL_PLANE, labels::ROLE_WORKER].contains(r))
            });
            role.is_some_and(|role| {
                adoption::decide(
                    c,
                    &adoption_claim(dm, &ctx.settings.network, cluster, &name, role),
                )
                .is_usable()
            })
        };
        if !doomed.iter().any(|c| c.name == name)
            && let Some(existing) = ctx
                .runtime
                .inspect(&name)
                .await?
                .filter(|c| labels::usable_by(&c.labels, &owner) || adoptable(c))
        {
            doomed.push(existing);
        }
    }
    for existing in doomed {
        let name = existing.name;
        let control_plane = existing.labels.get(labels::KIND_ROLE).map(String::as_str)
            == Some(labels::ROLE_CONTROL_PLANE);
        // The cluster (and so the LB settings) may be gone already; then so is the LB.
        let bound = match (&owners.machine, &owners.cluster, cluster_name) {
            (Some(machine), Some(c), Some(cluster)) if control_plane => Some(Bound {
                machine: machine.clone(),
                cluster: c.clone(),
                cluster_name: cluster.to_string(),
                namespace: ns.clone(),
            }),
            _ => None,
        };
        if let Some(b) = &bound {
            // Leave the LB before the container goes (a missing LB is fine).
            backends::sync(b, owners, ctx, Some(&name)).await?;
        }
        info!(container = %name, "removing node container");
        ctx.runtime.remove(&name).await?;
        if ctx.runtime.inspect(&name).await?.is_some() {
            return Err(Error::ContainerStillExists(name));
        }
        if let Some(b) = &bound {
            // Again once it is gone: a concurrent DockerCluster sync may have seen it running
            // in between and put it back.
            backends::sync(b, owners, ctx, Some(&name)).await?;
        }
    }
    Ok(())
}

/// The owner Machine's name (the container is named after it).
fn capi_machine_name(dm: &DockerMachine) -> String {
    crate::capi::capi_owner(&dm.metadata, "Machine")
        .map(|o| o.name.clone())
        .unwrap_or_default()
}
