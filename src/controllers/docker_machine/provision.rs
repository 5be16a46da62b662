//! Acting on a DockerMachine that is not being deleted: create (or adopt) the node container,
//! put a control-plane node behind the load balancer, bootstrap it, set the Node's providerID;
//! once provisioned, only report, and bring a stopped container back.
use std::time::Duration;

use kube::{ResourceExt, runtime::controller::Action};
use serde_json::json;
use tracing::{debug, info};

use super::{
    backends, bootstrap as machine_bootstrap,
    decide::{Bound, Owners, Status},
    node::{self, Provisioned},
};
use crate::{
    api::{
        DockerMachine, Initialization, MachineAddress, MachineAddressType,
        conditions::{self, Desired, reasons, types},
    },
    capi::{self, IpFamily},
    controllers::{
        kit::{
            backoff::{RestartDecision, restart_delay, restarting_message},
            context::Context,
            error::{Error, Result},
            patch::Patcher,
            workload,
        },
        load_balancer::SyncOutcome,
    },
    docker::{
        BindMount, ContainerInfo, NetworkSpec, RuntimeError, adoption, host_paths::HostPathPolicy,
        labels, naming, specs,
    },
};

/// How long a machine whose container name is taken by someone else waits before looking again.
const CONFLICT_RETRY: Duration = Duration::from_secs(60);
/// How often a machine whose Node cannot be updated yet looks again (upstream's pace).
const NODE_RETRY: Duration = Duration::from_secs(5);
/// How often a machine whose workload kubeconfig Secret was refused reads it again.
const KUBECONFIG_RETRY: Duration = Duration::from_secs(60);

/// Where the workload client must connect: the infrastructure cluster's control-plane endpoint,
/// else the Cluster's (CAPI copies it there; a DevMachinePool's instances may belong to a
/// Cluster whose infrastructure is a DockerCluster, which this controller family does not read).
fn workload_endpoint(owners: &Owners, cluster: &capi::Cluster) -> Option<workload::Endpoint> {
    let infra = owners
        .docker_cluster
        .as_ref()
        .and_then(|dc| dc.spec.control_plane_endpoint.as_ref())
        .and_then(|e| endpoint(e.host.as_deref(), e.port));
    let cluster = cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| endpoint(e.host.as_deref(), e.port));
    infra.or(cluster)
}

fn endpoint(host: Option<&str>, port: Option<i32>) -> Option<workload::Endpoint> {
    let host = host.filter(|h| !h.is_empty())?;
    let port = u16::try_from(port?).ok().filter(|p| *p != 0)?;
    Some(workload::Endpoint {
        host: host.to_string(),
        port,
    })
}

fn owner<'a>(ctx: &Context, b: &'a Bound, dm_name: &'a str, uid: &'a str) -> labels::Owner<'a> {
    labels::Owner {
        cluster_name: &b.cluster_name,
        cluster_namespace: &b.namespace,
        kind: ctx.kinds.machine,
        name: dm_name,
        uid,
    }
}

fn conflict(name: &str, why: impl std::fmt::Display) -> Error {
    Error::blocked(
        types::CONTAINER_PROVISIONED,
        reasons::NAME_CONFLICT,
        format!("Container {name} already exists and is not this machine's: {why}"),
        CONFLICT_RETRY,
    )
}

