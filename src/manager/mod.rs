//! The manager process: flags, start-up order and shutdown. `main.rs` only calls [`run`].
mod flags;
mod upstream;
mod webhook_tls;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

pub use flags::{Flags, LeaseTiming};
use futures::FutureExt;
use kube::{
    Api, Client, Config,
    api::ListParams,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
pub use upstream::{FeatureGates, normalize};

use crate::{
    api::{DockerCluster, DockerMachine, DockerMachinePool},
    capi::{Cluster, Machine, MachinePool},
    controllers::{self, Shared},
    diagnostics,
    docker::{
        ContainerRuntime, RuntimeError,
        engine::{BollardRuntime, EngineOptions},
        events,
    },
    http::{self, HttpState},
    telemetry::Metrics,
    webhook,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Start-up and run errors of the manager; each ends the process with a message.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("invalid flag: {0}")]
    Flag(String),
    #[error("kubeconfig {what}")]
    Kubeconfig {
        what: String,
        #[source]
        source: BoxError,
    },
    #[error("leader election: {what}")]
    LeaderElection {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("Docker Engine: {0}")]
    Docker(String),
    #[error("conversion webhook: {0}")]
    Webhook(#[from] crate::webhook::WebhookError),
    #[error("diagnostics server: {0}")]
    Diagnostics(#[from] crate::diagnostics::DiagnosticsError),
    #[error("health server on {addr}: {source}")]
    Http {
        addr: String,
        source: std::io::Error,
    },
}

pub async fn run(flags: Flags) -> Result<(), ManagerError> {
    let settings = flags.settings().map_err(ManagerError::Flag)?;
    let engine = flags.engine_options();
    // A refused address (plain TCP to a remote engine) is a configuration error: say so at once.
    engine.check().map_err(ManagerError::Flag)?;
    let scope = flags.scope().map_err(ManagerError::Flag)?;
    let lease_timing = flags.lease_timing().map_err(ManagerError::Flag)?;
    let (server_tls, tls_warnings) = flags.server_tls().map_err(ManagerError::Flag)?;
    log_upstream_flags(&flags, &tls_warnings);
    // Metrics first: the kube client counts its requests into them.
    let metrics = Arc::new(Metrics::default());
    let client = kube_client(&flags, &metrics).await?;

    let shutdown = CancellationToken::new();
    tokio::spawn(wait_for_signal(shutdown.clone()));
    let stop = {
        let token = shutdown.clone();
        async move { token.cancelled().await }.boxed().shared()
    };

    // Health and metrics answer from the start; readiness follows the controllers.
    let ready = Arc::new(AtomicBool::new(false));
    let state = HttpState {
        ready: ready.clone(),
    };
    let listener = tokio::net::TcpListener::bind(&flags.health_addr)
        .await
        .map_err(|source| ManagerError::Http {
            addr: flags.health_addr.clone(),
            source,
        })?;
    info!(addr = %flags.health_addr, "serving /healthz and /readyz");
    let http_task = tokio::spawn(http::serve_on(listener, state, stop.clone()));
    let diagnostics_task = diagnostics::start(
        &flags.diagnostics_address,
        flags.insecure_diagnostics,
        metrics.clone(),
        client.clone(),
        stop.clone(),
    )
    .await?;
    // Conversion needs neither the engine nor leadership: serve it before waiting on either.
    let webhook_task = webhook::start(
        &flags.webhook_addr(),
        &flags.webhook_cert_dir,
        &server_tls,
        stop.clone(),
    )
    .await?;

    let runtime = connect_docker(&engine, &shutdown).await?;
    let Some(runtime) = runtime else {
        return Ok(());
    };
    let engine = runtime.engine();
    info!(engine_version = %engine.version, engine_api = %engine.api_version,
        negotiated_api = %engine.negotiated, "connected to the Docker Engine");
    metrics.set_engine(crate::telemetry::EngineLabels {
        version: engine.version.clone(),
        api_version: engine.api_version.clone(),
        negotiated_api_version: engine.negotiated.clone(),
    });
    let counts = runtime.clone();
    metrics.set_docker_call_source(Arc::new(move || {
        counts
            .call_counts()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }));
    wait_for_crds(
        &client,
        scope.namespace.as_deref(),
        scope.machine_pools,
        &shutdown,
    )
    .await;
    if shutdown.is_cancelled() {
        return Ok(());
    }
    // Ready means "able to work" (Docker answers, CRDs served), not "leader": a new replica
    // waiting for the lease must pass its readiness probe, or a rolling update (maxUnavailable
    // 0) would never retire the old leader.
    ready.store(true, Ordering::Relaxed);
    if flags.leader_elect {
        let lost = leader_election(&client, &flags, lease_timing, &shutdown).await?;
        tokio::spawn(lost);
    }
    if shutdown.is_cancelled() {
        return Ok(());
    }

    let mut settings = settings;
    settings.cgroup_v1 = match runtime.cgroup_v1().await {
        Ok(v1) => v1,
        Err(e) => {
            // Only the kubelet flag depends on it; the engine answered a moment ago.
            warn!(error = %e, "cannot read the engine's cgroup version; assuming cgroup v2");
            false
        }
    };
    info!(cgroup_v1 = settings.cgroup_v1, "Docker Engine host");
    let with_credentials = crate::docker::specs::proxy_credentials(|k| std::env::var(k).ok());
    if !with_credentials.is_empty() {
        // The names only: the values hold the credentials.
        warn!(variables = ?with_credentials, "proxy credentials are not passed to node containers: their user:password@ part was removed");
    }
    let triggers = controllers::docker_triggers(
        events::container_events(&runtime, stop.clone()),
        controllers::FAMILIES,
    );
    let runtime: Arc<dyn ContainerRuntime> = runtime;
    let (caches, writers) = controllers::kit::caches();
    let mut shared = Shared::new(client, runtime, settings, metrics.clone(), caches);
    if flags.in_memory_backend {
        use crate::inmemory::phases::{DEFAULT_MAX_PORT, DEFAULT_MIN_PORT};
        info!(host = %flags.in_memory_host, "serving the in-memory backend");
        shared.in_memory = Some(Arc::new(crate::inmemory::Cloud::new(
            flags.in_memory_host.clone(),
            (DEFAULT_MIN_PORT, DEFAULT_MAX_PORT),
        )));
    }
    let shared = Arc::new(shared);
    let tracked = Arc::downgrade(&shared);
    metrics.set_tracked_source(Arc::new(move || {
        tracked.upgrade().map(|c| c.tracked()).unwrap_or_default()
    }));
    info!(?scope, "controllers starting");
    controllers::run(shared, writers, scope, stop, triggers).await;
    ready.store(false, Ordering::Relaxed);
    info!("controllers stopped");
    shutdown.cancel();
    let _ = http_task.await;
    let _ = diagnostics_task.await;
    if let Some(task) = webhook_task {
        let _ = task.await;
    }
    Ok(())
}

/// Say once what of upstream CAPD's command line has no effect here, and the feature gates, so
/// that a manifest written for upstream shows in the log what it does.
fn log_upstream_flags(flags: &Flags, tls_warnings: &[String]) {
    let ignored = flags.ignored.given();
    if !ignored.is_empty() {
        info!(flags = ?ignored, "upstream CAPD flags accepted and ignored: no meaning in capd-rs (docs/upstream-flags.md)");
    }
    for w in tls_warnings {
        warn!("{w}");
    }
    if let Ok(gates) = flags.feature_gates() {
        if !gates.unknown.is_empty() {
            warn!(gates = ?gates.unknown, "unknown feature gates ignored");
        }
        info!(gates = ?gates.enabled, "feature gates (only MachinePool changes what runs here)");
    }
}

async fn kube_client(flags: &Flags, metrics: &Metrics) -> Result<Client, ManagerError> {
    let config = match &flags.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| ManagerError::Kubeconfig {
                what: path.clone(),
                source: Box::new(e),
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| ManagerError::Kubeconfig {
                    what: path.clone(),
                    source: Box::new(e),
                })?
        }
        None => Config::infer()
            .await
            .map_err(|e| ManagerError::Kubeconfig {
                what: "(in-cluster or default)".into(),
                source: Box::new(e),
            })?,
    };
    // client-go's host label: the API server's host:port.
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let builder =
        kube::client::ClientBuilder::try_from(config).map_err(|e| ManagerError::Kubeconfig {
            what: "client".into(),
            source: Box::new(e),
        })?;
    Ok(builder
        .with_layer(&metrics.kube_request_layer(&host))
        .build())
}

