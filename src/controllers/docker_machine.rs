//! DockerMachine reconciler: one node container per machine, bootstrapped from CAPI's data.
//!
//! fetch (object, Machine, Cluster, DockerCluster) -> decide (paused, waiting, deleting) ->
//! act (container, load balancer, bootstrap task) -> status (one merge patch when changed).
use std::{collections::BTreeMap, sync::Arc, time::Duration};

use chrono::Utc;
use kube::{Api, ResourceExt, runtime::controller::Action};
use serde_json::json;
use tracing::{debug, info};

use super::{
    bootstrap_tasks::TaskState,
    context::Context,
    docker_cluster,
    error::{Error, Result},
    load_balancer::{self, DEFAULT_FRONTEND_PORT, LbTarget, SyncOutcome, argv},
    machine_bootstrap, patch, workload,
};
use crate::{
    api::{
        DockerCluster, DockerMachine, DockerMachineStatus, Initialization, MachineAddress,
        MachineAddressType,
        conditions::{self, Desired, reasons, types},
    },
    capi::{self, Cluster, IpFamily, Machine},
    docker::{ContainerInfo, NetworkSpec, RuntimeError, labels, naming, specs},
};

pub const FINALIZER: &str = "dockermachine.infrastructure.cluster.x-k8s.io";
const KIND: &str = "DockerMachine";

pub async fn reconcile(dm: Arc<DockerMachine>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dm.namespace().unwrap_or_default();
    let api: Api<DockerMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let deleting = dm.metadata.deletion_timestamp.is_some();
    // Externally managed objects are left alone, except that a finalizer we added before the
    // annotation appeared is still honoured (or deletion would hang and containers leak).
    let ours_to_delete = deleting && dm.finalizers().iter().any(|f| f == FINALIZER);
    if capi::is_externally_managed(&dm.metadata) && !ours_to_delete {
        return Ok(Action::await_change());
    }

    let Some(owner) = capi::capi_owner(&dm.metadata, "Machine").cloned() else {
        if deleting {
            ctx.bootstraps.cancel(&dm.uid().unwrap_or_default());
            remove_owned_containers(&ctx, &dm).await?;
            patch::remove_finalizer(&api, &dm, FINALIZER).await?;
        } else {
            info!(dockermachine = %dm.name_any(), "waiting for the Machine controller to set the owner reference");
        }
        return Ok(Action::requeue(ctx.settings.resync));
    };
    let machine = Api::<Machine>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&owner.name)
        .await?;
    let cluster_name = machine
        .as_ref()
        .and_then(|m| m.cluster_name().map(str::to_string))
        .or_else(|| dm.labels().get(capi::CLUSTER_NAME_LABEL).cloned());
    let cluster = match &cluster_name {
        Some(name) => {
            Api::<Cluster>::namespaced(ctx.client.clone(), &ns)
                .get_opt(name)
                .await?
        }
        None => None,
    };
    if !deleting {
        if machine.is_none() {
            return Err(Error::Missing(format!(
                "owner Machine {ns}/{} not found",
                owner.name
            )));
        }
        if cluster.is_none() {
            return Err(Error::Missing(format!(
                "Cluster {ns}/{} of Machine {} not found",
                cluster_name
                    .as_deref()
                    .unwrap_or("<no cluster.x-k8s.io/cluster-name label>"),
                owner.name
            )));
        }
    }

    let mut status = dm.status.clone().unwrap_or_default();
    let generation = dm.metadata.generation;
    let now = Utc::now();
    let paused = capi::paused_reasons(cluster.as_ref(), &dm.metadata, KIND);
    conditions::set(
        status.conditions.get_or_insert_with(Vec::new),
        &conditions::paused(&paused),
        generation,
        now,
    );
    if !paused.is_empty() {
        patch::patch_status_if_changed(&api, &dm.name_any(), dm.status.as_ref(), &status).await?;
        return Ok(Action::await_change());
    }

    let docker_cluster = match cluster
        .as_ref()
        .and_then(|c| c.spec.infrastructure_ref.as_ref())
    {
        Some(r) => match r.name_if(crate::api::GROUP, "DockerCluster") {
            Some(name) => {
                Api::<DockerCluster>::namespaced(ctx.client.clone(), &ns)
                    .get_opt(name)
                    .await?
            }
            None => None,
        },
        None => None,
    };
    let lb = lb_settings(&ctx, docker_cluster.as_ref(), cluster.as_ref()).await?;

    if deleting {
        return reconcile_delete(
            &api,
            &dm,
            &ctx,
            cluster_name.as_deref(),
            &owner.name,
            &lb,
            status,
        )
        .await;
    }
    patch::add_finalizer(&api, &dm, FINALIZER).await?;
    let (Some(machine), Some(cluster), Some(cluster_name)) = (machine, cluster, cluster_name)
    else {
        return Err(Error::Missing("Machine or Cluster vanished".into()));
    };

    let inputs = Inputs {
        dm: &dm,
        machine: &machine,
        cluster: &cluster,
        cluster_name: &cluster_name,
        ns: &ns,
        lb: &lb,
    };
    let outcome = provision(&inputs, &ctx, &api, &mut status).await;
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if let Err(e) = &outcome {
        let reason = match e {
            Error::Runtime(RuntimeError::Unavailable(_)) => Some(reasons::DOCKER_UNAVAILABLE),
            Error::Runtime(RuntimeError::Image { .. }) => Some(reasons::IMAGE_UNAVAILABLE),
            _ => None,
        };
        if let Some(reason) = reason {
            conditions::set(
                conds,
                &Desired::false_(types::CONTAINER_PROVISIONED, reason, e.to_string()),
                generation,
                now,
            );
        }
    }
    let ready = conditions::summarize_ready(
        conds,
        &[
            types::CONTAINER_PROVISIONED,
            types::BOOTSTRAP_EXEC_SUCCEEDED,
        ],
    );
    conditions::set(conds, &ready, generation, now);
    patch::patch_status_if_changed(&api, &dm.name_any(), dm.status.as_ref(), &status).await?;
    outcome
}

