//! The container-runtime port: what the controllers need from a Docker Engine, in our own types.
use std::{collections::BTreeMap, net::IpAddr};

use async_trait::async_trait;

/// Errors from the container runtime, classified so controllers can decide what to do.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine could not be reached or answered 5xx: transient, back off and retry.
    #[error("docker engine unavailable: {0}")]
    Unavailable(String),
    /// The object does not exist (404).
    #[error("not found: {0}")]
    NotFound(String),
    /// A container (or network) with this name already exists (409 on create).
    #[error("name already in use: {0}")]
    Conflict(String),
    /// The object's state does not allow the request (409 on anything but a create): a
    /// container being removed, paused, or not running for an exec. Often over by the next try.
    #[error("not in a state that allows it: {0}")]
    WrongState(String),
    /// The image is not present locally and could not be pulled; the message is the engine's.
    #[error("image {image} unavailable: {message}")]
    Image { image: String, message: String },
    /// The engine refused the request (4xx other than 404/409); retrying unchanged will not help.
    #[error("docker engine refused the request: {0}")]
    Rejected(String),
}

pub type RuntimeResult<T> = Result<T, RuntimeError>;

/// What a network says about one address ([`ContainerRuntime::address_use`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddressUse {
    /// In none of the network's subnets (or no such network).
    OffNetwork,
    Free,
    /// Held by the endpoint of this name (its container's).
    HeldBy(String),
}

/// Lifecycle state of a container as reported by `docker inspect` / `docker ps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Paused,
    Restarting,
    Removing,
    Exited,
    Dead,
    Unknown,
}

/// What we know about an existing container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerInfo {
    pub id: String,
    /// Name without the leading `/`.
    pub name: String,
    pub image: String,
    pub state: Option<ContainerState>,
    pub labels: BTreeMap<String, String>,
    /// IPv4 address on the container's network (the named network if present, else the first one).
    pub ipv4: Option<String>,
    pub ipv6: Option<String>,
    /// Names of the networks the container is attached to (adoption checks the cluster's).
    pub networks: Vec<String>,
    /// Published ports: key like `6443/tcp`, value the host port.
    pub host_ports: BTreeMap<String, u16>,
    /// The main process's exit code after it last stopped (inspect only; 0 before any stop).
    pub exit_code: Option<i64>,
    /// When the container last started and last stopped (inspect only; `None` when never).
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl ContainerInfo {
    pub fn is_running(&self) -> bool {
        self.state == Some(ContainerState::Running)
    }

    /// Running, paused or restarting: the container (and the node in it) still exists and must
    /// not be replaced. Docker itself reports `State.Running` for all three, and upstream CAPD
    /// goes by that flag.
    pub fn is_alive(&self) -> bool {
        matches!(
            self.state,
            Some(ContainerState::Running | ContainerState::Paused | ContainerState::Restarting)
        )
    }

    /// Being removed (`docker rm` is under way): as good as gone. Never start it: Engine 20.10
    /// then refuses ("marked for removal") and keeps the container's address allocated, so a
    /// load balancer created in its place got another one (a CI run of the fault matrix).
    pub fn is_being_removed(&self) -> bool {
        self.state == Some(ContainerState::Removing)
    }

    /// How long the container ran before it last stopped, when the engine says both times (a
    /// container that ran long enough before dying is not in a crash loop).
    pub fn ran_for(&self) -> Option<std::time::Duration> {
        let (start, end) = (self.started_at?, self.finished_at?);
        (end - start).to_std().ok()
    }
}

/// How a node container gets the privileges a kind-style node needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodePrivilege {
    /// `--privileged`, as upstream CAPD does.
    Privileged,
    /// For hosts that refuse `--privileged`: every capability except `drop`, seccomp and apparmor
    /// unconfined, and the device cgroup rule `a *:* rwm`.
    AllCapabilities { drop: Vec<String> },
    /// No extra privileges (the load balancer).
    None,
}