/// SIGTERM or SIGINT starts a graceful shutdown; a second one exits at once.
async fn wait_for_signal(shutdown: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot listen for SIGTERM");
            return;
        }
    };
    for n in 0.. {
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
        if n > 0 {
            warn!("second signal: exiting now");
            std::process::exit(1);
        }
        info!("shutdown requested; finishing in-flight reconciles");
        shutdown.cancel();
    }
}

/// Connect to the Docker Engine, retrying (with the manager unready) until it answers. A client
/// that cannot be built (TLS files missing or unreadable, a bad address) or a request the engine
/// refuses is not retried: a person must act. A TLS handshake the engine refuses looks like a
/// network failure and is retried, with the error in the log.
async fn connect_docker(
    engine: &EngineOptions,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<BollardRuntime>>, ManagerError> {
    let mut delay = Duration::from_millis(500);
    info!(docker_host = %engine.display(), tls = engine.tls_verify, "connecting to the Docker Engine");
    loop {
        match BollardRuntime::connect_with(engine).await {
            Ok(rt) => return Ok(Some(Arc::new(rt))),
            Err(RuntimeError::Rejected(e)) => return Err(ManagerError::Docker(e)),
            Err(e) => warn!(error = %e, retry_in = ?delay, "Docker Engine not reachable yet"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            _ = tokio::time::sleep(delay) => {},
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Wait until our CRDs and CAPI's Cluster/Machine/MachinePool are served (controllers would spin otherwise).
/// Lists in `namespace` when the manager watches one: a manager bound to a Role there may not
/// list anything cluster-wide.
async fn wait_for_crds(
    client: &Client,
    namespace: Option<&str>,
    machine_pools: bool,
    shutdown: &CancellationToken,
) {
    let lp = ListParams::default().limit(1);
    fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let (dcs, dms, dmps) = (
        api::<DockerCluster>(client, namespace),
        api::<DockerMachine>(client, namespace),
        api::<DockerMachinePool>(client, namespace),
    );
    let (clusters, machines, pools) = (
        api::<Cluster>(client, namespace),
        api::<Machine>(client, namespace),
        api::<MachinePool>(client, namespace),
    );
    loop {
        // Without the MachinePool gate the pool kinds are not read: they need not be served.
        let checks = futures::join!(
            dcs.list_metadata(&lp),
            dms.list_metadata(&lp),
            async {
                if machine_pools {
                    dmps.list_metadata(&lp).await.map(drop)
                } else {
                    Ok(())
                }
            },
            clusters.list_metadata(&lp),
            machines.list_metadata(&lp),
            async {
                if machine_pools {
                    pools.list_metadata(&lp).await.map(drop)
                } else {
                    Ok(())
                }
            },
        );
        let missing: Vec<String> = [
            checks.0.err(),
            checks.1.err(),
            checks.2.err(),
            checks.3.err(),
            checks.4.err(),
            checks.5.err(),
        ]
        .into_iter()
        .flatten()
        .map(|e| e.to_string())
        .collect();
        if missing.is_empty() {
            return;
        }
        warn!(errors = ?missing, "waiting for our CRDs and CAPI's Cluster/Machine/MachinePool to be served");
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {},
        }
    }
}

/// Block until this process holds the lease. The returned future ends the process if the
/// lease is lost (fail-stop: two leaders must never reconcile at once).
async fn leader_election(
    client: &Client,
    flags: &Flags,
    timing: LeaseTiming,
    shutdown: &CancellationToken,
) -> Result<impl std::future::Future<Output = ()> + use<>, ManagerError> {
    let namespace = flags
        .leader_elect_namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("capd-rs-{}", std::process::id()));
    let manager = kube_lease_manager::LeaseManagerBuilder::new(
        client.clone(),
        &flags.leader_elect_lease_name,
    )
    .with_namespace(&namespace)
    // Checked by `Flags::lease_timing` (0 < grace < duration): the constructor panics otherwise.
    .with_parameters(kube_lease_manager::LeaseParams::new(
        identity.as_str(),
        timing.duration_secs,
        timing.grace_secs,
    ))
    .build()
    .await
    .map_err(|e| ManagerError::LeaderElection {
        what: "cannot set up the lease".into(),
        source: Some(Box::new(e)),
    })?;
    let (mut channel, task) = manager.watch().await;
    info!(lease = %flags.leader_elect_lease_name, %namespace, %identity, "waiting to become leader");
    while !*channel.borrow_and_update() {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = channel.changed() => if changed.is_err() {
                return Err(ManagerError::LeaderElection {
                    what: "lease manager stopped".into(),
                    source: None,
                });
            },
        }
    }
    info!("became leader");
    let shutdown = shutdown.clone();
    Ok(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = channel.changed() => {
                    if changed.is_err() || !*channel.borrow_and_update() {
                        error!("lost the leader lease; exiting");
                        std::process::exit(1);
                    }
                }
            }
        }
        drop(channel);
        let _ = task.await;
    })
}