/// Everything `provision` reads.
struct Inputs<'a> {
    dm: &'a DockerMachine,
    machine: &'a Machine,
    cluster: &'a Cluster,
    cluster_name: &'a str,
    ns: &'a str,
    lb: &'a LbSettings,
}

/// The parts of the cluster's LB a machine needs to update its backends.
struct LbSettings {
    frontend_port: u16,
    ipv6: bool,
    custom_config: Option<String>,
    /// False while the DockerCluster's custom haproxy config is unusable (its condition says
    /// why): machines must not overwrite it with a generated one meanwhile.
    usable: bool,
}

async fn lb_settings(
    ctx: &Context,
    dc: Option<&DockerCluster>,
    cluster: Option<&Cluster>,
) -> Result<LbSettings> {
    let frontend_port = dc
        .and_then(|d| d.spec.control_plane_endpoint.as_ref())
        .and_then(|e| e.port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DEFAULT_FRONTEND_PORT);
    let ipv6 = cluster.and_then(|c| c.ip_family().ok()) == Some(IpFamily::V6);
    let (custom_config, usable) = match dc {
        Some(dc) => match docker_cluster::custom_config(dc, ctx).await? {
            Ok(config) => (config, true),
            Err(_) => (None, false),
        },
        None => (None, true),
    };
    Ok(LbSettings {
        frontend_port,
        ipv6,
        custom_config,
        usable,
    })
}

impl LbSettings {
    /// Re-sync the cluster's LB backends (see [`load_balancer::sync_backends`]).
    async fn sync(
        &self,
        ctx: &Context,
        cluster: &str,
        namespace: &str,
        exclude: Option<&str>,
    ) -> Result<SyncOutcome> {
        if !self.usable {
            return Ok(SyncOutcome::NoLoadBalancer);
        }
        let target = LbTarget {
            cluster,
            namespace,
            frontend_port: self.frontend_port,
            ipv6: self.ipv6,
            custom_config: self.custom_config.as_deref(),
        };
        load_balancer::sync_backends(ctx, &target, exclude).await
    }
}

