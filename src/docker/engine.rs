//! The only bollard adapter: [`BollardRuntime`] implements [`ContainerRuntime`] over a real Docker
//! Engine (bollard 0.21, any engine from API 1.41 on; the API version is always negotiated).
//!
//! Error classification: connection failures and 5xx are [`RuntimeError::Unavailable`], 404 is
//! [`RuntimeError::NotFound`], 409 is [`RuntimeError::Conflict`], any other 4xx is
//! [`RuntimeError::Rejected`]; pull failures are [`RuntimeError::Image`] with the engine's message
//! verbatim. Every message keeps the engine's own text, prefixed with the operation.
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::StartExecResults;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, ContainerSummary,
    ContainerSummaryStateEnum, EndpointSettings, ExecConfig, HostConfig,
    HostConfigCgroupnsModeEnum, NetworkCreateRequest, PortBinding, PortMap, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::{API_DEFAULT_VERSION, Docker};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use super::runtime::{
    ContainerInfo, ContainerRuntime, ContainerSpec, ContainerState, ExecOutput, NetworkSpec,
    NodePrivilege, RuntimeError, RuntimeResult,
};

/// Default engine socket.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// Seconds bollard waits for the response headers of one request (streams are not limited).
const REQUEST_TIMEOUT_SECS: u64 = 120;

/// The Docker API requests we make, for the per-operation call counters.
#[derive(Clone, Copy, Debug)]
enum Op {
    Version,
    Ping,
    NetworkList,
    NetworkCreate,
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
}

const OP_NAMES: [&str; 17] = [
    "version",
    "ping",
    "network_list",
    "network_create",
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
];

/// A [`ContainerRuntime`] backed by a Docker Engine through bollard.
pub struct BollardRuntime {
    docker: Docker,
    /// The engine creates a second network of the same name instead of refusing; serialize.
    network_lock: Mutex<()>,
    calls: [AtomicU64; OP_NAMES.len()],
    endpoint: String,
}

