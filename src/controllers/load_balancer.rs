//! The cluster's HAProxy load balancer, shared by both controllers: its backends are always
//! recomputed from the running control-plane containers, and haproxy.cfg is rewritten and
//! reloaded only when the rendered text differs from what is in the container.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};

use tracing::{debug, info, warn};

use super::kit::{
    backoff::{RestartDecision, restart_delay, restarting_message},
    context::Context,
    error::{Error, Result},
    patch::Patcher,
};
use crate::{
    api::{
        DockerCluster,
        conditions::{reasons, types},
    },
    capi::{Cluster, IpFamily},
    docker::{
        AddressUse, ContainerInfo, ContainerState, NetworkSpec, RuntimeError, adoption,
        haproxy::{self, Backend, HaproxyConfig},
        haproxy_template::{self, TemplateError},
        labels, naming, specs,
    },
};

pub use crate::docker::haproxy::{BACKEND_PORT, DEFAULT_FRONTEND_PORT};

/// What a backend sync found and did.
#[derive(Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    /// No LB container (fine while deleting).
    NoLoadBalancer,
    /// The LB exists but is not running; nothing written.
    NotRunning,
    Unchanged,
    Reloaded {
        backends: usize,
    },
}

/// Which cluster's LB to sync, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbTarget {
    pub cluster: String,
    pub namespace: String,
    pub frontend_port: u16,
    pub ipv6: bool,
    /// The Go template from `customHAProxyConfigTemplateRef` (parsed once on resolve; a text
    /// without `{{` is a complete haproxy.cfg and renders to itself).
    pub custom_config: Option<String>,
    /// The ID of the upstream CAPD LB container the DockerCluster adopted (its
    /// [`adoption::ADOPTED_CONTAINER`] annotation): that container is the cluster's LB, and
    /// upstream's control-plane containers of the cluster are its backends too.
    pub adopted_lb: Option<String>,
    /// The Docker network of the cluster's containers.
    pub network: String,
}

impl LbTarget {
    /// The LB settings of `cluster` from its DockerCluster (absent while it is being deleted).
    /// An unusable custom haproxy config is a [`Error::Blocked`] on `LoadBalancerAvailable`.
    pub async fn resolve(
        ctx: &Context,
        namespace: &str,
        cluster: &str,
        dc: Option<&DockerCluster>,
        owner: Option<&Cluster>,
    ) -> Result<Self> {
        Ok(LbTarget {
            cluster: cluster.to_string(),
            namespace: namespace.to_string(),
            frontend_port: frontend_port(dc),
            ipv6: owner.and_then(|c| c.ip_family().ok()) == Some(IpFamily::V6),
            custom_config: match dc {
                Some(dc) => custom_config(ctx, dc).await?,
                None => None,
            },
            adopted_lb: dc
                .and_then(|dc| dc.annotations().get(adoption::ADOPTED_CONTAINER).cloned()),
            network: ctx.settings.network.clone(),
        })
    }
}

/// The endpoint port the DockerCluster asks for, else the default.
pub fn frontend_port(dc: Option<&DockerCluster>) -> u16 {
    dc.and_then(|d| d.spec.control_plane_endpoint.as_ref())
        .and_then(|e| e.port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DEFAULT_FRONTEND_PORT)
}

/// The template from `customHAProxyConfigTemplateRef`, if set. A missing ConfigMap or key
/// blocks the load balancer (`InvalidSpec`), and so does a template that does not parse
/// (`InvalidHAProxyConfigTemplate`), until the user fixes it.
pub async fn custom_config(ctx: &Context, dc: &DockerCluster) -> Result<Option<String>> {
    let Some(name) = dc
        .spec
        .load_balancer
        .as_ref()
        .and_then(|l| l.custom_haproxy_config_template_ref.as_ref())
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    let ns = dc.namespace().unwrap_or_default();
    let blocked = |message: String| {
        Err(Error::blocked(
            types::LOAD_BALANCER_AVAILABLE,
            reasons::INVALID_SPEC,
            format!("customHAProxyConfigTemplateRef: ConfigMap {ns}/{name} {message}"),
            std::time::Duration::from_secs(60),
        ))
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cm) = api.get_opt(&name).await? else {
        return blocked("not found".into());
    };
    let Some(value) = cm.data.and_then(|mut d| d.remove("value")) else {
        return blocked("has no key \"value\"".into());
    };
    if let Err(e) = haproxy_template::HaproxyTemplate::parse(&value) {
        return Err(template_refused(&format!("ConfigMap {ns}/{name}"), &e));
    }
    Ok(Some(value))
}

