//! The only bollard adapter: [`BollardRuntime`] implements [`ContainerRuntime`] over a real Docker
//! Engine (bollard 0.21, any engine from API 1.41 on; the API version is always negotiated).
//!
//! Error classification: connection failures and 5xx are [`RuntimeError::Unavailable`], 404 is
//! [`RuntimeError::NotFound`], 409 is [`RuntimeError::Conflict`] on a create and
//! [`RuntimeError::WrongState`] elsewhere, any other 4xx is
//! [`RuntimeError::Rejected`]; pull failures are [`RuntimeError::Image`] with the engine's message
//! verbatim. Every message keeps the engine's own text, prefixed with the operation.
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::StartExecResults;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, ContainerSummary,
    ContainerSummaryStateEnum, EndpointSettings, ExecConfig, HostConfig,
    HostConfigCgroupnsModeEnum, Mount, MountType, NetworkCreateRequest, NetworkInspect,
    PortBinding, PortMap, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::{API_DEFAULT_VERSION, Docker};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Mutex, Semaphore};

use super::runtime::{
    AddressUse, BindMount, ContainerInfo, ContainerRuntime, ContainerSpec, ContainerState,
    ExecOutput, HostCapacity, NetworkSpec, NodePrivilege, RuntimeError, RuntimeResult,
};

/// Default engine socket.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// Seconds bollard waits for the response headers of one request (streams are not limited).
mod address;
mod archive;
mod convert;
mod errors;
mod exec;
mod import;
mod own_removals;

use address::Endpoint;
pub use address::EngineOptions;

use convert::{
    address_use, create_body, host_capacity, info_from_inspect, info_from_summary, unavailable_cap,
};
use errors::{chain, classify, classify_create};
pub(crate) use own_removals::OwnRemovals;

const REQUEST_TIMEOUT_SECS: u64 = 120;

/// The Docker API requests we make, for the per-operation call counters.
#[derive(Clone, Copy, Debug)]
enum Op {
    Version,
    Ping,
    NetworkList,
    NetworkCreate,
    NetworkInspect,
    ContainerInspect,
    ContainerList,
    ImageInspect,
    ImagePull,
    ContainerCreate,
    ContainerStart,
    ContainerRemove,
    ContainerKill,
    ExecCreate,
    ExecStart,
    ExecInspect,
    Info,
    ImageSave,
    PathStat,
    ArchiveGet,
    ArchivePut,
}

const OP_NAMES: [&str; 21] = [
    "version",
    "ping",
    "network_list",
    "network_create",
    "network_inspect",
    "container_inspect",
    "container_list",
    "image_inspect",
    "image_pull",
    "container_create",
    "container_start",
    "container_remove",
    "container_kill",
    "exec_create",
    "exec_start",
    "exec_inspect",
    "info",
    "image_save",
    "path_stat",
    "archive_get",
    "archive_put",
];

/// Images and networks known to exist (see [`BollardRuntime::known`]).
#[derive(Default)]
struct Known {
    images: std::collections::HashSet<String>,
    networks: std::collections::HashSet<String>,
}

/// Container removals sent to the engine at once. Engine 20.10 (Debian's) deadlocked while 50
/// containers of one network were force-removed at once (the soak, minute 16): its network
/// controller's endpoint-delete loop and the exit handlers releasing the containers' networks
/// waited on each other's locks, and every later request hung until dockerd was killed. Fewer
/// removals at once make that interleaving rarer; a cluster's 50 nodes still go in seconds.
/// Engine 26.1 did not hang with 100 at once, but it was no faster either: 100 running node
/// containers of one network went in 12.0 s (median of 3 rounds) four at a time and 15.5 s all
/// at once (`xtask removals`, docs/performance.md), since the engine does the removals' work one
/// after another (20.10, measured the same way: 8.6–9.9 s and 8.3–11.4 s). So every engine keeps
/// the cap.
const MAX_REMOVALS: usize = 4;