impl std::fmt::Debug for BollardRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BollardRuntime")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl BollardRuntime {
    /// Connect to `docker_host` (`unix:///path`, `/path`, `tcp://host:port` or `http://host:port`;
    /// default [`DEFAULT_SOCKET`]) and negotiate the API version with the engine.
    pub async fn connect(docker_host: Option<&str>) -> Result<Self, RuntimeError> {
        let host = docker_host
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .unwrap_or(DEFAULT_SOCKET);
        let connected = if host.starts_with("unix://") || host.starts_with('/') {
            Docker::connect_with_unix(host, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
        } else if host.starts_with("tcp://") || host.starts_with("http://") {
            Docker::connect_with_http(host, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
        } else {
            return Err(RuntimeError::Rejected(format!(
                "unsupported docker host {host:?}: expected unix://, tcp:// or http://"
            )));
        };
        let docker = connected
            .map_err(|e| RuntimeError::Unavailable(format!("connect to {host}: {}", chain(&e))))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| classify(&format!("negotiate API version with {host}"), e))?;
        let runtime = Self {
            docker,
            network_lock: Mutex::new(()),
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
            endpoint: host.to_string(),
        };
        runtime.count(Op::Version);
        Ok(runtime)
    }

    /// Whether the engine's host runs cgroup v1 (including hybrid): the kubelet in a node must
    /// then be told to accept it (kubelet 1.35 refuses cgroup v1 by default).
    pub async fn cgroup_v1(&self) -> Result<bool, RuntimeError> {
        self.count(Op::Info);
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| classify("read engine info", e))?;
        Ok(info.cgroup_version.is_some_and(|v| v.to_string() == "1"))
    }

    /// The negotiated API version, e.g. `1.41`.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
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

    async fn run_exec(
        &self,
        name: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> RuntimeResult<ExecOutput> {
        // Only the program name: arguments may carry bootstrap secrets, and this text ends up
        // in errors, logs and conditions.
        let program = argv.first().map(String::as_str).unwrap_or("");
        let what = || format!("exec {program} in {name}");
        let config = ExecConfig {
            attach_stdin: Some(stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            cmd: Some(argv.to_vec()),
            ..Default::default()
        };
        self.count(Op::ExecCreate);
        let id = self
            .docker
            .create_exec(name, config)
            .await
            .map_err(|e| classify(&what(), e))?
            .id;

        self.count(Op::ExecStart);
        let started = self
            .docker
            .start_exec(&id, None)
            .await
            .map_err(|e| classify(&what(), e))?;
        let (mut output, mut input) = match started {
            StartExecResults::Attached { output, input } => (output, input),
            StartExecResults::Detached => {
                return Err(RuntimeError::Unavailable(format!(
                    "{}: the engine did not attach the exec",
                    what()
                )));
            }
        };

        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        // Feed stdin while draining the output, so neither side can block the other.
        let writer = async {
            if let Some(data) = stdin {
                input.write_all(data).await?;
                input.flush().await?;
                input.shutdown().await?;
            }
            Ok::<(), std::io::Error>(())
        };
        let reader = async {
            while let Some(chunk) = output.next().await {
                match chunk? {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        stdout.extend_from_slice(&message)
                    }
                    LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                    LogOutput::StdIn { .. } => {}
                }
            }
            Ok::<(), BollardError>(())
        };
        // When the output ends the process is gone. A write still pending then would block until
        // the engine drops the connection (about two minutes), so it is abandoned instead.
        let (written, read) = {
            let mut writer = std::pin::pin!(writer);
            let mut reader = std::pin::pin!(reader);
            let mut written = None;
            let read = loop {
                tokio::select! {
                    w = &mut writer, if written.is_none() => written = Some(w),
                    r = &mut reader => break r,
                }
            };
            let written = written.unwrap_or_else(|| {
                Err(std::io::Error::other(format!(
                    "the command ended before reading all of its {}-byte input",
                    stdin.map_or(0, <[u8]>::len)
                )))
            });
            (written, read)
        };
        drop(input);
        read.map_err(|e| classify(&format!("{}: reading output", what()), e))?;

        let exit_code = self.wait_exec(&id, &what()).await?;
        if let Err(e) = written {
            // A process that exits early closes its stdin; its exit code then tells the story.
            // With a zero exit code, though, it may have consumed a truncated input.
            if exit_code == 0 {
                return Err(RuntimeError::Unavailable(format!(
                    "{}: writing stdin: {e}",
                    what()
                )));
            }
        }
        Ok(ExecOutput {
            exit_code,
            stdout,
            stderr,
        })
    }

    /// The output stream has ended; the engine may take a moment to record the exit code.
    async fn wait_exec(&self, id: &str, what: &str) -> RuntimeResult<i64> {
        let mut delay = Duration::from_millis(5);
        for _ in 0..100 {
            self.count(Op::ExecInspect);
            let state = self
                .docker
                .inspect_exec(id)
                .await
                .map_err(|e| classify(what, e))?;
            if state.running != Some(true) {
                return Ok(state.exit_code.unwrap_or(-1));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(250));
        }
        Err(RuntimeError::Unavailable(format!(
            "{what}: still running after its output closed"
        )))
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

    async fn ensure_network(&self, spec: &NetworkSpec) -> RuntimeResult<()> {
        let _serialized = self.network_lock.lock().await;
        // The `name` filter matches substrings; compare exactly.
        let filters = HashMap::from([("name", vec![spec.name.as_str()])]);
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
        if networks
            .iter()
            .any(|n| n.name.as_deref() == Some(spec.name.as_str()))
        {
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
        self.docker
            .create_network(request)
            .await
            .map(|_| ())
            .map_err(|e| classify(&format!("create network {}", spec.name), e))
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
        self.count(Op::ImageInspect);
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(()),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => self.pull(image).await,
            Err(e) => Err(classify(&format!("inspect image {image}"), e)),
        }
    }

    async fn create_and_start(&self, spec: &ContainerSpec) -> RuntimeResult<ContainerInfo> {
        let options = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        self.count(Op::ContainerCreate);
        let created = self
            .docker
            .create_container(Some(options), create_body(spec))
            .await
            .map_err(|e| classify(&format!("create container {}", spec.name), e))?;

        self.count(Op::ContainerStart);
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let err = classify(&format!("start container {}", spec.name), e);
            // Remove it so the next attempt starts clean (e.g. "port is already allocated").
            self.count(Op::ContainerRemove);
            let remove = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            if let Err(re) = self
                .docker
                .remove_container(&created.id, Some(remove))
                .await
            {
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
        self.count(Op::ContainerRemove);
        match self
            .docker
            .remove_container(&reference, Some(options))
            .await
        {
            Ok(())
            | Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
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

    async fn save_image(&self, image: &str) -> RuntimeResult<Vec<u8>> {
        self.count(Op::ImageSave);
        let mut stream = self.docker.export_image(image);
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| match classify(&format!("save image {image}"), e) {
                // The engine answers a missing image with 404: say which image.
                RuntimeError::NotFound(m) => RuntimeError::Image {
                    image: image.to_string(),
                    message: m,
                },
                other => other,
            })?;
            tar.extend_from_slice(&chunk);
        }
        Ok(tar)
    }
}

/// The error and its sources, joined (hyper hides the useful part in the source chain).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// Map a bollard error onto our classes; `what` names the operation.
fn classify(what: &str, err: BollardError) -> RuntimeError {
    match err {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => {
            let text = format!("{what}: {message}");
            match status_code {
                404 => RuntimeError::NotFound(text),
                409 => RuntimeError::Conflict(text),
                400..=499 => RuntimeError::Rejected(text),
                _ => RuntimeError::Unavailable(text),
            }
        }
        other => RuntimeError::Unavailable(format!("{what}: {}", chain(&other))),
    }
}

/// `name[:tag]` or `name@digest` → (`name`, tag-or-digest), `latest` when neither is given (an
/// empty tag would make the engine pull every tag of the repository).
fn split_reference(image: &str) -> (&str, &str) {
    let r = super::image::ImageRef::parse(image);
    (r.name, r.digest.or(r.tag).unwrap_or("latest"))
}

fn create_body(spec: &ContainerSpec) -> ContainerCreateBody {
    let mut port_bindings: PortMap = HashMap::new();
    let mut exposed: Vec<String> = Vec::new();
    for p in &spec.ports {
        let binding = PortBinding {
            host_ip: Some(p.host_ip.clone()),
            // An empty HostPort lets the engine pick a free port.
            host_port: Some(p.host_port.map(|n| n.to_string()).unwrap_or_default()),
        };
        port_bindings
            .entry(p.container_port.clone())
            .or_insert_with(|| Some(Vec::new()))
            .get_or_insert_with(Vec::new)
            .push(binding);
        if !exposed.contains(&p.container_port) {
            exposed.push(p.container_port.clone());
        }
    }

    let mut host = HostConfig {
        network_mode: Some(spec.network.clone()),
        binds: (!spec.binds.is_empty()).then(|| spec.binds.clone()),
        tmpfs: (!spec.tmpfs.is_empty()).then(|| {
            spec.tmpfs
                .iter()
                .map(|t| (t.clone(), String::new()))
                .collect()
        }),
        security_opt: (!spec.security_opt.is_empty()).then(|| spec.security_opt.clone()),
        sysctls: (!spec.sysctls.is_empty()).then(|| {
            spec.sysctls
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }),
        port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
        cgroupns_mode: spec
            .cgroupns_private
            .then_some(HostConfigCgroupnsModeEnum::PRIVATE),
        restart_policy: spec.restart_on_failure.map(|n| RestartPolicy {
            name: Some(RestartPolicyNameEnum::ON_FAILURE),
            maximum_retry_count: Some(n),
        }),
        init: Some(false),
        ..Default::default()
    };
    match &spec.privilege {
        NodePrivilege::Privileged => host.privileged = Some(true),
        NodePrivilege::AllCapabilities { drop } => {
            host.cap_add = Some(vec!["ALL".to_string()]);
            host.cap_drop = (!drop.is_empty()).then(|| drop.clone());
            host.device_cgroup_rules = Some(vec!["a *:* rwm".to_string()]);
        }
        NodePrivilege::None => {}
    }

    ContainerCreateBody {
        hostname: (!spec.hostname.is_empty()).then(|| spec.hostname.clone()),
        image: Some(spec.image.clone()),
        labels: Some(
            spec.labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        env: (!spec.env.is_empty()).then(|| spec.env.clone()),
        entrypoint: spec.entrypoint.clone(),
        cmd: spec.cmd.clone(),
        tty: Some(spec.tty),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        volumes: (!spec.volumes.is_empty()).then(|| spec.volumes.clone()),
        host_config: Some(host),
        ..Default::default()
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// The endpoint on the network named by the container's network mode, else the first by name.
fn pick_network<'a>(
    networks: Option<&'a HashMap<String, EndpointSettings>>,
    mode: Option<&str>,
) -> Option<&'a EndpointSettings> {
    let networks = networks?;
    if let Some(endpoint) = mode.and_then(|m| networks.get(m)) {
        return Some(endpoint);
    }
    networks.iter().min_by(|a, b| a.0.cmp(b.0)).map(|(_, e)| e)
}

/// Container states as the engine spells them (inspect and list use separate enums with the
/// same strings).
fn state_from_str(s: &str) -> Option<ContainerState> {
    Some(match s {
        "" => return None,
        "created" => ContainerState::Created,
        "running" => ContainerState::Running,
        "paused" => ContainerState::Paused,
        "restarting" => ContainerState::Restarting,
        "removing" => ContainerState::Removing,
        "exited" => ContainerState::Exited,
        "dead" => ContainerState::Dead,
        _ => ContainerState::Unknown,
    })
}

fn state_from_inspect(s: ContainerStateStatusEnum) -> Option<ContainerState> {
    state_from_str(s.as_ref())
}

fn state_from_summary(s: ContainerSummaryStateEnum) -> Option<ContainerState> {
    state_from_str(s.as_ref())
}

fn host_ports_from_map(ports: Option<&PortMap>) -> BTreeMap<String, u16> {
    let mut out = BTreeMap::new();
    for (key, bindings) in ports.into_iter().flatten() {
        let port = bindings
            .iter()
            .flatten()
            .find_map(|b| b.host_port.as_deref().and_then(|p| p.parse::<u16>().ok()));
        if let Some(port) = port {
            out.insert(key.clone(), port);
        }
    }
    out
}

fn info_from_inspect(r: ContainerInspectResponse) -> ContainerInfo {
    let mode = r.host_config.as_ref().and_then(|h| h.network_mode.clone());
    let settings = r.network_settings.as_ref();
    let endpoint = pick_network(settings.and_then(|s| s.networks.as_ref()), mode.as_deref());
    let config = r.config.as_ref();
    ContainerInfo {
        id: r.id.clone().unwrap_or_default(),
        name: r
            .name
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_string(),
        image: config
            .and_then(|c| c.image.clone())
            .or_else(|| r.image.clone())
            .unwrap_or_default(),
        state: r
            .state
            .as_ref()
            .and_then(|s| s.status)
            .and_then(state_from_inspect),
        labels: config
            .and_then(|c| c.labels.as_ref())
            .map(|l| l.clone().into_iter().collect())
            .unwrap_or_default(),
        ipv4: endpoint.and_then(|e| non_empty(e.ip_address.clone())),
        ipv6: endpoint.and_then(|e| non_empty(e.global_ipv6_address.clone())),
        host_ports: host_ports_from_map(settings.and_then(|s| s.ports.as_ref())),
    }
}

fn info_from_summary(s: ContainerSummary) -> ContainerInfo {
    let mode = s.host_config.as_ref().and_then(|h| h.network_mode.clone());
    let endpoint = pick_network(
        s.network_settings
            .as_ref()
            .and_then(|n| n.networks.as_ref()),
        mode.as_deref(),
    );
    let mut host_ports = BTreeMap::new();
    for p in s.ports.iter().flatten() {
        if let Some(public) = p.public_port {
            let proto = p
                .typ
                .map(|t| t.to_string())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "tcp".into());
            host_ports
                .entry(format!("{}/{proto}", p.private_port))
                .or_insert(public);
        }
    }
    ContainerInfo {
        id: s.id.clone().unwrap_or_default(),
        name: s
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_default(),
        image: s.image.clone().unwrap_or_default(),
        state: s.state.and_then(state_from_summary),
        labels: s
            .labels
            .map(|l| l.into_iter().collect())
            .unwrap_or_default(),
        ipv4: endpoint.and_then(|e| non_empty(e.ip_address.clone())),
        ipv6: endpoint.and_then(|e| non_empty(e.global_ipv6_address.clone())),
        host_ports,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::runtime::PortPublish;

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

    #[test]
    fn classification() {
        let e = |status_code| BollardError::DockerResponseServerError {
            status_code,
            message: "engine says".into(),
        };
        assert!(
            matches!(classify("op", e(404)), RuntimeError::NotFound(m) if m == "op: engine says")
        );
        assert!(matches!(classify("op", e(409)), RuntimeError::Conflict(_)));
        assert!(matches!(classify("op", e(400)), RuntimeError::Rejected(_)));
        assert!(
            matches!(classify("op", e(500)), RuntimeError::Unavailable(m) if m.contains("engine says"))
        );
        assert!(matches!(
            classify("op", BollardError::RequestTimeoutError),
            RuntimeError::Unavailable(_)
        ));
    }

    fn spec(privilege: NodePrivilege) -> ContainerSpec {
        ContainerSpec {
            name: "n".into(),
            hostname: "n".into(),
            image: "i".into(),
            labels: BTreeMap::from([("k".to_string(), "v".to_string())]),
            env: vec![],
            entrypoint: None,
            cmd: None,
            network: "kind".into(),
            ports: vec![
                PortPublish {
                    container_port: "6443/tcp".into(),
                    host_ip: "0.0.0.0".into(),
                    host_port: None,
                },
                PortPublish {
                    container_port: "6443/tcp".into(),
                    host_ip: "::".into(),
                    host_port: Some(7000),
                },
            ],
            tmpfs: vec!["/tmp".into()],
            volumes: vec!["/var".into()],
            binds: vec![],
            privilege,
            security_opt: vec![],
            sysctls: BTreeMap::new(),
            cgroupns_private: true,
            tty: true,
            restart_on_failure: Some(1),
        }
    }

    #[test]
    fn create_body_maps_the_spec() {
        let body = create_body(&spec(NodePrivilege::AllCapabilities {
            drop: vec!["SYS_RESOURCE".into()],
        }));
        let host = body.host_config.clone().unwrap();
        assert_eq!(host.cap_add, Some(vec!["ALL".to_string()]));
        assert_eq!(host.cap_drop, Some(vec!["SYS_RESOURCE".to_string()]));
        assert_eq!(
            host.device_cgroup_rules,
            Some(vec!["a *:* rwm".to_string()])
        );
        assert_eq!(host.privileged, None);
        assert_eq!(
            host.cgroupns_mode,
            Some(HostConfigCgroupnsModeEnum::PRIVATE)
        );
        assert_eq!(host.network_mode.as_deref(), Some("kind"));
        let bindings = host.port_bindings.unwrap()["6443/tcp"].clone().unwrap();
        assert_eq!(bindings.len(), 2);
        assert_eq!(bindings[0].host_port.as_deref(), Some(""));
        assert_eq!(bindings[1].host_port.as_deref(), Some("7000"));
        assert_eq!(body.exposed_ports, Some(vec!["6443/tcp".to_string()]));
        assert_eq!(host.tmpfs.unwrap()["/tmp"], "");
        assert_eq!(host.restart_policy.unwrap().maximum_retry_count, Some(1));
        // The wire form the engine expects for anonymous volumes and exposed ports.
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(json["Volumes"], serde_json::json!({"/var": {}}));
        assert_eq!(json["ExposedPorts"], serde_json::json!({"6443/tcp": {}}));
        assert!(json.get("Entrypoint").is_none());

        let privileged = create_body(&spec(NodePrivilege::Privileged))
            .host_config
            .unwrap();
        assert_eq!(privileged.privileged, Some(true));
        assert_eq!(privileged.cap_add, None);
    }

    #[test]
    fn network_choice_prefers_network_mode() {
        let ep = |ip: &str| EndpointSettings {
            ip_address: Some(ip.into()),
            ..Default::default()
        };
        let nets = HashMap::from([
            ("a".to_string(), ep("10.0.0.1")),
            ("kind".to_string(), ep("172.18.0.2")),
        ]);
        assert_eq!(
            pick_network(Some(&nets), Some("kind"))
                .unwrap()
                .ip_address
                .as_deref(),
            Some("172.18.0.2")
        );
        assert_eq!(
            pick_network(Some(&nets), Some("default"))
                .unwrap()
                .ip_address
                .as_deref(),
            Some("10.0.0.1")
        );
        assert!(pick_network(None, None).is_none());
    }
}
