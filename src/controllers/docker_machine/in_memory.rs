//! An in-memory DevMachine: a simulated machine whose phases (VM, Node, and on control planes
//! etcd and the API server) come up after upstream's provisioning delays, each making what a
//! real one would leave in the workload cluster ([`crate::inmemory::objects`]). No bootstrap
//! data is run: its presence is what the VM phase waits for, as upstream.
//!
//! Every reconcile makes sure the objects of each phase already True exist (after a manager
//! restart the store is empty and is rebuilt at once), then provisions the phases that came
//! due, reports one condition per phase, and annotates the Machine bootstrapped once its last
//! phase is up (a restart then skips every delay).
//!
//! It is one more reconciler behind the same lifecycle as the node containers' ([`Machines`]),
//! sharing its fetch and gate; the view's backend mark picks it ([`super::reconcile`]).
use chrono::Utc;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::{Value, json};

use crate::{
    api::conditions::{Desired, reasons, types},
    api::{DockerMachine, dev::in_memory_backend},
    capi,
    capi::Machine,
    controllers::{
        docker_machine::{Bound, Owners},
        kit::{
            error::{Error, IN_MEMORY_RETRY, Result},
            lifecycle::{Decide, Deleted, Reconciler, Reports, Step},
        },
    },
    inmemory::{
        Cloud, Group,
        cloud::{draws, ensure, remove},
        etcd, objects,
        phases::{self, BOOTSTRAPPED_ANNOTATION, MachineFacts, Phase, Provisioned},
        spec::InMemoryMachineSpec,
    },
};

/// Where errors of an in-memory machine are reported (upstream: on the phase that failed; the
/// VM's before any other).
pub const PRIMARY: &str = types::VM_PROVISIONED;

/// The DevMachine controller of the in-memory backend.
pub struct InMemoryMachines;

impl Decide for InMemoryMachines {
    type Object = DockerMachine;
    /// The view's `spec.backend.inMemory`, as JSON.
    type Normal = (Bound, String);
    /// The cluster's name, if known (the Machine and the Cluster may be gone).
    type Delete = Option<String>;

    fn decide_normal(dm: &DockerMachine, _: &Owners, bound: Bound) -> (Bound, String) {
        let spec = in_memory_backend(&dm.metadata).unwrap_or_default();
        (bound, spec.to_string())
    }

    fn decide_delete(_: &DockerMachine, owners: &Owners) -> Option<String> {
        owners.cluster_name.clone()
    }
}

impl Reconciler for InMemoryMachines {
    const PRIMARY: &'static str = PRIMARY;
    const DELETING: &'static str = "Deleting the simulated machine";
    const READY_FROM: &'static [&'static str] = phases::ready_from(false);

    /// A control plane reports the etcd and API server phases too.
    fn reports(dm: &DockerMachine) -> Reports {
        Reports {
            primary: PRIMARY,
            ready_from: Some(phases::ready_from(
                dm.labels().contains_key(capi::CONTROL_PLANE_LABEL),
            )),
        }
    }

    async fn normal(step: &mut Step<'_, Self>, (bound, spec): (Bound, String)) -> Result<Action> {
        normal(step, &bound, &spec).await
    }

    async fn delete(step: &mut Step<'_, Self>, cluster_name: Option<String>) -> Result<Deleted> {
        delete(step, cluster_name.as_deref())?;
        Ok(Deleted::Released)
    }
}