/// A port to publish on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortPublish {
    /// e.g. `6443/tcp`.
    pub container_port: String,
    /// `0.0.0.0`, `::` or `127.0.0.1`.
    pub host_ip: String,
    /// `None` lets the engine choose a free port.
    pub host_port: Option<u16>,
}

/// Everything needed to create a container. Built by the pure functions in [`super::specs`].
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerSpec {
    pub name: String,
    pub hostname: String,
    pub image: String,
    pub labels: BTreeMap<String, String>,
    pub env: Vec<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// Network name to attach to.
    pub network: String,
    pub ports: Vec<PortPublish>,
    /// Mount points for tmpfs (`/tmp`, `/run`).
    pub tmpfs: Vec<String>,
    /// Anonymous volumes (`/var`).
    pub volumes: Vec<String>,
    /// Host paths bind-mounted into the container.
    pub mounts: Vec<BindMount>,
    pub privilege: NodePrivilege,
    pub security_opt: Vec<String>,
    pub sysctls: BTreeMap<String, String>,
    pub cgroupns_private: bool,
    pub tty: bool,
    /// Restart policy `on-failure` with this many retries; `None` for no restart policy.
    pub restart_on_failure: Option<i64>,
}

/// A host path bind-mounted into a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindMount {
    pub host_path: String,
    pub container_path: String,
    pub read_only: bool,
    /// `false` (paths a user named): the engine gets a structured mount, never a
    /// `host:container[:options]` string, so a `:` or `,` in a path cannot add options, and a
    /// missing host path is an error rather than a root-owned directory the engine creates.
    /// `true` (fixed paths the manager chooses, e.g. `/lib/modules`, missing on some hosts):
    /// the engine creates the host path when missing, as kind's nodes expect.
    pub create_host_path: bool,
}

/// A bridge network the provider attaches containers to.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkSpec {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// Result of running a command inside a container. Each stream holds at most its last
/// [`EXEC_OUTPUT_TAIL`](super::tail::EXEC_OUTPUT_TAIL) bytes: output is bounded whatever the
/// command prints (read a file larger than that some other way).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecOutput {
    pub exit_code: i64,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }
}

/// Something happened to one of our containers (it died, stopped, was removed): its action and
/// the container's labels (event attributes carry them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerEvent {
    pub action: String,
    pub labels: BTreeMap<String, String>,
}

/// What the engine's event stream reports.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEvent {
    /// One of our containers died, stopped or was removed, other than by a removal of this
    /// process.
    Container(ContainerEvent),
    /// The engine answers again after the stream broke (a restarted engine): whatever happened
    /// meanwhile was not reported, and every container stopped with an engine restart.
    Reconnected,
}

/// What the engine's host offers (`docker info`: `NCPU`, `MemTotal`): the capacity a machine
/// template reports, since every node container shares that host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCapacity {
    pub cpus: u64,
    pub memory_bytes: u64,
}