/// The engine answering, as it says at connect time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineVersion {
    /// The engine's own version, e.g. `26.1.5+dfsg1`.
    pub version: String,
    /// The newest API version the engine serves, e.g. `1.45`.
    pub api_version: String,
    /// The API version this client speaks with it: the older of the engine's and bollard's.
    pub negotiated: String,
}

/// A [`ContainerRuntime`] backed by a Docker Engine through bollard.
pub struct BollardRuntime {
    docker: Docker,
    /// Engine 20.10 creates a second network of the same name instead of refusing; serialize.
    network_lock: Mutex<()>,
    /// Images and networks this process found or made: a node needs both, and a hundred nodes
    /// created at once each asked the engine again (a network list under `network_lock`, one at
    /// a time). Forgotten when a create fails, in case one was removed behind our back.
    known: std::sync::Mutex<Known>,
    /// Container removals in flight, at most [`MAX_REMOVALS`].
    removals: Semaphore,
    /// Removals of ours, whose events the event stream leaves out.
    own_removals: std::sync::Arc<OwnRemovals>,
    calls: [AtomicU64; OP_NAMES.len()],
    endpoint: String,
    engine: EngineVersion,
    /// Capabilities the engine refused to drop because its environment does not offer them
    /// (see [`convert::unavailable_cap`]): left out of every later node's drop list.
    lacked_caps: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for BollardRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BollardRuntime")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl BollardRuntime {
    /// Connect to `docker_host` (a unix socket or loopback TCP; default [`DEFAULT_SOCKET`]) and
    /// negotiate the API version with the engine.
    pub async fn connect(docker_host: Option<&str>) -> Result<Self, RuntimeError> {
        Self::connect_with(&EngineOptions::host(docker_host)).await
    }

    /// Whether a network of exactly this name exists (the engine's `name` filter matches
    /// substrings).
    async fn network_exists(&self, name: &str) -> RuntimeResult<bool> {
        let filters = HashMap::from([("name", vec![name])]);
        self.count(Op::NetworkList);
        let networks = self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(|e| classify("list networks", e))?;
        Ok(networks.iter().any(|n| n.name.as_deref() == Some(name)))
    }