/// The normal arm. `spec` is the view's `spec.backend.inMemory`, as JSON.
async fn normal(
    step: &mut Step<'_, InMemoryMachines>,
    bound: &Bound,
    spec: &str,
) -> Result<Action> {
    let (dm, ctx) = (step.obj, step.ctx);
    let cloud = ctx.in_memory(PRIMARY)?;
    let spec = match serde_json::from_str(spec)
        .map_err(|e| e.to_string())
        .and_then(|v| InMemoryMachineSpec::from_value(&v).map_err(|e| e.to_string()))
    {
        Ok(spec) => spec,
        Err(why) => {
            step.report.set(&Desired::false_(
                PRIMARY,
                reasons::INVALID_SPEC,
                format!("spec.backend.inMemory: {why}"),
            ));
            return Ok(Action::await_change());
        }
    };
    let name = dm.name_any();
    let uid = dm.uid().unwrap_or_default();
    let machine = &bound.machine;
    let control_plane = machine.is_control_plane();
    let now = Utc::now();
    let gates_open =
        bound.cluster.infrastructure_provisioned() && machine.data_secret_name().is_some();
    let facts = MachineFacts {
        control_plane,
        bootstrapped: phases::has_bootstrapped_annotation(machine.metadata.annotations.as_ref()),
        cluster_infrastructure_provisioned: bound.cluster.infrastructure_provisioned(),
        control_plane_initialized: bound.cluster.control_plane_initialized(),
        bootstrap_data: machine.data_secret_name().is_some(),
        // The VM record is made once the gates open; its delay counts from then.
        vm_created: if gates_open {
            cloud.vm_created(&uid, now)
        } else {
            now
        },
        provisioned: Provisioned::from_conditions(step.report.conditions()),
        now,
    };
    let plan = phases::decide_machine(&spec, &facts, &draws(&uid)).map_err(|e| {
        Error::blocked(
            PRIMARY,
            reasons::INVALID_SPEC,
            e.to_string(),
            IN_MEMORY_RETRY,
        )
    })?;

    let listener = phases::listener_name(&bound.namespace, &bound.cluster_name);
    let group = cloud.group(&listener);
    let version = machine.spec.version.as_deref();
    for (phase, state) in &plan.phases {
        if !state.is_done() {
            continue;
        }
        match phase {
            Phase::Vm => {
                let provider_id = phases::provider_id(&name);
                if dm.spec.provider_id.as_deref() != Some(provider_id.as_str()) {
                    step.patcher
                        .spec(json!({ "providerID": provider_id }))
                        .await?;
                }
            }
            Phase::Node => ensure(
                &group,
                "Node",
                objects::node(&name, &phases::provider_id(&name), version, control_plane),
            )
            .map_err(|e| Error::in_memory_write(types::NODE_PROVISIONED, e))?,
            Phase::Etcd => {
                // The Pod is the member: its annotations hold the member's identity, which the
                // fake etcd reads (a member added twice is the same member).
                let member = etcd::add_member(&group, &name, now);
                ensure(
                    &group,
                    "Pod",
                    objects::static_pod(objects::ETCD, &name, Value::Object(member)),
                )
                .map_err(|e| Error::in_memory_write(types::ETCD_PROVISIONED, e))?
            }
            Phase::ApiServer => {
                api_server(step, cloud, &group, bound, &listener, &name, version).await?
            }
        }
    }

    for c in &plan.conditions {
        step.report.set(c);
    }
    if plan.state(Phase::Vm).is_some_and(|s| s.is_done()) {
        step.report.initialization = Some(crate::api::Initialization {
            provisioned: Some(true),
        });
        step.report.ready = Some(true);
    }
    if plan.annotate_bootstrapped {
        Api::<Machine>::namespaced(ctx.client.clone(), &bound.namespace)
            .patch(
                &machine.name_any(),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({ "metadata": { "annotations": { BOOTSTRAPPED_ANNOTATION: "" } } }),
                ),
            )
            .await?;
    }
    Ok(Action::requeue(
        plan.requeue_after
            .map_or(ctx.settings.resync, |d| d.min(ctx.settings.resync)),
    ))
}

