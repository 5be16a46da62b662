//! A container engine with state, for the act tests: [`FakeRuntime`] (which records every exec
//! and answers the ones it does not know with success) plus the containers a reconcile created,
//! with their labels, addresses and files. It emulates exactly what moves files in and out of a
//! container (the execs `cat`, `cat > "$0"`, `test -f`, `rm -f`, and the engine's archive reads
//! and writes), so what a reconcile wrote into the load balancer can be read back as the real
//! container would show it. Anything that needs a real node (systemd, kubeadm, the bootstrap
//! script's effects) it does not pretend to do.
use std::{
    collections::BTreeMap,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
};

use async_trait::async_trait;

use crate::docker::{
    AddressUse, ContainerInfo, ContainerRuntime, ContainerSpec, ContainerState, ExecOutput,
    HostCapacity, NetworkSpec, RuntimeError, RuntimeResult, fake::FakeRuntime,
};

#[derive(Default)]
struct Containers {
    by_name: BTreeMap<String, ContainerInfo>,
    /// (container, path) -> content.
    files: BTreeMap<(String, String), Vec<u8>>,
    /// Every spec a create was asked for, in order.
    created: Vec<ContainerSpec>,
    removed: Vec<String>,
    /// Every inspect, by name, in order.
    inspected: Vec<String>,
    /// (container, signal).
    kills: Vec<(String, String)>,
    networks: Vec<NetworkSpec>,
    serial: u32,
    /// The IPv4 address the next created container gets (else a new one).
    next_ipv4: Option<String>,
}

#[derive(Default)]
pub struct Engine {
    /// Records every exec (see [`FakeRuntime::calls`]).
    pub execs: FakeRuntime,
    state: Mutex<Containers>,
    /// See [`Engine::hold_bootstrap_runs`].
    hold_runs: AtomicBool,
}

impl Engine {
    /// An engine whose every exec takes `delay` (a bootstrap that is still running).
    pub fn with_exec_delay(delay: std::time::Duration) -> Self {
        Engine {
            execs: FakeRuntime::slow(delay),
            ..Default::default()
        }
    }

    /// While `hold`, a bootstrap script's exec (`/bin/sh -c`) is recorded and never answers: a
    /// run that its manager process never saw end.
    pub fn hold_bootstrap_runs(&self, hold: bool) {
        self.hold_runs.store(hold, Ordering::SeqCst);
    }

    fn state(&self) -> MutexGuard<'_, Containers> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A running container as a create would make it, added behind the reconcile's back
    /// (another manager's, or a node the test needs).
    pub fn add(&self, name: &str, labels: BTreeMap<String, String>) -> ContainerInfo {
        let mut s = self.state();
        let info = s.new_container(name, "test/image:1", &labels, "kind");
        s.by_name.insert(name.to_string(), info.clone());
        info
    }

    /// A container removed behind the reconcile's back (`docker rm -f` by hand).
    pub fn remove_by_hand(&self, name: &str) {
        self.state().by_name.remove(name);
    }

    /// The next container created or added gets `ipv4` (the engine handing a released address out again).
    pub fn give_next_address(&self, ipv4: &str) {
        self.state().next_ipv4 = Some(ipv4.to_string());
    }

    /// How often a container was inspected.
    pub fn inspects(&self, name: &str) -> usize {
        self.state().inspected.iter().filter(|n| *n == name).count()
    }

    pub fn container(&self, name: &str) -> Option<ContainerInfo> {
        self.state().by_name.get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        self.state().by_name.keys().cloned().collect()
    }

    /// Remove a label from a container (one an older manager did not set, say).
    pub fn remove_label(&self, name: &str, key: &str) {
        if let Some(c) = self.state().by_name.get_mut(name) {
            c.labels.remove(key);
        }
    }

    /// Set a container's state (a stopped node, say).
    pub fn set_state(&self, name: &str, state: ContainerState) {
        if let Some(c) = self.state().by_name.get_mut(name) {
            c.state = Some(state);
        }
    }