    /// Connect as `options` say (see [`EngineOptions`]) and negotiate the API version.
    pub async fn connect_with(options: &EngineOptions) -> Result<Self, RuntimeError> {
        let shown = options.display();
        let connected = match options.endpoint().map_err(RuntimeError::Rejected)? {
            Endpoint::Unix(path) => {
                Docker::connect_with_unix(&path, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
            }
            Endpoint::Plain(addr) => {
                Docker::connect_with_http(&addr, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
            }
            Endpoint::Tls { addr, cert_dir } => {
                for file in ["ca.pem", "cert.pem", "key.pem"] {
                    if !cert_dir.join(file).is_file() {
                        return Err(RuntimeError::Rejected(format!(
                            "TLS to {shown}: {} is missing (DOCKER_CERT_PATH must hold ca.pem, cert.pem and key.pem)",
                            cert_dir.join(file).display()
                        )));
                    }
                }
                Docker::connect_with_ssl(
                    &addr,
                    &cert_dir.join("key.pem"),
                    &cert_dir.join("cert.pem"),
                    &cert_dir.join("ca.pem"),
                    REQUEST_TIMEOUT_SECS,
                    API_DEFAULT_VERSION,
                )
            }
        };
        // Building the client touches no network: its errors are configuration errors
        // (unreadable certificates, a bad address), except a socket that is not there yet (an
        // engine still starting). The engine's answer (or silence) comes with the first request.
        let docker = connected.map_err(|e| {
            let message = format!("connect to {shown}: {}", chain(&e));
            match e {
                BollardError::SocketNotFoundError(_) => RuntimeError::Unavailable(message),
                _ => RuntimeError::Rejected(message),
            }
        })?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| classify(&format!("negotiate API version with {shown}"), e))?;
        // Negotiation reads the engine's version but keeps only the API version: ask once more,
        // at the negotiated version, for the start log and the engine info metric.
        let version = docker
            .version()
            .await
            .map_err(|e| classify(&format!("read the engine version of {shown}"), e))?;
        let engine = EngineVersion {
            version: version.version.unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            negotiated: docker.client_version().to_string(),
        };
        let runtime = Self {
            docker,
            network_lock: Mutex::new(()),
            known: std::sync::Mutex::default(),
            removals: Semaphore::new(MAX_REMOVALS),
            own_removals: std::sync::Arc::default(),
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
            endpoint: shown,
            engine,
            lacked_caps: std::sync::Mutex::default(),
        };
        runtime.count(Op::Version);
        runtime.count(Op::Version);
        Ok(runtime)
    }

    /// Whether the engine's host runs cgroup v1 (including hybrid): the kubelet in a node must
    /// then be told to accept it (kubelet 1.35 refuses cgroup v1 by default).
    pub async fn cgroup_v1(&self) -> Result<bool, RuntimeError> {
        let info = self.info().await?;
        Ok(info.cgroup_version.is_some_and(|v| v.to_string() == "1"))
    }

    /// `docker info`, counted.
    async fn info(&self) -> Result<bollard::models::SystemInfo, RuntimeError> {
        self.count(Op::Info);
        self.docker
            .info()
            .await
            .map_err(|e| classify("read engine info", e))
    }

    /// The negotiated API version, e.g. `1.41`.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    /// The engine answering, and the API version spoken with it.
    pub fn engine(&self) -> &EngineVersion {
        &self.engine
    }

    /// Docker API requests made so far, by operation name (operations never called are absent).
    pub fn call_counts(&self) -> BTreeMap<&'static str, u64> {
        OP_NAMES
            .iter()
            .zip(self.calls.iter())
            .map(|(name, n)| (*name, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// The underlying client, for the event stream in [`super::events`] (a long-lived request
    /// that the call counters do not see).
    pub(crate) fn client(&self) -> &Docker {
        &self.docker
    }

    /// The removals this runtime makes, for the event stream to leave out.
    pub(crate) fn own_removals(&self) -> std::sync::Arc<OwnRemovals> {
        self.own_removals.clone()
    }

    /// Total Docker API requests made so far.
    pub fn total_calls(&self) -> u64 {
        self.calls.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    /// All containers (any state) matching the engine-side `filters`.
    async fn list_raw(
        &self,
        filters: &HashMap<&str, Vec<&str>>,
        what: &str,
    ) -> RuntimeResult<Vec<bollard::models::ContainerSummary>> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(filters)
            .build();
        self.count(Op::ContainerList);
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(|e| classify(what, e))
    }

    fn count(&self, op: Op) {
        self.calls[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether [`Self::known`] says so.
    fn knows(&self, f: impl FnOnce(&Known) -> bool) -> bool {
        f(&self.known.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Records in [`Self::known`].
    fn learn<T>(&self, f: impl FnOnce(&mut Known) -> T) {
        f(&mut self.known.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Docker resolves a container reference by full ID, then exact name, then ID prefix, so a
    /// name made only of hex digits could hit (or be ambiguous with) other containers' IDs. Such
    /// names are first looked up by exact name; `None` means no container has that name.
    async fn reference_for(&self, name: &str) -> RuntimeResult<Option<String>> {
        let name = name.trim_start_matches('/');
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Some(name.to_string()));
        }
        let exact = format!("^/{name}$");
        let filters = HashMap::from([("name", vec![exact.as_str()])]);
        let found = self
            .list_raw(&filters, &format!("look up container {name}"))
            .await?;
        Ok(found
            .into_iter()
            .find(|c| {
                c.names
                    .iter()
                    .flatten()
                    .any(|n| n.trim_start_matches('/') == name)
            })
            .and_then(|c| c.id))
    }

    /// [`Self::reference_for`] for operations on a container that must exist.
    async fn existing_reference(&self, name: &str, op: &str) -> RuntimeResult<String> {
        self.reference_for(name).await?.ok_or_else(|| {
            RuntimeError::NotFound(format!("{op} container {name}: No such container: {name}"))
        })
    }

    async fn inspect_raw(
        &self,
        reference: &str,
    ) -> RuntimeResult<Option<ContainerInspectResponse>> {
        self.count(Op::ContainerInspect);
        match self.docker.inspect_container(reference, None).await {
            Ok(r) => Ok(Some(r)),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => Err(classify(&format!("inspect container {reference}"), e)),
        }
    }

    async fn pull(&self, image: &str) -> RuntimeResult<()> {
        let (from, tag) = split_reference(image);
        let options = CreateImageOptionsBuilder::default()
            .from_image(from)
            .tag(tag)
            .build();
        self.count(Op::ImagePull);
        let mut progress = self.docker.create_image(Some(options), None, None);
        while let Some(item) = progress.next().await {
            match item {
                Ok(_) => {}
                Err(BollardError::DockerStreamError { error }) => {
                    return Err(RuntimeError::Image {
                        image: image.to_string(),
                        message: error,
                    });
                }
                Err(BollardError::DockerResponseServerError { message, .. }) => {
                    return Err(RuntimeError::Image {
                        image: image.to_string(),
                        message,
                    });
                }
                Err(e) => return Err(classify(&format!("pull image {image}"), e)),
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ContainerRuntime for BollardRuntime {
    async fn ping(&self) -> RuntimeResult<()> {
        self.count(Op::Ping);
        self.docker
            .ping()
            .await
            .map(|_| ())
            .map_err(|e| classify("ping", e))
    }

    async fn host_capacity(&self) -> RuntimeResult<HostCapacity> {
        let info = self.info().await?;
        host_capacity(info.ncpu, info.mem_total)
    }

    async fn ensure_network(&self, spec: &NetworkSpec) -> RuntimeResult<()> {
        if self.knows(|k| k.networks.contains(&spec.name)) {
            return Ok(());
        }
        let _serialized = self.network_lock.lock().await;
        if self.network_exists(&spec.name).await? {
            self.learn(|k| k.networks.insert(spec.name.clone()));
            return Ok(());
        }
        let request = NetworkCreateRequest {
            name: spec.name.clone(),
            driver: Some("bridge".into()),
            labels: Some(
                spec.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            options: Some(HashMap::from([(
                "com.docker.network.bridge.enable_ip_masquerade".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        };
        self.count(Op::NetworkCreate);
        match self.docker.create_network(request).await {
            Ok(_) => {}
            // An engine from API 1.44 on refuses a second network of a name (409): another
            // process created it since we listed, and it is the one to join.
            Err(e) => match classify_create(&format!("create network {}", spec.name), e) {
                RuntimeError::Conflict(_) => {}
                // Podman before 4.5 answers that with 500 ("network name ... already used:
                // network already exists"): whatever the status, a network of the name that
                // exists now is the one to join.
                other => {
                    if !self.network_exists(&spec.name).await.unwrap_or(false) {
                        return Err(other);
                    }
                }
            },
        }
        self.learn(|k| k.networks.insert(spec.name.clone()));
        Ok(())
    }

    async fn address_use(&self, network: &str, address: IpAddr) -> RuntimeResult<AddressUse> {
        self.count(Op::NetworkInspect);
        match self.docker.inspect_network(network, None).await {
            Ok(n) => Ok(address_use(n, address)),
            Err(e) => match classify(&format!("inspect network {network}"), e) {
                RuntimeError::NotFound(_) => Ok(AddressUse::OffNetwork),
                other => Err(other),
            },
        }
    }

    async fn inspect(&self, name: &str) -> RuntimeResult<Option<ContainerInfo>> {
        let Some(reference) = self.reference_for(name).await? else {
            return Ok(None);
        };
        Ok(self
            .inspect_raw(&reference)
            .await?
            .map(info_from_inspect)
            // Reject an ID-prefix match of some other container.
            .filter(|info| info.name == name.trim_start_matches('/') || info.id == name))
    }

    async fn list(&self, labels: &BTreeMap<String, String>) -> RuntimeResult<Vec<ContainerInfo>> {
        let selectors: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let filters = HashMap::from([("label", selectors.iter().map(String::as_str).collect())]);
        let found = self.list_raw(&filters, "list containers").await?;
        let mut infos: Vec<ContainerInfo> = found.into_iter().map(info_from_summary).collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(infos)
    }

    async fn ensure_image(&self, image: &str) -> RuntimeResult<()> {
        if self.knows(|k| k.images.contains(image)) {
            return Ok(());
        }
        self.count(Op::ImageInspect);
        match self.docker.inspect_image(image).await {
            Ok(_) => {}
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => self.pull(image).await?,
            Err(e) => return Err(classify(&format!("inspect image {image}"), e)),
        }
        self.learn(|k| k.images.insert(image.to_string()));
        Ok(())
    }

    async fn create_and_start(&self, spec: &ContainerSpec) -> RuntimeResult<ContainerInfo> {
        let mut spec = std::borrow::Cow::Borrowed(spec);
        let lacked = self
            .lacked_caps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(privilege) = convert::without_caps(&spec.privilege, &lacked) {
            spec.to_mut().privilege = privilege;
        }
        let created = loop {
            let options = CreateContainerOptionsBuilder::default()
                .name(&spec.name)
                .build();
            self.count(Op::ContainerCreate);
            match self
                .docker
                .create_container(Some(options), create_body(&spec))
                .await
            {
                Ok(created) => break created,
                Err(e) => {
                    let err = classify_create(&format!("create container {}", spec.name), e);
                    // An engine from API 1.4x on leaves a capability the host lacks out of
                    // "ALL" by itself, and refuses to drop one it does not know: asking it not
                    // to add one it would not add changes nothing, so ask again without it.
                    match unavailable_cap(&spec.privilege, &err) {
                        Some(cap) => {
                            tracing::debug!(container = %spec.name, error = %err,
                                "the engine lacks a capability to drop; creating without dropping it");
                            let lacked = std::slice::from_ref(&cap);
                            if let Some(p) = convert::without_caps(&spec.privilege, lacked) {
                                spec.to_mut().privilege = p;
                            }
                            // Learned once per engine: the next nodes are created at once.
                            self.lacked_caps
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(cap);
                        }
                        None => {
                            // The image or the network may be gone: look again next time.
                            self.learn(|k| *k = Known::default());
                            return Err(err);
                        }
                    }
                }
            }
        };
        let spec = spec.as_ref();

        self.count(Op::ContainerStart);
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let err = classify(&format!("start container {}", spec.name), e);
            // A network removed behind our back (`docker network prune`) lets the create
            // through and fails the start: forget what we knew, or every next attempt would
            // skip making it again and fail the same way.
            if matches!(err, RuntimeError::NotFound(_)) {
                self.learn(|k| *k = Known::default());
            }
            // Remove it so the next attempt starts clean (e.g. "port is already allocated"),
            // quietly: the owner retries on the error's backoff, not on the `destroy` event.
            self.count(Op::ContainerRemove);
            let remove = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            self.own_removals.note(&spec.name);
            if let Err(re) = self
                .docker
                .remove_container(&created.id, Some(remove))
                .await
            {
                self.own_removals.forget(&spec.name);
                tracing::warn!(container = %spec.name, error = %chain(&re), "removing a container that failed to start");
            }
            return Err(err);
        }

        match self.inspect_raw(&created.id).await? {
            Some(r) => Ok(info_from_inspect(r)),
            None => Err(RuntimeError::NotFound(format!(
                "container {} disappeared right after it was started",
                spec.name
            ))),
        }
    }

    async fn start(&self, name: &str) -> RuntimeResult<()> {
        let reference = self.existing_reference(name, "start").await?;
        self.count(Op::ContainerStart);
        self.docker
            .start_container(&reference, None)
            .await
            .map_err(|e| classify(&format!("start container {name}"), e))
    }

    async fn remove(&self, name: &str) -> RuntimeResult<()> {
        let Some(reference) = self.reference_for(name).await? else {
            return Ok(());
        };
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        // Never closed: the semaphore lives as long as the runtime.
        let _slot = self.removals.acquire().await;
        self.count(Op::ContainerRemove);
        self.own_removals.note(name);
        let removed = self
            .docker
            .remove_container(&reference, Some(options))
            .await;
        if removed.is_err() {
            self.own_removals.forget(name);
        }
        match removed {
            // 409: a removal of it is under way already (ours or someone's `docker rm`).
            Ok(())
            | Err(BollardError::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(classify(&format!("remove container {name}"), e)),
        }
    }

    async fn exec(
        &self,
        name: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> RuntimeResult<ExecOutput> {
        let reference = self.existing_reference(name, "exec in").await?;
        self.run_exec(&reference, argv, stdin).await
    }

    async fn file_exists(&self, name: &str, path: &str) -> RuntimeResult<bool> {
        let reference = self
            .existing_reference(name, &format!("stat {path} in"))
            .await?;
        self.count(Op::PathStat);
        let options = bollard::query_parameters::ContainerArchiveInfoOptionsBuilder::default()
            .path(path)
            .build();
        match self
            .docker
            .get_container_archive_info(&reference, Some(options))
            .await
        {
            Ok(_) => Ok(true),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(classify(&format!("stat {path} in container {name}"), e)),
        }
    }

    async fn read_file(
        &self,
        name: &str,
        path: &str,
        limit: u64,
    ) -> RuntimeResult<Option<Vec<u8>>> {
        let reference = self
            .existing_reference(name, &format!("read {path} in"))
            .await?;
        self.read_file_archive(&reference, name, path, limit).await
    }

    async fn write_file(&self, name: &str, path: &str, content: &[u8]) -> RuntimeResult<()> {
        let reference = self
            .existing_reference(name, &format!("write {path} in"))
            .await?;
        self.write_file_archive(&reference, name, path, content)
            .await
    }

    async fn kill(&self, name: &str, signal: &str) -> RuntimeResult<()> {
        let reference = self.existing_reference(name, "kill").await?;
        let options = KillContainerOptionsBuilder::default()
            .signal(signal)
            .build();
        self.count(Op::ContainerKill);
        self.docker
            .kill_container(&reference, Some(options))
            .await
            .map_err(|e| classify(&format!("kill container {name} with {signal}"), e))
    }

    async fn image_present(&self, image: &str) -> RuntimeResult<bool> {
        if self.knows(|k| k.images.contains(image)) {
            return Ok(true);
        }
        self.count(Op::ImageInspect);
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(classify(&format!("inspect image {image}"), e)),
        }
    }

    async fn import_image(
        &self,
        name: &str,
        image: &str,
        argv: &[String],
    ) -> RuntimeResult<ExecOutput> {
        let reference = self
            .existing_reference(name, "import an image into")
            .await?;
        self.run_import(&reference, image, argv).await
    }
}

/// `name[:tag]` or `name@digest` → (`name`, tag-or-digest), `latest` when neither is given (an
/// empty tag would make the engine pull every tag of the repository).
fn split_reference(image: &str) -> (&str, &str) {
    let r = super::image::ImageRef::parse(image);
    (r.name, r.digest.or(r.tag).unwrap_or("latest"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_for_pull() {
        assert_eq!(
            split_reference("kindest/haproxy:v1"),
            ("kindest/haproxy", "v1")
        );
        assert_eq!(split_reference("reg:5000/a/b"), ("reg:5000/a/b", "latest"));
        assert_eq!(split_reference("reg:5000/a/b:t"), ("reg:5000/a/b", "t"));
        assert_eq!(split_reference("a@sha256:00"), ("a", "sha256:00"));
        assert_eq!(split_reference("busybox"), ("busybox", "latest"));
    }
}