/// A provisioned machine: report the container as it is, and start it again if it stopped
/// (an engine restart stops every container; the node's state is in it, so it is never
/// recreated).
pub(super) async fn refresh(
    b: &Bound,
    dm: &DockerMachine,
    owners: &Owners,
    ctx: &Context,
    patcher: &mut Patcher<'_>,
    status: &mut Status,
) -> Result<Action> {
    status.initialization = Some(Initialization {
        provisioned: Some(true),
    });
    status.ready = Some(true);
    status.failure_domain = b.machine.failure_domain().map(str::to_string);
    let control_plane = b.machine.is_control_plane();
    if control_plane && b.leaves_load_balancer() {
        backends::sync(b, owners, ctx, None).await?;
    }
    if !conditions::is_true(status.conditions(), types::BOOTSTRAP_COMPLETED) {
        for d in machine_bootstrap::completed() {
            status.set(&d);
        }
    }
    let name = naming::machine_container_name(&b.cluster_name, &b.machine.name_any());
    let (dm_name, uid) = (dm.name_any(), dm.uid().unwrap_or_default());
    let owner = owner(ctx, b, &dm_name, &uid);
    let role = if control_plane {
        labels::ROLE_CONTROL_PLANE
    } else {
        labels::ROLE_WORKER
    };
    let claim = node::adoption_claim(dm, &ctx.settings.network, &b.cluster_name, &name, role);
    let found = node::found_or_adopted(ctx.runtime.inspect(&name).await?, &owner, &claim);
    if let node::Found::Ours(c) = &found {
        record_adoption(dm, patcher, c, &owner).await?;
    }
    let container = match node::provisioned(found) {
        Provisioned::Alive(c) => c,
        Provisioned::Conflict(why) => return Err(conflict(&name, why)),
        Provisioned::Gone => {
            status.set(&Desired::false_(
                types::CONTAINER_PROVISIONED,
                reasons::NOT_PROVISIONED,
                format!(
                    "Container {name} does not exist anymore; delete the Machine to replace it"
                ),
            ));
            return Ok(Action::requeue(ctx.settings.resync));
        }
        Provisioned::Start(c) => {
            // Whatever woke this pass (a `die` event, a resync, a watch event), a container that
            // keeps stopping is started on the backoff's schedule, never at engine speed.
            let key = crate::controllers::key(ctx.kinds.machine, dm);
            match ctx.restarts.decide(&key, c.ran_for()) {
                RestartDecision::Wait { wait, starts } => {
                    status.set(&restarting(&name, &c, starts, Some(wait)));
                    return Ok(Action::requeue(wait));
                }
                RestartDecision::Start { starts } => {
                    info!(container = %name, state = ?c.state, exit_code = ?c.exit_code, starts,
                        "provisioned node container is not running; starting it");
                    ctx.runtime.start(&name).await?;
                    if control_plane {
                        // It may have a new address; it must be a backend again either way.
                        backends::sync(b, owners, ctx, None).await?;
                    }
                    let after = ctx.runtime.inspect(&name).await?.unwrap_or(c);
                    if !after.is_alive() {
                        let wait = restart_delay(starts + 1);
                        status.set(&restarting(&name, &after, starts, Some(wait)));
                        return Ok(Action::requeue(wait.max(NODE_RETRY)));
                    }
                    after
                }
            }
        }
    };
    // Seen running for long enough, a restarted container is out of its streak.
    let up = container
        .started_at
        .and_then(|t| (chrono::Utc::now() - t).to_std().ok());
    ctx.restarts
        .running_for(&crate::controllers::key(ctx.kinds.machine, dm), up);
    status.set(&Desired::true_(
        types::CONTAINER_PROVISIONED,
        reasons::PROVISIONED,
    ));
    status.addresses = Some(machine_addresses(&container, b.cluster.ip_family().ok()));
    Ok(Action::requeue(ctx.settings.resync))
}

/// The first time a machine uses an upstream CAPD container, its ID goes into the
/// DockerMachine's [`adoption::ADOPTED_CONTAINER`] annotation: Docker cannot relabel a
/// container, so the annotation is what says "ours" from then on (and after a restart).
async fn record_adoption(
    dm: &DockerMachine,
    patcher: &mut Patcher<'_>,
    c: &ContainerInfo,
    owner: &labels::Owner<'_>,
) -> Result<()> {
    let recorded = dm.annotations().get(adoption::ADOPTED_CONTAINER);
    if labels::usable_by(&c.labels, owner) || recorded == Some(&c.id) {
        return Ok(());
    }
    info!(container = %c.name, id = %c.id, "adopting the node container upstream CAPD created");
    patcher
        .annotations(json!({ adoption::ADOPTED_CONTAINER: c.id }))
        .await
}