async fn provision(
    i: &Inputs<'_>,
    ctx: &Context,
    api: &Api<DockerMachine>,
    status: &mut DockerMachineStatus,
) -> Result<Action> {
    let generation = i.dm.metadata.generation;
    let now = Utc::now();
    let set = |status: &mut DockerMachineStatus, d: Desired| {
        conditions::set(
            status.conditions.get_or_insert_with(Vec::new),
            &d,
            generation,
            now,
        );
    };
    let container_name = naming::machine_container_name(i.cluster_name, &i.machine.name_any());
    let control_plane = i.machine.is_control_plane();

    // A control-plane Machine that is being deleted leaves the LB first (while others remain).
    if control_plane && i.machine.metadata.deletion_timestamp.is_some() {
        i.lb.sync(ctx, i.cluster_name, i.ns, None).await?;
    }

    if !i.cluster.infrastructure_provisioned() {
        set(
            status,
            Desired::false_(
                types::CONTAINER_PROVISIONED,
                reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                "Waiting for the Cluster's infrastructure to be provisioned",
            ),
        );
        return Ok(Action::requeue(ctx.settings.resync));
    }

    // Already provisioned: never recreate or re-bootstrap; only report and refresh.
    if i.dm
        .spec
        .provider_id
        .as_deref()
        .is_some_and(|p| !p.is_empty())
    {
        status.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        status.ready = Some(true);
        status.failure_domain = i.machine.failure_domain().map(str::to_string);
        match ctx.runtime.inspect(&container_name).await? {
            Some(c) if c.is_running() => {
                set(
                    status,
                    Desired::true_(types::CONTAINER_PROVISIONED, reasons::PROVISIONED),
                );
                status.addresses = Some(machine_addresses(&c));
            }
            Some(c) => set(
                status,
                Desired::false_(
                    types::CONTAINER_PROVISIONED,
                    reasons::NOT_PROVISIONED,
                    format!(
                        "Container {container_name} is not running (state {:?})",
                        c.state.unwrap_or(crate::docker::ContainerState::Unknown)
                    ),
                ),
            ),
            None => set(
                status,
                Desired::false_(
                    types::CONTAINER_PROVISIONED,
                    reasons::NOT_PROVISIONED,
                    format!("Container {container_name} does not exist anymore"),
                ),
            ),
        }
        if !conditions::is_true(
            status.conditions.as_deref().unwrap_or_default(),
            types::BOOTSTRAP_EXEC_SUCCEEDED,
        ) {
            set(
                status,
                Desired::true_(types::BOOTSTRAP_EXEC_SUCCEEDED, reasons::SUCCEEDED),
            );
        }
        return Ok(Action::requeue(ctx.settings.resync));
    }

    let Some(secret_name) = i.machine.data_secret_name() else {
        let waiting = if !control_plane && !i.cluster.control_plane_initialized() {
            Desired::false_(
                types::CONTAINER_PROVISIONED,
                reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZED,
                "Waiting for the control plane to be initialized",
            )
        } else {
            Desired::false_(
                types::CONTAINER_PROVISIONED,
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                "Waiting for Machine.spec.bootstrap.dataSecretName",
            )
        };
        set(status, waiting);
        return Ok(Action::requeue(ctx.settings.resync));
    };

    // The node container: adopt ours, recreate a dead one that never finished bootstrap,
    // refuse a foreign one.
    let uid = i.dm.uid().unwrap_or_default();
    let dm_name = i.dm.name_any();
    let owner = labels::Owner {
        cluster_name: i.cluster_name,
        cluster_namespace: i.ns,
        kind: KIND,
        name: &dm_name,
        uid: &uid,
    };
    let mut container = ctx.runtime.inspect(&container_name).await?;
    if let Some(existing) = &container {
        if let labels::Ownership::Foreign(why) = labels::ownership(&existing.labels, &owner) {
            set(
                status,
                Desired::false_(
                    types::CONTAINER_PROVISIONED,
                    reasons::NAME_CONFLICT,
                    format!(
                        "Container {container_name} already exists and is not this DockerMachine's: {why}"
                    ),
                ),
            );
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
        if !existing.is_running() && !matches!(ctx.bootstraps.poll(&uid), TaskState::Running { .. })
        {
            info!(container = %container_name, state = ?existing.state, "node container is not running; recreating it");
            ctx.runtime.remove(&container_name).await?;
            let target = machine_bootstrap::Target {
                dm: i.dm,
                api,
                container: &container_name,
                secret_name,
            };
            machine_bootstrap::reset(&target, ctx, status).await?;
            container = None;
        }
    }
    let container = match container {
        Some(c) => c,
        None => match create_node(i, ctx, &owner, &container_name, control_plane).await? {
            Ok(c) => c,
            Err(blocked) => {
                set(status, blocked);
                return Ok(Action::requeue(ctx.settings.resync));
            }
        },
    };
    set(
        status,
        Desired::true_(types::CONTAINER_PROVISIONED, reasons::PROVISIONED),
    );

    if control_plane && !status.load_balancer_configured {
        let outcome = i.lb.sync(ctx, i.cluster_name, i.ns, None).await?;
        status.load_balancer_configured = matches!(
            outcome,
            SyncOutcome::Reloaded { .. } | SyncOutcome::Unchanged
        );
    }

    // Bootstrap, in a background task; reconciles poll it.
    let target = machine_bootstrap::Target {
        dm: i.dm,
        api,
        container: &container_name,
        secret_name,
    };
    match machine_bootstrap::reconcile(&target, ctx, status).await? {
        machine_bootstrap::Outcome::Done => {}
        machine_bootstrap::Outcome::Wait(action) => return Ok(action),
    }

    status.addresses = Some(machine_addresses(
        &ctx.runtime
            .inspect(&container_name)
            .await?
            .unwrap_or(container),
    ));
    // A Kubernetes node (a kind-style image) gets its providerID on the Node object before ours
    // is set, so that CAPI core's nodeRef matching finds it as soon as it looks.
    let provider_id = naming::provider_id(&container_name);
    if let Some(wait) = set_node_provider_id(i, ctx, &container_name, &provider_id).await? {
        return Ok(wait);
    }
    // providerID in spec first: CAPI core needs it together with provisioned=true.
    patch::patch_spec(
        api,
        &i.dm.name_any(),
        json!({ "providerID": provider_id, "bootstrapped": true }),
    )
    .await?;
    status.initialization = Some(Initialization {
        provisioned: Some(true),
    });
    status.ready = Some(true);
    status.failure_domain = i.machine.failure_domain().map(str::to_string);
    info!(container = %container_name, "machine provisioned");
    Ok(Action::requeue(ctx.settings.resync))
}

/// How often a machine whose Node cannot be updated yet looks again (upstream's pace).
const NODE_RETRY: Duration = Duration::from_secs(5);

/// Set `providerID` on the workload cluster's Node for this container, when the container is a
/// Kubernetes node (kind's `/kind/version` marker; the light test image has none). `Some(action)`
/// means "not yet": the control plane is not initialised, or the Node or the workload API is
/// not there yet; the machine is looked at again shortly.
async fn set_node_provider_id(
    i: &Inputs<'_>,
    ctx: &Context,
    container: &str,
    provider_id: &str,
) -> Result<Option<Action>> {
    let marker = ctx
        .runtime
        .exec(container, &argv(&["test", "-f", "/kind/version"]), None)
        .await?;
    if !marker.success() {
        return Ok(None);
    }
    if i.cluster.spec.control_plane_ref.is_some() && !i.cluster.control_plane_initialized() {
        debug!(%container, "waiting for the control plane to be initialized before updating the Node");
        return Ok(Some(Action::requeue(NODE_RETRY)));
    }
    let outcome = match ctx.workload.client(&ctx.client, i.ns, i.cluster_name).await {
        Ok(client) => workload::set_provider_id(&client, container, provider_id).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(changed) => {
            if changed {
                info!(%container, %provider_id, "Node providerID set in the workload cluster");
            }
            Ok(None)
        }
        Err(e) => {
            info!(%container, error = %e, "cannot set the Node's providerID yet");
            Ok(Some(Action::requeue(NODE_RETRY)))
        }
    }
}

/// Create the node container. The inner `Err` is a condition for a spec problem (no image).
async fn create_node(
    i: &Inputs<'_>,
    ctx: &Context,
    owner: &labels::Owner<'_>,
    name: &str,
    control_plane: bool,
) -> Result<std::result::Result<ContainerInfo, Desired>> {
    let version = i.machine.spec.version.as_deref().unwrap_or_default();
    let image = match specs::node_image(version, i.dm.spec.custom_image.as_deref(), "kindest") {
        Ok(image) => image,
        Err(message) => {
            return Ok(Err(Desired::false_(
                types::CONTAINER_PROVISIONED,
                reasons::INVALID_SPEC,
                message,
            )));
        }
    };
    ctx.runtime.ensure_image(&image).await?;
    ctx.runtime
        .ensure_network(&NetworkSpec {
            name: ctx.settings.network.clone(),
            labels: ctx.settings.extra_labels.clone(),
        })
        .await?;
    let role = if control_plane {
        labels::ROLE_CONTROL_PLANE
    } else {
        labels::ROLE_WORKER
    };
    let mut container_labels = labels::container_labels(owner, role, &ctx.settings.extra_labels);
    if let Some(fd) = i.machine.failure_domain() {
        container_labels.insert(labels::FAILURE_DOMAIN.to_string(), fd.to_string());
    }
    let mounts: Vec<(String, String, bool)> =
        i.dm.spec
            .extra_mounts
            .iter()
            .flatten()
            .filter_map(|m| {
                Some((
                    m.host_path.clone()?,
                    m.container_path.clone()?,
                    m.read_only.unwrap_or(false),
                ))
            })
            .collect();
    let ipv6 = i.cluster.ip_family().is_ok_and(|f| f != IpFamily::V4);
    let spec = specs::node_container_spec(&specs::NodeParams {
        name,
        image: &image,
        role,
        labels: container_labels,
        network: &ctx.settings.network,
        extra_mounts: &mounts,
        privilege: ctx.settings.node_privilege.clone(),
        ipv6,
        proxy_env: specs::proxy_env(|k| std::env::var(k).ok(), &[], name),
    });
    info!(container = %name, %image, role, "creating node container");
    match ctx.runtime.create_and_start(&spec).await {
        Ok(c) => Ok(Ok(c)),
        // Lost a race for the name: use the container only if it is ours.
        Err(RuntimeError::Conflict(_)) => match ctx.runtime.inspect(name).await? {
            Some(c) if labels::usable_by(&c.labels, owner) => Ok(Ok(c)),
            _ => Ok(Err(Desired::false_(
                types::CONTAINER_PROVISIONED,
                reasons::NAME_CONFLICT,
                format!("Container {name} was created by someone else at the same time"),
            ))),
        },
        Err(e) => Err(e.into()),
    }
}

/// `status.addresses`: the hostname, then InternalIP and ExternalIP per IP (IPv4 first).
pub fn machine_addresses(c: &ContainerInfo) -> Vec<MachineAddress> {
    let mut out = vec![MachineAddress {
        type_: MachineAddressType::Hostname,
        address: c.name.clone(),
    }];
    for ip in [&c.ipv4, &c.ipv6]
        .into_iter()
        .flatten()
        .filter(|ip| !ip.is_empty())
    {
        out.push(MachineAddress {
            type_: MachineAddressType::InternalIp,
            address: ip.clone(),
        });
        out.push(MachineAddress {
            type_: MachineAddressType::ExternalIp,
            address: ip.clone(),
        });
    }
    out
}

async fn reconcile_delete(
    api: &Api<DockerMachine>,
    dm: &DockerMachine,
    ctx: &Context,
    cluster_name: Option<&str>,
    machine_name: &str,
    lb: &LbSettings,
    mut status: DockerMachineStatus,
) -> Result<Action> {
    let uid = dm.uid().unwrap_or_default();
    ctx.bootstraps.cancel(&uid);
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let now = Utc::now();
    conditions::set(
        conds,
        &Desired::false_(
            types::CONTAINER_PROVISIONED,
            reasons::DELETING,
            "Deleting the node container",
        ),
        dm.metadata.generation,
        now,
    );
    conditions::set(
        conds,
        &Desired::false_(types::READY, reasons::DELETING, "Deleting"),
        dm.metadata.generation,
        now,
    );
    patch::patch_status_if_changed(api, &dm.name_any(), dm.status.as_ref(), &status).await?;

    let ns = dm.namespace().unwrap_or_default();
    match cluster_name {
        Some(cluster) => {
            let name = naming::machine_container_name(cluster, machine_name);
            let (dm_name, uid) = (dm.name_any(), dm.uid().unwrap_or_default());
            let owner = labels::Owner {
                cluster_name: cluster,
                cluster_namespace: &ns,
                kind: KIND,
                name: &dm_name,
                uid: &uid,
            };
            if let Some(existing) = ctx
                .runtime
                .inspect(&name)
                .await?
                .filter(|c| labels::usable_by(&c.labels, &owner))
            {
                let control_plane = existing.labels.get(labels::KIND_ROLE).map(String::as_str)
                    == Some(labels::ROLE_CONTROL_PLANE);
                if control_plane {
                    // Leave the LB before the container goes (a missing LB is fine).
                    lb.sync(ctx, cluster, &ns, Some(&name)).await?;
                }
                info!(container = %name, "removing node container");
                ctx.runtime.remove(&name).await?;
                if ctx.runtime.inspect(&name).await?.is_some() {
                    return Err(Error::ContainerStillExists(name));
                }
                if control_plane {
                    // Again once it is gone: a concurrent DockerCluster sync may have seen it
                    // running in between and put it back.
                    lb.sync(ctx, cluster, &ns, Some(&name)).await?;
                }
            }
        }
        None => remove_owned_containers(ctx, dm).await?,
    }
    patch::remove_finalizer(api, dm, FINALIZER).await?;
    Ok(Action::await_change())
}

/// Remove every container labelled with this object's UID (it never had a Machine/Cluster).
async fn remove_owned_containers(ctx: &Context, dm: &DockerMachine) -> Result<()> {
    let selector = BTreeMap::from([(labels::OWNER_UID.to_string(), dm.uid().unwrap_or_default())]);
    for c in ctx.runtime.list(&selector).await? {
        ctx.runtime.remove(&c.name).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_hostname_then_ipv4_then_ipv6() {
        let c = ContainerInfo {
            name: "c-md-0".into(),
            ipv4: Some("172.18.0.3".into()),
            ipv6: Some("fc00::3".into()),
            ..Default::default()
        };
        let types: Vec<_> = machine_addresses(&c)
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        assert_eq!(
            types,
            vec![
                (MachineAddressType::Hostname, "c-md-0".to_string()),
                (MachineAddressType::InternalIp, "172.18.0.3".to_string()),
                (MachineAddressType::ExternalIp, "172.18.0.3".to_string()),
                (MachineAddressType::InternalIp, "fc00::3".to_string()),
                (MachineAddressType::ExternalIp, "fc00::3".to_string()),
            ]
        );
    }
}