/// The API server phase: its static Pods, what `kubeadm init` leaves (once per cluster), and
/// the cluster's listener, which needs the cluster CA KCP made.
async fn api_server(
    step: &Step<'_, InMemoryMachines>,
    cloud: &Cloud,
    group: &Group,
    bound: &Bound,
    listener: &str,
    node: &str,
    version: Option<&str>,
) -> Result<()> {
    let fail = |e| Error::in_memory_write(types::API_SERVER_PROVISIONED, e);
    for component in objects::API_SERVER_COMPONENTS {
        ensure(
            group,
            "Pod",
            objects::static_pod(component, node, json!({})),
        )
        .map_err(fail)?;
    }
    for (kind, obj) in objects::kubeadm_init_objects(version) {
        ensure(group, kind, obj).map_err(fail)?;
    }
    if cloud.is_listening(listener) {
        return Ok(());
    }
    // The port clients dial: the Cluster's endpoint once CAPI copied it, else the DevCluster's
    // (a topology may have put a defaulted port back on the DevCluster since).
    let port = bound
        .cluster
        .endpoint()
        .map(|(_, port)| port)
        .or_else(|| {
            let dc = step.fetched.docker_cluster.as_ref()?;
            dc.spec.control_plane_endpoint.as_ref()?.port
        })
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| {
            Error::blocked(
                types::API_SERVER_PROVISIONED,
                reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                "the DevCluster has no control-plane endpoint port yet",
                IN_MEMORY_RETRY,
            )
        })?;
    let secrets = Api::<Secret>::namespaced(step.ctx.client.clone(), &bound.namespace);
    let ca = ca_pair(
        &secrets,
        &bound.namespace,
        &format!("{}-ca", bound.cluster_name),
    )
    .await?;
    let etcd_ca = ca_pair(
        &secrets,
        &bound.namespace,
        &format!("{}-etcd", bound.cluster_name),
    )
    .await?;
    cloud
        .listen(listener, port, (&ca.0, &ca.1), (&etcd_ca.0, &etcd_ca.1))
        .await
        .map_err(|e| {
            Error::blocked(
                types::API_SERVER_PROVISIONED,
                reasons::INTERNAL_ERROR,
                e.to_string(),
                IN_MEMORY_RETRY,
            )
        })
}

/// A CA Secret KCP makes (`<cluster>-ca`, `<cluster>-etcd`): its certificate and key, PEM.
async fn ca_pair(secrets: &Api<Secret>, ns: &str, name: &str) -> Result<(Vec<u8>, Vec<u8>)> {
    let secret = secrets.get_opt(name).await?;
    let data = secret.and_then(|s| s.data);
    let pair = data
        .as_ref()
        .and_then(|d| Some((d.get("tls.crt")?, d.get("tls.key")?)));
    match pair {
        Some((cert, key)) => Ok((cert.0.clone(), key.0.clone())),
        None => Err(Error::blocked(
            types::API_SERVER_PROVISIONED,
            reasons::INTERNAL_ERROR,
            format!("Secret {ns}/{name} with a CA (tls.crt, tls.key) not found"),
            IN_MEMORY_RETRY,
        )),
    }
}

/// The delete arm: the machine's Node and static Pods leave the workload cluster.
fn delete(step: &Step<'_, InMemoryMachines>, cluster_name: Option<&str>) -> Result<()> {
    let (dm, ctx) = (step.obj, step.ctx);
    let name = dm.name_any();
    if let Some(cloud) = &ctx.in_memory {
        cloud.forget_machine(&dm.uid().unwrap_or_default());
        if let Some(cluster) = cluster_name {
            let ns = dm.namespace().unwrap_or_default();
            let group = cloud.group(&phases::listener_name(&ns, cluster));
            let fail = |e| Error::in_memory_write(PRIMARY, e);
            remove(&group, "Node", "", &name).map_err(fail)?;
            for component in std::iter::once(&objects::ETCD).chain(objects::API_SERVER_COMPONENTS) {
                remove(
                    &group,
                    "Pod",
                    "kube-system",
                    &objects::static_pod_name(component, &name),
                )
                .map_err(fail)?;
            }
        }
    }
    Ok(())
}