/// `ContainerProvisioned` of a provisioned node whose container keeps stopping: how often it
/// was started in this streak, how its main process last ended, and when the next start is.
pub(crate) fn restarting(
    name: &str,
    c: &ContainerInfo,
    starts: u32,
    next: Option<Duration>,
) -> Desired {
    Desired::false_(
        types::CONTAINER_PROVISIONED,
        reasons::CONTAINER_RESTARTING,
        restarting_message(name, c.exit_code, starts, next),
    )
}

/// A machine that is not provisioned yet, with bootstrap data.
pub(super) struct Provisioning<'a, 'w> {
    pub bound: &'a Bound,
    pub dm: &'a DockerMachine,
    pub owners: &'a Owners,
    pub ctx: &'a Context,
    pub patcher: &'a mut Patcher<'w>,
    pub secret_name: &'a str,
}

impl Provisioning<'_, '_> {
    pub async fn run(&mut self, status: &mut Status) -> Result<Action> {
        let (b, dm, ctx) = (self.bound, self.dm, self.ctx);
        let name = naming::machine_container_name(&b.cluster_name, &b.machine.name_any());
        let control_plane = b.machine.is_control_plane();
        if control_plane && b.leaves_load_balancer() {
            backends::sync(b, self.owners, ctx, None).await?;
        }

        let (dm_name, uid) = (dm.name_any(), dm.uid().unwrap_or_default());
        let owner = owner(ctx, b, &dm_name, &uid);
        // While its bootstrap runs, the container is known to exist (the exec runs in it; one
        // lost meanwhile fails the exec, and the pass after that looks): no engine call per
        // pass while a hundred machines bootstrap.
        let (container, fresh) = if ctx.bootstraps.is_running(&uid) {
            (None, false)
        } else {
            let (c, fresh) = self.found_or_made(&owner, &name, status).await?;
            (Some(c), fresh)
        };
        status.set(&Desired::true_(
            types::CONTAINER_PROVISIONED,
            reasons::PROVISIONED,
        ));

        if control_plane && !status.load_balancer_configured {
            let outcome = backends::sync(b, self.owners, ctx, None).await?;
            status.load_balancer_configured = matches!(
                outcome,
                SyncOutcome::Reloaded { .. } | SyncOutcome::Unchanged
            );
        }

        // Bootstrap, in a background task; reconciles poll it.
        let target = machine_bootstrap::Target {
            dm,
            container: &name,
            secret_name: self.secret_name,
            fresh,
            created_for: container
                .as_ref()
                .and_then(|c| c.labels.get(labels::BOOTSTRAP_START))
                .map(String::as_str),
            kind_mode: specs::node_kind_mode(
                b.machine.spec.version.as_deref().unwrap_or_default(),
                dm.spec.custom_image.as_deref(),
            ),
        };
        match machine_bootstrap::reconcile(&target, self.patcher, ctx, status).await? {
            machine_bootstrap::Outcome::Done => {}
            machine_bootstrap::Outcome::Wait(action) => return Ok(action),
        }

        // Inspected (or created) by this reconcile, its addresses are current; a bootstrap that
        // finished since this pass began left it uninspected.
        let container = match container {
            Some(c) => c,
            None => ctx
                .runtime
                .inspect(&name)
                .await?
                .ok_or_else(|| Error::Missing(format!("node container {name} is gone")))?,
        };
        status.addresses = Some(machine_addresses(&container, b.cluster.ip_family().ok()));
        // A Kubernetes node (a kind-style image) gets its providerID on the Node object before
        // ours is set, so that CAPI core's nodeRef matching finds it as soon as it looks.
        let provider_id = naming::provider_id(&name);
        let addresses = status.addresses.clone().unwrap_or_default();
        if let Some(wait) = self
            .set_node_provider_id(&name, &provider_id, &addresses)
            .await?
        {
            return Ok(wait);
        }
        // providerID in spec first: CAPI core needs it together with provisioned=true. (Not the
        // deprecated `bootstrapped`: upstream v1.14 dropped it, nothing reads it, and a DevMachine
        // has no such field at the top of its spec.)
        if dm.spec.provider_id.as_deref() != Some(provider_id.as_str()) {
            self.patcher
                .spec(json!({ "providerID": provider_id }))
                .await?;
        }
        status.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        status.ready = Some(true);
        status.failure_domain = b.machine.failure_domain().map(str::to_string);
        info!(container = %name, "machine provisioned");
        Ok(Action::requeue(ctx.settings.resync))
    }