/// The operations the controllers need from a container engine.
#[async_trait]
pub trait ContainerRuntime: Send + Sync {
    /// Cheap liveness check of the engine.
    async fn ping(&self) -> RuntimeResult<()>;
    /// The host's CPU count and memory as the engine reports them (read anew on every call:
    /// a host's memory can change).
    async fn host_capacity(&self) -> RuntimeResult<HostCapacity>;
    /// Create the network if no network with exactly this name exists. Serialized internally.
    async fn ensure_network(&self, spec: &NetworkSpec) -> RuntimeResult<()>;
    /// Whether `address` is one of `network`'s (in one of its subnets), and which endpoint holds
    /// it. An address stays held until the engine has released it, which can be after the
    /// `docker rm` of its container returned. A network that does not exist holds nothing.
    async fn address_use(&self, network: &str, address: IpAddr) -> RuntimeResult<AddressUse>;
    /// Inspect a container by exact name; `Ok(None)` if it does not exist.
    async fn inspect(&self, name: &str) -> RuntimeResult<Option<ContainerInfo>>;
    /// All containers (any state) carrying every one of these labels.
    async fn list(&self, labels: &BTreeMap<String, String>) -> RuntimeResult<Vec<ContainerInfo>>;
    /// Make sure the image is present locally, pulling only when it is not.
    async fn ensure_image(&self, image: &str) -> RuntimeResult<()>;
    /// Create and start a container. On a start failure the container is removed again.
    /// Returns [`RuntimeError::Conflict`] if the name is taken.
    async fn create_and_start(&self, spec: &ContainerSpec) -> RuntimeResult<ContainerInfo>;
    /// Start an existing, stopped container.
    async fn start(&self, name: &str) -> RuntimeResult<()>;
    /// Force-remove a container and its anonymous volumes; a missing container, or one whose
    /// removal is under way already, is success.
    async fn remove(&self, name: &str) -> RuntimeResult<()>;
    /// Run `argv` in the container, feeding `stdin` if given, and collect the exit code and the
    /// last [`EXEC_OUTPUT_TAIL`](super::tail::EXEC_OUTPUT_TAIL) bytes of each output stream.
    /// `argv` is visible in the host's process table: it must never carry a secret (send those
    /// on stdin).
    async fn exec(
        &self,
        name: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> RuntimeResult<ExecOutput>;
    /// Whether `path` exists in the container's filesystem as the engine stores it: the image
    /// and what was written over it, not tmpfs mounts such as `/run` (one call, no exec).
    async fn file_exists(&self, name: &str, path: &str) -> RuntimeResult<bool>;
    /// The content of the regular file at `path`, through the engine's archive of it (one call,
    /// no exec: no tool in the image is needed); `Ok(None)` when nothing is there. A file larger
    /// than `limit` bytes, or something other than a regular file, is [`RuntimeError::Rejected`].
    async fn read_file(&self, name: &str, path: &str, limit: u64)
    -> RuntimeResult<Option<Vec<u8>>>;
    /// Replace (or create) the regular file at `path` with `content`, mode 0644 and root's,
    /// through the engine's archive upload (one call, no exec). Its directory must exist.
    async fn write_file(&self, name: &str, path: &str, content: &[u8]) -> RuntimeResult<()>;
    /// Send a signal (e.g. `SIGHUP`) to the container's main process.
    async fn kill(&self, name: &str, signal: &str) -> RuntimeResult<()>;
    /// Whether the image is present locally (never pulls).
    async fn image_present(&self, image: &str) -> RuntimeResult<bool>;
    /// Run `argv` in the container with the image, as `docker save` writes it, on its stdin (for
    /// `preLoadImages`): streamed from the engine's image export into the exec, a few chunks in
    /// memory at a time whatever the image's size. A missing image is [`RuntimeError::Image`],
    /// before anything runs; an export that breaks off is an error even if the command then
    /// succeeds on the truncated input.
    async fn import_image(
        &self,
        name: &str,
        image: &str,
        argv: &[String],
    ) -> RuntimeResult<ExecOutput>;
}

/// Every container labelled with this owner UID, whatever its name. An empty UID (an object
/// not yet stored) owns nothing.
pub async fn owned_by(rt: &dyn ContainerRuntime, uid: &str) -> RuntimeResult<Vec<ContainerInfo>> {
    if uid.is_empty() {
        return Ok(Vec::new());
    }
    let selector = BTreeMap::from([(super::labels::OWNER_UID.to_string(), uid.to_string())]);
    rt.list(&selector).await
}

/// Remove every container labelled with this owner UID (an object deleted before it ever had an
/// owner: whatever was created for it goes, whatever its name).
pub async fn remove_owned_by(rt: &dyn ContainerRuntime, uid: &str) -> RuntimeResult<()> {
    for c in owned_by(rt, uid).await? {
        rt.remove(&c.name).await?;
    }
    Ok(())
}