    /// A file in a container, as `cat` would show it.
    pub fn file(&self, container: &str, path: &str) -> Option<String> {
        let s = self.state();
        let bytes = s.files.get(&(container.to_string(), path.to_string()))?;
        Some(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Put a file in a container, as something in it would have written it.
    pub fn put_file(&self, container: &str, path: &str, content: &str) {
        self.state().files.insert(
            (container.to_string(), path.to_string()),
            content.as_bytes().to_vec(),
        );
    }

    pub fn created(&self) -> Vec<ContainerSpec> {
        self.state().created.clone()
    }

    pub fn removed(&self) -> Vec<String> {
        self.state().removed.clone()
    }

    pub fn kills(&self) -> Vec<(String, String)> {
        self.state().kills.clone()
    }

    pub fn networks(&self) -> Vec<NetworkSpec> {
        self.state().networks.clone()
    }
}

impl Containers {
    fn new_container(
        &mut self,
        name: &str,
        image: &str,
        labels: &BTreeMap<String, String>,
        network: &str,
    ) -> ContainerInfo {
        self.serial += 1;
        let n = self.serial;
        ContainerInfo {
            id: format!("{n:064x}"),
            name: name.to_string(),
            image: image.to_string(),
            state: Some(ContainerState::Running),
            labels: labels.clone(),
            ipv4: Some(
                self.next_ipv4
                    .take()
                    .unwrap_or_else(|| format!("172.18.0.{}", n + 1)),
            ),
            ipv6: Some(format!("fc00:f853:ccd:e793::{}", n + 1)),
            networks: vec![network.to_string()],
            host_ports: BTreeMap::new(),
            exit_code: Some(0),
            started_at: Some(chrono::Utc::now()),
            finished_at: None,
        }
    }
}

fn exited(code: i64, stdout: Vec<u8>, stderr: &str) -> ExecOutput {
    ExecOutput {
        exit_code: code,
        stdout,
        stderr: stderr.as_bytes().to_vec(),
    }
}

#[async_trait]
impl ContainerRuntime for Engine {
    async fn ping(&self) -> RuntimeResult<()> {
        Ok(())
    }
    async fn host_capacity(&self) -> RuntimeResult<HostCapacity> {
        self.execs.host_capacity().await
    }
    async fn ensure_network(&self, spec: &NetworkSpec) -> RuntimeResult<()> {
        let mut s = self.state();
        if !s.networks.iter().any(|n| n.name == spec.name) {
            s.networks.push(spec.clone());
        }
        Ok(())
    }
    /// The act tests' network is 172.18.0.0/16 and fc00:f853:ccd:e793::/64, as kind's.
    async fn address_use(
        &self,
        network: &str,
        address: std::net::IpAddr,
    ) -> RuntimeResult<AddressUse> {
        let on_network = match address {
            std::net::IpAddr::V4(a) => a.octets()[..2] == [172, 18],
            std::net::IpAddr::V6(a) => a.segments()[..4] == [0xfc00, 0xf853, 0xccd, 0xe793],
        };
        if !on_network {
            return Ok(AddressUse::OffNetwork);
        }
        let s = self.state();
        let address = Some(address.to_string());
        Ok(s.by_name
            .values()
            .find(|c| {
                c.networks.iter().any(|n| n == network) && (c.ipv4 == address || c.ipv6 == address)
            })
            .map_or(AddressUse::Free, |c| AddressUse::HeldBy(c.name.clone())))
    }
    async fn inspect(&self, name: &str) -> RuntimeResult<Option<ContainerInfo>> {
        self.state().inspected.push(name.to_string());
        Ok(self.container(name))
    }
    async fn list(&self, labels: &BTreeMap<String, String>) -> RuntimeResult<Vec<ContainerInfo>> {
        let s = self.state();
        Ok(s.by_name
            .values()
            .filter(|c| labels.iter().all(|(k, v)| c.labels.get(k) == Some(v)))
            .cloned()
            .collect())
    }
    async fn ensure_image(&self, _: &str) -> RuntimeResult<()> {
        Ok(())
    }
    async fn create_and_start(&self, spec: &ContainerSpec) -> RuntimeResult<ContainerInfo> {
        let mut s = self.state();
        s.created.push(spec.clone());
        if s.by_name.contains_key(&spec.name) {
            return Err(RuntimeError::Conflict(spec.name.clone()));
        }
        let mut info = s.new_container(&spec.name, &spec.image, &spec.labels, &spec.network);
        let first_port = 40000 + 10 * u16::try_from(s.serial).unwrap_or(0);
        for (i, port) in (0u16..).zip(&spec.ports) {
            let host = port.host_port.unwrap_or(first_port + i);
            info.host_ports.insert(port.container_port.clone(), host);
        }
        s.by_name.insert(spec.name.clone(), info.clone());
        Ok(info)
    }
    async fn start(&self, name: &str) -> RuntimeResult<()> {
        match self.state().by_name.get_mut(name) {
            Some(c) => {
                c.state = Some(ContainerState::Running);
                c.started_at = Some(chrono::Utc::now());
                Ok(())
            }
            None => Err(RuntimeError::NotFound(name.to_string())),
        }
    }
    async fn remove(&self, name: &str) -> RuntimeResult<()> {
        let mut s = self.state();
        s.removed.push(name.to_string());
        s.by_name.remove(name);
        s.files.retain(|(c, _), _| c != name);
        Ok(())
    }
    async fn exec(
        &self,
        name: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> RuntimeResult<ExecOutput> {
        // Recorded (and answered, for commands not emulated below) by the plain fake.
        let default = self.execs.exec(name, argv, stdin).await?;
        let writes_a_file = argv.get(2).is_some_and(|s| s.ends_with("cat > \"$0\""));
        if self.hold_runs.load(Ordering::SeqCst)
            && argv.first().is_some_and(|a| a == "/bin/sh")
            && !writes_a_file
        {
            std::future::pending::<()>().await;
        }
        let mut s = self.state();
        if !s.by_name.get(name).is_some_and(ContainerInfo::is_running) {
            return Err(RuntimeError::Rejected(format!(
                "container {name} is not running"
            )));
        }
        let key = |path: &str| (name.to_string(), path.to_string());
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        Ok(match args.as_slice() {
            ["cat", path] => match s.files.get(&key(path)) {
                Some(content) => exited(0, content.clone(), ""),
                None => exited(1, Vec::new(), "cat: can't open: No such file or directory"),
            },
            ["/bin/sh", "-c", script, path] if script.ends_with("cat > \"$0\"") => {
                s.files
                    .insert(key(path), stdin.unwrap_or_default().to_vec());
                exited(0, Vec::new(), "")
            }
            ["test", "-f", path] => {
                exited(i64::from(!s.files.contains_key(&key(path))), Vec::new(), "")
            }
            ["rm", "-f", path] => {
                s.files.remove(&key(path));
                exited(0, Vec::new(), "")
            }
            _ => default,
        })
    }
    async fn file_exists(&self, name: &str, path: &str) -> RuntimeResult<bool> {
        Ok(self
            .state()
            .files
            .contains_key(&(name.to_string(), path.to_string())))
    }
    async fn read_file(
        &self,
        name: &str,
        path: &str,
        limit: u64,
    ) -> RuntimeResult<Option<Vec<u8>>> {
        let s = self.state();
        if !s.by_name.contains_key(name) {
            return Err(RuntimeError::NotFound(format!("No such container: {name}")));
        }
        match s.files.get(&(name.to_string(), path.to_string())) {
            Some(content) if content.len() as u64 > limit => Err(RuntimeError::Rejected(format!(
                "read {path} in container {name}: larger than {limit} bytes"
            ))),
            found => Ok(found.cloned()),
        }
    }
    async fn write_file(&self, name: &str, path: &str, content: &[u8]) -> RuntimeResult<()> {
        let mut s = self.state();
        if !s.by_name.contains_key(name) {
            return Err(RuntimeError::NotFound(format!("No such container: {name}")));
        }
        s.files
            .insert((name.to_string(), path.to_string()), content.to_vec());
        Ok(())
    }
    async fn kill(&self, name: &str, signal: &str) -> RuntimeResult<()> {
        self.state()
            .kills
            .push((name.to_string(), signal.to_string()));
        Ok(())
    }
    async fn image_present(&self, image: &str) -> RuntimeResult<bool> {
        self.execs.image_present(image).await
    }
    async fn import_image(
        &self,
        name: &str,
        image: &str,
        argv: &[String],
    ) -> RuntimeResult<ExecOutput> {
        self.execs.import_image(name, image, argv).await
    }
}