    /// The machine's container, found or made. A machine with nothing on record (no status, no
    /// annotation of ours, no bootstrap task of this process) most likely has none yet: it is
    /// created without a look first, since at a burst of new machines every engine request
    /// waits on a busy engine. A name already taken is then looked at as any machine's is.
    async fn found_or_made(
        &mut self,
        owner: &labels::Owner<'_>,
        name: &str,
        status: &mut Status,
    ) -> Result<(ContainerInfo, bool)> {
        if nothing_on_record(self.dm, self.ctx)
            && let Some(created) = self.create_node(owner, name).await?
        {
            return Ok((created, true));
        }
        let found = node::found(self.ctx.runtime.inspect(name).await?, owner);
        self.use_or_create(found, owner, name, status).await
    }

    /// The container found for a machine whose bootstrap is not running: use it, create it,
    /// start it, (stopped before its bootstrap began) recreate it, or (stopped while its
    /// bootstrap ran) report it and leave it until the inputs change. `true` with a container
    /// this pass created: no bootstrap on record concerns it but the one it was created for.
    async fn use_or_create(
        &mut self,
        found: node::Found,
        owner: &labels::Owner<'_>,
        name: &str,
        status: &mut Status,
    ) -> Result<(ContainerInfo, bool)> {
        let (dm, ctx) = (self.dm, self.ctx);
        let uid = dm.uid().unwrap_or_default();
        let began = machine_bootstrap::began(dm, ctx, node::created_for(&found));
        let inputs = node::bootstrap_inputs(dm.metadata.generation, self.secret_name);
        let reported = dm
            .annotations()
            .get(crate::api::STOPPED_DURING_BOOTSTRAP)
            .map(String::as_str);
        Ok(match node::provisioning(found, began) {
            node::Provisioning::Use(c) => (c, false),
            node::Provisioning::Conflict(why) => return Err(conflict(name, why)),
            node::Provisioning::Create => self.create_or_join(owner, name).await?,
            node::Provisioning::Start(c) => {
                info!(container = %name, "starting a node container that was created but never started");
                ctx.runtime.start(name).await?;
                (ctx.runtime.inspect(name).await?.unwrap_or(c), false)
            }
            // The first stop with these inputs gets one new container: an engine restart stops
            // a node mid-bootstrap too, and the container cannot tell the two apart. A second
            // stop with the same inputs is the commands' own doing.
            node::Provisioning::StoppedDuringBootstrap(c) if reported.is_none() => {
                info!(container = %name, exit_code = ?c.exit_code, "node container stopped while its bootstrap ran; recreating it once");
                let created = self.recreate(owner, name, status).await?;
                machine_bootstrap::record_stop(self.patcher, &inputs).await?;
                created
            }
            node::Provisioning::StoppedDuringBootstrap(_)
                if node::retry_after_stop(reported, &inputs) =>
            {
                info!(container = %name, "the machine's bootstrap inputs changed since its node stopped during bootstrap; recreating it");
                self.recreate(owner, name, status).await?
            }
            node::Provisioning::StoppedDuringBootstrap(c) => {
                info!(container = %name, exit_code = ?c.exit_code, "node container stopped again while its bootstrap ran; not recreating it");
                ctx.bootstraps.cancel(&uid);
                let message = node::stopped_during_bootstrap_message(name, &c);
                for d in machine_bootstrap::at_phase(
                    machine_bootstrap::Phase::Commands,
                    reasons::NODE_STOPPED_DURING_BOOTSTRAP,
                    message.clone(),
                ) {
                    status.set(&d);
                }
                status.set(&Desired::false_(
                    types::CONTAINER_PROVISIONED,
                    reasons::NOT_PROVISIONED,
                    format!("Container {name} is stopped (see BootstrapCompleted)"),
                ));
                // A change of the DockerMachine or the Machine triggers a pass at once; the
                // resync only re-reads the same inputs.
                return Err(Error::blocked(
                    types::BOOTSTRAP_COMPLETED,
                    reasons::NODE_STOPPED_DURING_BOOTSTRAP,
                    message,
                    ctx.settings.resync,
                ));
            }
            node::Provisioning::Recreate => {
                info!(container = %name, "node container stopped before its bootstrap began; recreating it");
                self.recreate(owner, name, status).await?
            }
        })
    }