/// `LoadBalancerAvailable=False`, `InvalidHAProxyConfigTemplate`, naming the template's error.
fn template_refused(source: &str, e: &TemplateError) -> Error {
    Error::blocked(
        types::LOAD_BALANCER_AVAILABLE,
        reasons::INVALID_HAPROXY_CONFIG_TEMPLATE,
        format!("customHAProxyConfigTemplateRef: {source}: {e}; the running config is kept"),
        BLOCKED_RETRY,
    )
}

/// How long a blocked load balancer waits before looking again (a spec change is seen at once).
const BLOCKED_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// What [`ensure`] found.
pub enum Ensured {
    Ready {
        ip: String,
        frontend_port: u16,
    },
    /// Not yet: the container has no address yet, is being created, or keeps stopping.
    Waiting {
        reason: &'static str,
        message: String,
        /// When to look again; `None`: the caller backs off.
        retry: Option<std::time::Duration>,
    },
}

impl Ensured {
    fn waiting(message: String) -> Self {
        Ensured::Waiting {
            reason: reasons::NOT_AVAILABLE,
            message,
            retry: None,
        }
    }
}

/// The cluster's LB container, created (or adopted) and running, with its backends in sync.
/// A container with its name that is not the DockerCluster's blocks it.
pub async fn ensure(
    ctx: &Context,
    dc: &DockerCluster,
    owner: &labels::Owner<'_>,
    cluster: &Cluster,
    patcher: &mut Patcher<'_>,
) -> Result<Ensured> {
    let (cluster_name, ns) = (owner.cluster_name, owner.cluster_namespace);
    let ip_family = cluster.ip_family().map_err(|message| {
        Error::blocked(
            types::LOAD_BALANCER_AVAILABLE,
            reasons::INVALID_SPEC,
            message,
            BLOCKED_RETRY,
        )
    })?;
    let mut target = LbTarget::resolve(ctx, ns, cluster_name, Some(dc), Some(cluster)).await?;

    let rt = &ctx.runtime;
    let name = naming::load_balancer_name(cluster_name);
    let key = crate::controllers::key(ctx.kinds.cluster, dc);

    // Ours by its labels (not adopted from upstream, nor passed on from an earlier object).
    let mut ours = true;
    let container: ContainerInfo = match rt.inspect(&name).await? {
        // Its `destroy` event wakes this controller again.
        Some(existing) if existing.is_being_removed() => {
            return Ok(Ensured::waiting(format!(
                "container {name} is being removed"
            )));
        }
        Some(existing) => match labels::ownership(&existing.labels, owner) {
            // The LB of the cluster's previous infrastructure object: the Cluster names this one.
            labels::Ownership::Foreign(_)
                if labels::passes_to_infrastructure(
                    &existing.labels,
                    owner,
                    infra_ref(Some(cluster), owner),
                ) =>
            {
                // Once, on the pass that takes it over (the condition is not True yet); the
                // labels never change, so every later pass decides the same way.
                let available = dc.status.as_ref().and_then(|s| s.conditions.as_ref());
                if !available.is_some_and(|c| {
                    crate::api::conditions::is_true(c, types::LOAD_BALANCER_AVAILABLE)
                }) {
                    info!(container = %name, id = %existing.id,
                        from = %labels::recorded_owner(&existing.labels),
                        "the load balancer passes to the infrastructure object the Cluster names");
                }
                ours = false;
                existing
            }
            labels::Ownership::Foreign(why) => {
                let claim = adoption_claim(ctx, dc, cluster_name, &existing);
                match adoption::decide(&existing, &claim) {
                    adoption::Adoption::Recorded => {}
                    adoption::Adoption::New => {
                        info!(container = %name, id = %existing.id,
                            "adopting the load balancer upstream CAPD created");
                        patcher
                            .annotations(
                                serde_json::json!({ adoption::ADOPTED_CONTAINER: existing.id }),
                            )
                            .await?;
                    }
                    adoption::Adoption::Refused(not_upstream) => {
                        let why = if existing.labels.contains_key(labels::MANAGED_BY) {
                            why
                        } else {
                            not_upstream
                        };
                        return Err(Error::blocked(
                            types::LOAD_BALANCER_AVAILABLE,
                            reasons::NAME_CONFLICT,
                            format!(
                                "container {name} already exists and is not this DockerCluster's: {why}"
                            ),
                            BLOCKED_RETRY,
                        ));
                    }
                }
                target.adopted_lb = Some(existing.id.clone());
                ours = false;
                existing
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
                owner,
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
            // A cluster provisioned with the LB's address as its endpoint needs its new LB
            // there: every kubeconfig, kubelet and certificate names it, and CAPI never lets it
            // change. Docker cannot be asked for an address on a network without a configured
            // subnet (kind's is one), but gives the lowest free one: the old LB's once the engine
            // has released it, which can be after `docker rm` returned (Engine 20.10, given a
            // new endpoint of the same name meanwhile, never released it). So: no create while
            // a container that is going holds it, each attempt one start of the restart streak
            // whatever wakes the pass, and a container that got another address is removed
            // again. Held by a container that stays, the address is out of reach: the LB is
            // created wherever the engine puts it, as before.
            let pinned = match pinned_address(ctx, dc, ip_family).await? {
                Some((want, AddressUse::HeldBy(holder))) => {
                    if holder_is_going(ctx, &holder).await? {
                        return Ok(Ensured::waiting(format!(
                            "the control-plane endpoint's address {want} is still held on \
                             network {} by {holder}, which is going; container {name} is created \
                             there once the engine releases it",
                            ctx.settings.network
                        )));
                    }
                    warn!(container = %name, endpoint = %want, %holder,
                        "the control-plane endpoint's address is taken; the load balancer cannot have it");
                    None
                }
                other => other.map(|(want, _)| want),
            };
            if pinned.is_some()
                && let RestartDecision::Wait { wait, starts } = ctx.restarts.decide(&key, None)
            {
                return Ok(Ensured::Waiting {
                    reason: reasons::NOT_AVAILABLE,
                    message: format!(
                        "container {name} is created again at the control-plane endpoint's \
                         address; {starts} attempt(s) so far, the next in {}s",
                        wait.as_secs().max(1)
                    ),
                    retry: Some(wait),
                });
            }
            info!(container = %name, "creating load balancer container");
            match rt.create_and_start(&spec).await {
                Ok(c) => match pinned {
                    Some(want) if address(&c, ip_family) != Some(want) => {
                        let got = address(&c, ip_family);
                        return misplaced(ctx, &key, &name, want, got, false).await;
                    }
                    _ => c,
                },
                // Lost a race with ourselves (another worker or a restart): look again next pass.
                Err(RuntimeError::Conflict(_)) => {
                    return Ok(Ensured::waiting(format!(
                        "container {name} is being created"
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };

    // A stopped LB is started again, on the restart backoff's schedule whatever woke this pass
    // (an LB whose haproxy cannot start would otherwise be started at engine speed).
    let container = if container.is_running() {
        container
    } else if container.state == Some(ContainerState::Dead) {
        // The engine never starts a dead container again (a removal that failed half-way).
        warn!(container = %name, "load balancer container is dead; removing it to create it again");
        rt.remove(&name).await?;
        return Ok(Ensured::waiting(format!(
            "container {name} was dead (the engine cannot start it again); removed it, created \
             again on the next pass"
        )));
    } else {
        let restarting = |c: &ContainerInfo, starts, wait| Ensured::Waiting {
            reason: reasons::CONTAINER_RESTARTING,
            message: restarting_message(&name, c.exit_code, starts, Some(wait)),
            retry: Some(wait),
        };
        match ctx.restarts.decide(&key, container.ran_for()) {
            RestartDecision::Wait { wait, starts } => {
                return Ok(restarting(&container, starts, wait));
            }
            RestartDecision::Start { starts } => {
                info!(container = %name, state = ?container.state, exit_code = ?container.exit_code,
                    starts, "load balancer is not running; starting it");
                rt.start(&name).await?;
                let after = rt.inspect(&name).await?.unwrap_or(container);
                if !after.is_running() {
                    return Ok(restarting(&after, starts, restart_delay(starts + 1)));
                }
                after
            }
        }
    };
    let up = container
        .started_at
        .and_then(|t| (chrono::Utc::now() - t).to_std().ok());
    ctx.restarts.running_for(&key, up);
    let Some(ip) = address(&container, ip_family) else {
        return Ok(Ensured::waiting(format!(
            "container {name} has no IP address yet"
        )));
    };
    // Ours at another address than the endpoint's, which is free (a manager died between the
    // create and the remove, or an engine restart started a node first): it serves no one there,
    // and a new one gets the endpoint's address. Taken by a container that stays (a node), the
    // address is out of reach; the LB is left as it is.
    if ours
        && endpoint_address(dc, ip_family).is_some_and(|want| want != ip)
        && let Some((want, AddressUse::Free)) = pinned_address(ctx, dc, ip_family).await?
    {
        return misplaced(ctx, &key, &name, want, Some(ip), true).await;
    }

    sync_backends(ctx, &target, None).await?;
    Ok(Ensured::Ready {
        ip: ip.to_string(),
        frontend_port: target.frontend_port,
    })
}

/// The LB container's address in the cluster's family (IPv4 unless the cluster is IPv6-only).
fn address(c: &ContainerInfo, family: IpFamily) -> Option<IpAddr> {
    let ip = if family == IpFamily::V6 {
        &c.ipv6
    } else {
        &c.ipv4
    };
    ip.as_deref()?.parse().ok()
}

/// The address a re-created LB must have: the endpoint's host, once the DockerCluster was
/// provisioned with it, when it is an address of the cluster's family. A host name, or an
/// endpoint not yet provisioned, names no address (the first LB sets the endpoint).
fn endpoint_address(dc: &DockerCluster, family: IpFamily) -> Option<IpAddr> {
    let provisioned = dc
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        == Some(true);
    let host = dc.spec.control_plane_endpoint.as_ref()?.host.as_deref()?;
    let ip: IpAddr = host.parse().ok()?;
    (provisioned && ip.is_ipv6() == (family == IpFamily::V6)).then_some(ip)
}

/// The endpoint's address when the LB must be there ([`endpoint_address`]) and it is on the LB's
/// network (a host the user set elsewhere is left alone), with what the network says of it.
async fn pinned_address(
    ctx: &Context,
    dc: &DockerCluster,
    family: IpFamily,
) -> Result<Option<(IpAddr, AddressUse)>> {
    let Some(want) = endpoint_address(dc, family) else {
        return Ok(None);
    };
    Ok(
        match ctx.runtime.address_use(&ctx.settings.network, want).await? {
            AddressUse::OffNetwork => None,
            used => Some((want, used)),
        },
    )
}

/// Whether the container holding an address is going: gone already (the engine has not
/// released its address yet) or being removed.
async fn holder_is_going(ctx: &Context, holder: &str) -> Result<bool> {
    Ok(ctx
        .runtime
        .inspect(holder)
        .await?
        .is_none_or(|c| c.is_being_removed()))
}

/// Our LB at `got`, not at the endpoint's `want`: removed (at once if this pass created it, else
/// when the restart streak allows), to be created again there.
async fn misplaced(
    ctx: &Context,
    key: &str,
    name: &str,
    want: IpAddr,
    got: Option<IpAddr>,
    running: bool,
) -> Result<Ensured> {
    let got = got.map_or_else(|| "no address".to_string(), |ip| ip.to_string());
    if running && let RestartDecision::Wait { wait, .. } = ctx.restarts.decide(key, None) {
        return Ok(Ensured::Waiting {
            reason: reasons::NOT_AVAILABLE,
            message: format!(
                "container {name} runs at {got}, not at the control-plane endpoint's {want}; it \
                 is removed and created again in {}s",
                wait.as_secs().max(1)
            ),
            retry: Some(wait),
        });
    }
    warn!(container = %name, endpoint = %want, address = %got,
        "the load balancer is not at the control-plane endpoint's address; removing it");
    ctx.runtime.remove(name).await?;
    let next = restart_delay(ctx.restarts.starts(key) + 1);
    Ok(Ensured::Waiting {
        reason: reasons::NOT_AVAILABLE,
        message: format!(
            "container {name} got {got}, not the control-plane endpoint's {want} (the address \
             was still being released, or is taken); removed it, next attempt in {}s",
            next.as_secs().max(1)
        ),
        retry: Some(next),
    })
}

/// What a DockerCluster says about the upstream CAPD load balancer `c` (see
/// [`adoption::decide`]): upstream set the control-plane endpoint's host to its address.
fn adoption_claim<'a>(
    ctx: &'a Context,
    dc: &'a DockerCluster,
    cluster_name: &'a str,
    c: &ContainerInfo,
) -> adoption::Claim<'a> {
    let host = dc
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.host.as_deref())
        .filter(|h| !h.is_empty());
    adoption::Claim {
        cluster_name,
        role: labels::ROLE_LOAD_BALANCER,
        network: &ctx.settings.network,
        recorded: dc
            .annotations()
            .get(adoption::ADOPTED_CONTAINER)
            .map(String::as_str),
        provisioned_on: host
            .is_some_and(|h| c.ipv4.as_deref() == Some(h) || c.ipv6.as_deref() == Some(h)),
    }
}

/// The (kind, name) the Cluster's `spec.infrastructureRef` gives for `owner`'s kind, if any.
fn infra_ref<'a>(
    cluster: Option<&'a Cluster>,
    owner: &labels::Owner<'_>,
) -> Option<(&'a str, &'a str)> {
    let r = cluster?.spec.infrastructure_ref.as_ref()?;
    let kind = r.kind.as_deref()?;
    Some((kind, r.name_if(crate::api::GROUP, owner.kind)?))
}

/// Remove the LB container if it is the owner's, the previous infrastructure object's that
/// passed to it ([`labels::passes_to_infrastructure`]; needs the Cluster: without it such a
/// container stays, with a warning), or the upstream one it adopted (or would adopt); someone
/// else's is left alone. It must be gone before the finalizer goes.
pub async fn delete(
    ctx: &Context,
    dc: &DockerCluster,
    owner: &labels::Owner<'_>,
    cluster: Option<&Cluster>,
) -> Result<()> {
    let name = naming::load_balancer_name(owner.cluster_name);
    let ours = |c: &ContainerInfo| {
        labels::usable_by(&c.labels, owner)
            || labels::passes_to_infrastructure(&c.labels, owner, infra_ref(cluster, owner))
            || adoption::decide(c, &adoption_claim(ctx, dc, owner.cluster_name, c)).is_usable()
    };
    if let Some(existing) = ctx.runtime.inspect(&name).await? {
        if ours(&existing) {
            info!(container = %name, owner = %labels::recorded_owner(&existing.labels),
                "removing load balancer container");
            ctx.runtime.remove(&name).await?;
        } else {
            warn!(container = %name, "not removing a container with our name that belongs to someone else");
        }
    }
    if ctx.runtime.inspect(&name).await?.is_some_and(|c| ours(&c)) {
        return Err(Error::ContainerStillExists(name));
    }
    Ok(())
}

/// Pure: the haproxy.cfg for the given running control-plane containers (name -> address),
/// leaving out the `draining` ones as long as another backend remains. A custom template gets
/// the same backends, in upstream's data model; one that fails to evaluate is refused.
pub fn desired_config(
    target: &LbTarget,
    servers: BTreeMap<String, String>,
    draining: &BTreeSet<String>,
) -> Result<String> {
    let others_remain = servers.keys().any(|n| !draining.contains(n));
    let servers = servers
        .into_iter()
        .filter(|(name, _)| !(others_remain && draining.contains(name)))
        .map(|(name, address)| {
            (
                name,
                Backend {
                    address,
                    weight: 100,
                },
            )
        })
        .collect();
    let data = HaproxyConfig {
        frontend_port: target.frontend_port,
        backend_port: BACKEND_PORT,
        servers,
        ipv6: target.ipv6,
    };
    match &target.custom_config {
        Some(template) => haproxy_template::render(template, &data)
            .map_err(|e| template_refused("the template", &e)),
        None => Ok(haproxy::render(&data)),
    }
}

/// Recompute the backends from running control-plane containers (minus `exclude`, which is
/// being removed, and those of control-plane Machines being deleted, which drain first) and
/// reload HAProxy if the config changed. Every caller gets the same answer, so a DockerCluster
/// pass can never put a draining node back.
pub async fn sync_backends(
    ctx: &Context,
    target: &LbTarget,
    exclude: Option<&str>,
) -> Result<SyncOutcome> {
    let lock = ctx.lb_locks.lock(&target.namespace, &target.cluster);
    let _guard = lock.lock().await;
    let rt = &ctx.runtime;
    let lb_name = naming::load_balancer_name(&target.cluster);
    let Some(lb) = rt.inspect(&lb_name).await? else {
        return Ok(SyncOutcome::NoLoadBalancer);
    };
    // Only the cluster's own LB container: same cluster and namespace, LB role, owned by a
    // DockerCluster or DevCluster (never a node container that happens to be named `<cluster>-lb`).
    // Either cluster kind: the LB may have passed from a DockerCluster to a DevCluster.
    let ours = labels::belongs_to_cluster(&lb.labels, &target.cluster, &target.namespace)
        && labels::is_cluster_load_balancer(&lb.labels);
    // Or upstream CAPD's LB that the DockerCluster adopted (that very container ID).
    let adopted = target.adopted_lb.as_deref() == Some(lb.id.as_str())
        && adoption::is_upstream_of(
            &lb,
            &target.cluster,
            labels::ROLE_LOAD_BALANCER,
            &target.network,
        );
    if !ours && !adopted {
        // Not our cluster's LB (same name, other namespace): never write into it.
        return Ok(SyncOutcome::NoLoadBalancer);
    }
    if !lb.is_running() {
        return Ok(SyncOutcome::NotRunning);
    }

    let selector = labels::cluster_role_selector(
        &target.cluster,
        &target.namespace,
        labels::ROLE_CONTROL_PLANE,
    );
    let mut nodes = rt.list(&selector).await?;
    if adopted {
        // A cluster upstream CAPD created: its control-plane nodes carry only kind's labels.
        // The adopted LB ties this cluster name to this DockerCluster, so they are its nodes.
        let kind = adoption::kind_selector(&target.cluster, labels::ROLE_CONTROL_PLANE);
        nodes.extend(rt.list(&kind).await?.into_iter().filter(|c| {
            adoption::is_upstream_of(
                c,
                &target.cluster,
                labels::ROLE_CONTROL_PLANE,
                &target.network,
            )
        }));
    }
    let servers: BTreeMap<String, String> = nodes
        .into_iter()
        .filter(|c| c.is_running() && Some(c.name.as_str()) != exclude)
        .filter_map(|c| {
            let addr = if target.ipv6 {
                c.ipv6.clone()
            } else {
                c.ipv4.clone()
            };
            addr.filter(|a| !a.is_empty()).map(|a| (c.name, a))
        })
        .collect();
    let backends = servers.len();
    let draining = draining_containers(ctx, target);
    let config = desired_config(target, servers, &draining)?;

    // Read and written through the engine's archive, not an exec: upstream's LB image (kind's
    // haproxy) is distroless, with no shell and no `cat` to run.
    match rt
        .read_file(&lb_name, haproxy::CONFIG_PATH, CONFIG_LIMIT)
        .await
    {
        Ok(Some(current)) if current == config.as_bytes() => {
            debug!(container = %lb_name, "haproxy.cfg unchanged");
            return Ok(SyncOutcome::Unchanged);
        }
        // Missing, different, or not a file we can read (too large, a directory): replaced.
        Ok(_) | Err(RuntimeError::Rejected(_)) => {}
        Err(e) => return Err(e.into()),
    }
    replace_config(ctx, &lb_name, &config, target.custom_config.is_some()).await?;
    rt.kill(&lb_name, "SIGHUP").await?;
    info!(container = %lb_name, backends, "haproxy.cfg updated and reloaded");
    Ok(SyncOutcome::Reloaded { backends })
}

/// Node containers of the cluster's control-plane Machines that are being deleted (from the
/// Machine cache: a sync never lists Machines from the API server).
fn draining_containers(ctx: &Context, target: &LbTarget) -> BTreeSet<String> {
    ctx.caches
        .machines
        .state()
        .iter()
        .filter(|m| {
            m.namespace().as_deref() == Some(target.namespace.as_str())
                && m.cluster_name() == Some(target.cluster.as_str())
                && m.is_control_plane()
                && m.metadata.deletion_timestamp.is_some()
        })
        .map(|m| naming::machine_container_name(&target.cluster, &m.name_any()))
        .collect()
}

/// Where a new haproxy.cfg is staged and checked before it replaces the running one. Left in
/// place afterwards (the image may have no `rm`; the next check overwrites it).
const STAGE_PATH: &str = "/usr/local/etc/haproxy/haproxy.cfg.capd-new";
/// The largest haproxy.cfg read back from the LB: far beyond any generated or templated config.
const CONFIG_LIMIT: u64 = 1024 * 1024;
/// How long a config haproxy rejected waits before it is checked again (a change of the
/// DockerCluster is seen at once; ConfigMaps are not watched).
const INVALID_CONFIG_RETRY: std::time::Duration = std::time::Duration::from_secs(600);

/// Replace haproxy.cfg with `config` once the image's own haproxy accepts it (`haproxy -c` on a
/// staged copy): haproxy keeps its old config when a reload fails, but could not start at all
/// from a bad one after the next restart, so a config it rejects is never written; it is a
/// [`Error::Blocked`] naming haproxy's error lines. An image without a haproxy on its PATH
/// cannot check: the config is applied as before. Three engine requests and one exec.
async fn replace_config(ctx: &Context, lb_name: &str, config: &str, custom: bool) -> Result<()> {
    let rt = &ctx.runtime;
    rt.write_file(lb_name, STAGE_PATH, config.as_bytes())
        .await?;
    let check = rt
        .exec(lb_name, &argv(&["haproxy", "-c", "-f", STAGE_PATH]), None)
        .await?;
    match check_verdict(check.exit_code) {
        Verdict::Valid => {}
        Verdict::Unchecked => {
            warn!(container = %lb_name, exit_code = check.exit_code, "haproxy -c cannot run in the load balancer image; applying haproxy.cfg unchecked");
        }
        Verdict::Rejected => {
            let out = format!(
                "{}\n{}",
                String::from_utf8_lossy(&check.stdout),
                String::from_utf8_lossy(&check.stderr)
            );
            let which = if custom {
                "the haproxy.cfg from customHAProxyConfigTemplateRef"
            } else {
                "the generated haproxy.cfg"
            };
            return Err(Error::blocked(
                types::LOAD_BALANCER_AVAILABLE,
                reasons::INVALID_HAPROXY_CONFIG,
                format!(
                    "haproxy rejects {which}; the running config is kept: {}",
                    haproxy_errors(&out)
                ),
                INVALID_CONFIG_RETRY,
            ));
        }
    }
    rt.write_file(lb_name, haproxy::CONFIG_PATH, config.as_bytes())
        .await?;
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Valid,
    Rejected,
    /// The check itself could not run (126: not executable, 127: not found).
    Unchecked,
}

fn check_verdict(exit_code: i64) -> Verdict {
    match exit_code {
        0 => Verdict::Valid,
        126 | 127 => Verdict::Unchecked,
        _ => Verdict::Rejected,
    }
}

/// haproxy's error lines from `haproxy -c` output, short: its ALERT lines (else the last lines),
/// at most three, each at most 240 characters, the staging path named as haproxy.cfg.
fn haproxy_errors(output: &str) -> String {
    const LINES: usize = 3;
    const WIDTH: usize = 240;
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let alerts: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("ALERT") || l.contains("ERROR"))
        .collect();
    let chosen = if alerts.is_empty() {
        &lines[lines.len().saturating_sub(LINES)..]
    } else {
        &alerts[..alerts.len().min(LINES)]
    };
    if chosen.is_empty() {
        return "haproxy -c failed without output".into();
    }
    chosen
        .iter()
        .map(|l| {
            let l = l.replace(STAGE_PATH, "haproxy.cfg");
            match l.char_indices().nth(WIDTH) {
                Some((end, _)) => format!("{}…", &l[..end]),
                None => l,
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::kit::error::Blocked;

    fn target() -> LbTarget {
        LbTarget {
            cluster: "c".into(),
            namespace: "ns".into(),
            frontend_port: 6443,
            ipv6: false,
            custom_config: None,
            adopted_lb: None,
            network: "kind".into(),
        }
    }

    fn servers(names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), format!("172.18.0.{}", i + 2)))
            .collect()
    }

    #[test]
    fn drained_server_leaves_only_when_others_remain() {
        let draining = BTreeSet::from(["c-cp-a".to_string()]);
        let cfg = desired_config(&target(), servers(&["c-cp-a", "c-cp-b"]), &draining).unwrap();
        assert!(!cfg.contains("server c-cp-a ") && cfg.contains("server c-cp-b "));
        let cfg = desired_config(&target(), servers(&["c-cp-a"]), &draining).unwrap();
        assert!(
            cfg.contains("server c-cp-a "),
            "the last backend is kept while draining"
        );
    }

    #[test]
    fn custom_config_is_used_verbatim() {
        let t = LbTarget {
            custom_config: Some("global\n".into()),
            ..target()
        };
        assert_eq!(
            desired_config(&t, servers(&["x"]), &BTreeSet::new()).unwrap(),
            "global\n"
        );
    }

    #[test]
    fn a_custom_template_gets_the_same_backends_and_its_errors_block() {
        let t = LbTarget {
            custom_config: Some(
                "bind *:{{ .FrontendControlPlanePort }}\n{{ range $n, $b := .BackendServers }}server {{ $n }} {{ JoinHostPort $b.Address $.BackendControlPlanePort }}\n{{ end }}".into(),
            ),
            ..target()
        };
        let draining = BTreeSet::from(["c-cp-a".to_string()]);
        assert_eq!(
            desired_config(&t, servers(&["c-cp-a", "c-cp-b"]), &draining).unwrap(),
            "bind *:6443\nserver c-cp-b 172.18.0.3:6443\n"
        );
        let bad = LbTarget {
            custom_config: Some("{{ .Nope }}".into()),
            ..target()
        };
        match desired_config(&bad, servers(&["x"]), &BTreeSet::new()) {
            Err(Error::Blocked(Blocked {
                reason, message, ..
            })) => {
                assert_eq!(reason, reasons::INVALID_HAPROXY_CONFIG_TEMPLATE);
                assert!(message.contains("Nope"), "{message}");
            }
            other => panic!("not blocked: {other:?}"),
        }
    }

    #[test]
    fn haproxy_check_results_are_short_and_name_the_error() {
        assert_eq!(check_verdict(0), Verdict::Valid);
        assert_eq!(check_verdict(1), Verdict::Rejected);
        assert_eq!(
            check_verdict(127),
            Verdict::Unchecked,
            "no haproxy in the image"
        );
        let out = format!(
            "[NOTICE]   (7) : haproxy version is 2.6.12\n\
             [ALERT]    (7) : config : parsing [{STAGE_PATH}:3] : unknown keyword 'bogus' in 'frontend' section\n\
             [ALERT]    (7) : config : Error(s) found in configuration file : {STAGE_PATH}\n\
             [ALERT]    (7) : config : Fatal errors found in configuration.\n\
             [ALERT]    (7) : config : one too many\n"
        );
        let m = haproxy_errors(&out);
        assert!(
            m.starts_with(
                "[ALERT]    (7) : config : parsing [haproxy.cfg:3] : unknown keyword 'bogus'"
            ),
            "{m}"
        );
        assert_eq!(m.matches("[ALERT]").count(), 3, "at most three lines: {m}");
        assert!(!m.contains("NOTICE") && !m.contains(STAGE_PATH), "{m}");
        let long = "x".repeat(10_000);
        assert!(haproxy_errors(&long).chars().count() <= 241);
        assert_eq!(
            haproxy_errors("a\nb\nc\nd\n"),
            "b; c; d",
            "no ALERT: the last lines"
        );
        assert_eq!(haproxy_errors(""), "haproxy -c failed without output");
    }
}