    async fn recreate(
        &mut self,
        owner: &labels::Owner<'_>,
        name: &str,
        status: &mut Status,
    ) -> Result<(ContainerInfo, bool)> {
        self.ctx.runtime.remove(name).await?;
        machine_bootstrap::reset(self.dm, self.patcher, self.ctx, status).await?;
        self.create_or_join(owner, name).await
    }

    /// Set `providerID` on the workload cluster's Node for this container, when the container is
    /// a Kubernetes node (kind's `/kind/version` marker; the light test image has none).
    /// `Some(action)` means "not yet": the control plane is not initialised, or the Node or the
    /// workload API is not there yet; the machine is looked at again shortly.
    async fn set_node_provider_id(
        &self,
        container: &str,
        provider_id: &str,
        addresses: &[MachineAddress],
    ) -> Result<Option<Action>> {
        let (b, ctx) = (self.bound, self.ctx);
        // In the image, so the engine can tell without an exec.
        if !ctx.runtime.file_exists(container, "/kind/version").await? {
            return Ok(None);
        }
        if b.cluster.spec.control_plane_ref.is_some() && !b.cluster.control_plane_initialized() {
            debug!(%container, "waiting for the control plane to be initialized before updating the Node");
            return Ok(Some(Action::requeue(self.node_wait())));
        }
        // The workload client talks to the cluster's own endpoint and nowhere else.
        let Some(endpoint) = workload_endpoint(self.owners, &b.cluster) else {
            debug!(%container, "waiting for the cluster's control-plane endpoint before updating the Node");
            return Ok(Some(Action::requeue(self.node_wait())));
        };
        let outcome = match ctx
            .workload
            .client(&ctx.client, &b.namespace, &b.cluster_name, &endpoint)
            .await
        {
            Ok(client) => {
                workload::set_provider_id(&client, container, provider_id, addresses).await
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(changed) => {
                if changed {
                    info!(%container, %provider_id, "Node providerID set in the workload cluster");
                }
                ctx.waits
                    .reset(&crate::controllers::key(ctx.kinds.machine, self.dm));
                Ok(None)
            }
            // Not a passing state: the Secret must change. Said in a condition, looked at slowly
            // (a Secret change wakes nothing here).
            Err(e @ workload::WorkloadError::KubeconfigRefused(..)) => Err(Error::blocked(
                types::CONTAINER_PROVISIONED,
                reasons::WORKLOAD_KUBECONFIG_REFUSED,
                format!("Cannot set the Node's providerID: {e}"),
                KUBECONFIG_RETRY,
            )),
            Err(e) => {
                let retry = self.node_wait();
                info!(%container, error = %e, retry_in = ?retry, "cannot set the Node's providerID yet");
                Ok(Some(Action::requeue(retry)))
            }
        }
    }

    /// How long a machine waiting for its Node (or the control plane) waits before looking
    /// again: upstream's pace at first, then backing off (a workload API that never answers
    /// must not be polled every 5 s forever; the Cluster's initialisation wakes it anyway).
    fn node_wait(&self) -> Duration {
        let key = crate::controllers::key(self.ctx.kinds.machine, self.dm);
        self.ctx.waits.next_delay(&key).max(NODE_RETRY)
    }

    /// [`Self::create_node`] where the name was free a moment ago: a lost name race yields the
    /// winner's container (`false`), if ours.
    async fn create_or_join(
        &self,
        owner: &labels::Owner<'_>,
        name: &str,
    ) -> Result<(ContainerInfo, bool)> {
        if let Some(created) = self.create_node(owner, name).await? {
            return Ok((created, true));
        }
        match self.ctx.runtime.inspect(name).await? {
            Some(c) if labels::usable_by(&c.labels, owner) && c.is_alive() => Ok((c, false)),
            // Ours but not running (its creator was killed between create and start): the
            // next pass starts it (or recreates it) like any container it finds.
            Some(c) if labels::usable_by(&c.labels, owner) => Err(Error::Missing(format!(
                "container {name} exists but is not running ({:?})",
                c.state
            ))),
            Some(_) => Err(conflict(
                name,
                "it was created by someone else at the same time",
            )),
            // The engine holds the name for a create still in flight (one a killed manager
            // sent, say) before the container can be inspected: look again shortly.
            None => Err(Error::Missing(format!(
                "container {name} is being created by another request"
            ))),
        }
    }

    /// Create the node container, labelled with the start of the bootstrap this pass is about to
    /// run ([`labels::BOOTSTRAP_START`]); `None` when the name is taken. A missing image
    /// reference is blocked.
    async fn create_node(
        &self,
        owner: &labels::Owner<'_>,
        name: &str,
    ) -> Result<Option<ContainerInfo>> {
        let (b, dm, ctx) = (self.bound, self.dm, self.ctx);
        let version = b.machine.spec.version.as_deref().unwrap_or_default();
        // A spec we cannot act on waits for the user to change it (a change triggers at once).
        let invalid_spec = |message| {
            Error::blocked(
                types::CONTAINER_PROVISIONED,
                reasons::INVALID_SPEC,
                message,
                ctx.settings.resync,
            )
        };
        let image = specs::node_image(version, dm.spec.custom_image.as_deref(), "kindest")
            .map_err(invalid_spec)?;
        ctx.runtime.ensure_image(&image).await?;
        ctx.runtime
            .ensure_network(&NetworkSpec {
                name: ctx.settings.network.clone(),
                labels: ctx.settings.extra_labels.clone(),
            })
            .await?;
        let role = if b.machine.is_control_plane() {
            labels::ROLE_CONTROL_PLANE
        } else {
            labels::ROLE_WORKER
        };
        let mut container_labels =
            labels::container_labels(owner, role, &ctx.settings.extra_labels);
        if let Some(fd) = b.machine.failure_domain() {
            container_labels.insert(labels::FAILURE_DOMAIN.to_string(), fd.to_string());
        }
        container_labels.insert(
            labels::BOOTSTRAP_START.to_string(),
            machine_bootstrap::start_token(chrono::Utc::now()),
        );
        let mounts = extra_mounts(dm, &ctx.settings.host_paths).map_err(invalid_spec)?;
        let ipv6 = b.cluster.ip_family().is_ok_and(|f| f != IpFamily::V4);
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
            kind_mode: specs::node_kind_mode(version, dm.spec.custom_image.as_deref()),
        });
        // A new node container gets a bootstrap of its own: what a task of this process ran or
        // reported concerned a container that is gone (removed behind our back, say, after its
        // bootstrap ended but before a pass wrote that end), and must not pass for this one's.
        ctx.bootstraps.cancel(&dm.uid().unwrap_or_default());
        info!(container = %name, %image, role, "creating node container");
        let started = std::time::Instant::now();
        match ctx.runtime.create_and_start(&spec).await {
            Ok(c) => {
                let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                info!(container = %name, took_ms, "node container created and started");
                Ok(Some(c))
            }
            Err(RuntimeError::Conflict(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// Nothing says this machine ever had a container: no status, no annotation of ours
/// (a recorded bootstrap start or stop, an adopted container), no bootstrap task of this process.
fn nothing_on_record(dm: &DockerMachine, ctx: &Context) -> bool {
    const OURS: [&str; 4] = [
        crate::api::STARTED_AT,
        crate::api::BOOTSTRAP_CLAIM,
        crate::api::STOPPED_DURING_BOOTSTRAP,
        adoption::ADOPTED_CONTAINER,
    ];
    dm.status.is_none()
        && !OURS.iter().any(|k| dm.annotations().contains_key(*k))
        && matches!(
            ctx.bootstraps.poll(&dm.uid().unwrap_or_default()),
            crate::controllers::kit::bootstrap_tasks::TaskState::NotStarted
        )
}

/// `spec.extraMounts` as bind mounts, each host path checked against the manager's policy.
fn extra_mounts(dm: &DockerMachine, policy: &HostPathPolicy) -> Result<Vec<BindMount>, String> {
    let mounts = dm.spec.extra_mounts.iter().flatten().enumerate();
    mounts
        .map(|(i, m)| {
            policy.check(&m.host_path).map_err(|why| {
                format!(
                    "spec.extraMounts[{i}].hostPath {:?} is not allowed: {why}",
                    m.host_path
                )
            })?;
            Ok(BindMount {
                host_path: m.host_path.clone(),
                container_path: m.container_path.clone(),
                read_only: m.read_only.unwrap_or(false),
                create_host_path: false,
            })
        })
        .collect()
}

/// `status.addresses`: the hostname, then InternalIP and ExternalIP for each address of the
/// cluster's IP family (both for dual-stack; IPv4 first). An unknown family shows both.
pub fn machine_addresses(c: &ContainerInfo, family: Option<IpFamily>) -> Vec<MachineAddress> {
    let (v4, v6) = match family {
        Some(IpFamily::V4) => (true, false),
        Some(IpFamily::V6) => (false, true),
        Some(IpFamily::Dual) | None => (true, true),
    };
    let mut out = vec![MachineAddress {
        type_: MachineAddressType::Hostname,
        address: c.name.clone(),
    }];
    let ips = [(v4, &c.ipv4), (v6, &c.ipv6)];
    for ip in ips
        .into_iter()
        .filter(|(wanted, _)| *wanted)
        .filter_map(|(_, ip)| ip.as_ref())
        .filter(|ip| !ip.is_empty())
    {
        for type_ in [
            MachineAddressType::InternalIp,
            MachineAddressType::ExternalIp,
        ] {
            out.push(MachineAddress {
                type_,
                address: ip.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(family: Option<IpFamily>) -> Vec<(MachineAddressType, String)> {
        let c = ContainerInfo {
            name: "c-md-0".into(),
            ipv4: Some("172.18.0.3".into()),
            ipv6: Some("fc00::3".into()),
            ..Default::default()
        };
        machine_addresses(&c, family)
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect()
    }

    #[test]
    fn addresses_follow_the_cluster_ip_family() {
        let host = (MachineAddressType::Hostname, "c-md-0".to_string());
        let v4 = [
            (MachineAddressType::InternalIp, "172.18.0.3".to_string()),
            (MachineAddressType::ExternalIp, "172.18.0.3".to_string()),
        ];
        let v6 = [
            (MachineAddressType::InternalIp, "fc00::3".to_string()),
            (MachineAddressType::ExternalIp, "fc00::3".to_string()),
        ];
        let with = |parts: &[&[(MachineAddressType, String)]]| {
            let mut all = vec![host.clone()];
            parts.iter().for_each(|p| all.extend_from_slice(p));
            all
        };
        assert_eq!(
            addresses(Some(IpFamily::V4)),
            with(&[&v4]),
            "no IPv6 for an IPv4 cluster"
        );
        assert_eq!(addresses(Some(IpFamily::V6)), with(&[&v6]));
        assert_eq!(addresses(Some(IpFamily::Dual)), with(&[&v4, &v6]));
    }
}
