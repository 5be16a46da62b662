//! The floor: what the Docker Engine itself needs for the machines, with no controller and no
//! Kubernetes API in between. For each machine, the calls a provider cannot avoid: create a node
//! container (as privileged and with the same mounts as a node), start it, run the bootstrap in
//! one exec, read the exec's exit code. All machines at once, up to the managers' default
//! concurrency (100); removal four at a time, as capd-rs removes (more in parallel deadlocks the
//! Engine 20.10 network controller, see the bollard adapter; `removals.rs` measures other
//! counts).
use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use bollard::{
    Docker,
    exec::{CreateExecOptions, StartExecOptions, StartExecResults},
    models::{
        ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum, RestartPolicy,
        RestartPolicyNameEnum,
    },
    query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder},
};
use futures::{StreamExt, stream};
use tokio::sync::Semaphore;

/// The managers' default DockerMachine concurrency (both capd-rs and upstream).
const PARALLELISM: usize = 100;
/// capd-rs's bound on parallel removals.
pub const REMOVALS: usize = 4;

/// The bootstrap of `objects::BOOTSTRAP`, as the shell a provider turns it into.
const SCRIPT: &str = "set -e; mkdir -p /etc/capd-bench; printf 'written by the capd-rs bench\\n' > /etc/capd-bench/hello.txt; chmod 0644 /etc/capd-bench/hello.txt; mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete";

pub struct Floor {
    docker: Docker,
    image: String,
    labels: HashMap<String, String>,
    network: String,
}

impl Floor {
    /// `docker_host` is the counting relay's `unix://` address.
    pub fn new(docker_host: &str, image: &str, label: (&str, &str), network: &str) -> Result<Self> {
        let path = docker_host.trim_start_matches("unix://");
        let docker = Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION)?;
        Ok(Self {
            docker,
            image: image.to_string(),
            labels: HashMap::from([(label.0.to_string(), label.1.to_string())]),
            network: network.to_string(),
        })
    }

    /// Provisions `n` machines; returns when each finished, from the start.
    pub async fn provision(&self, prefix: &str, n: usize) -> Result<BTreeMap<String, Duration>> {
        let start = Instant::now();
        let gate = Arc::new(Semaphore::new(PARALLELISM));
        let done: Vec<Result<(String, Duration)>> = stream::iter(0..n)
            .map(|i| {
                let gate = gate.clone();
                let name = format!("{prefix}-{i}");
                async move {
                    let _permit = gate.acquire().await?;
                    self.machine(&name).await?;
                    Ok((name, start.elapsed()))
                }
            })
            .buffer_unordered(n.max(1))
            .collect()
            .await;
        done.into_iter().collect()
    }

    async fn machine(&self, name: &str) -> Result<()> {
        // A node container as both providers make it (kind's layout): privileged, /tmp and
        // /run on tmpfs, /var an anonymous volume (the engine copies the image's /var into it),
        // the host's kernel modules, a private cgroup namespace.
        let body = ContainerCreateBody {
            image: Some(self.image.clone()),
            hostname: Some(name.to_string()),
            labels: Some(self.labels.clone()),
            tty: Some(true),
            volumes: Some(vec!["/var".to_string()]),
            host_config: Some(HostConfig {
                privileged: Some(true),
                security_opt: Some(vec![
                    "seccomp=unconfined".into(),
                    "apparmor=unconfined".into(),
                ]),
                tmpfs: Some(HashMap::from([
                    ("/tmp".to_string(), String::new()),
                    ("/run".to_string(), String::new()),
                ])),
                binds: Some(vec!["/lib/modules:/lib/modules:ro".into()]),
                network_mode: Some(self.network.clone()),
                cgroupns_mode: Some(HostConfigCgroupnsModeEnum::PRIVATE),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::ON_FAILURE),
                    maximum_retry_count: Some(1),
                }),
                init: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let opts = CreateContainerOptionsBuilder::new().name(name).build();
        self.docker.create_container(Some(opts), body).await?;
        self.docker.start_container(name, None).await?;
        let exec = self
            .docker
            .create_exec(
                name,
                CreateExecOptions {
                    cmd: Some(vec!["sh", "-c", SCRIPT]),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        // Attached: the output stream ends when the command does; then one read of its exit
        // code (as a provider does, without polling).
        if let StartExecResults::Attached { mut output, .. } = self
            .docker
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await?
        {
            while let Some(chunk) = output.next().await {
                chunk?;
            }
        }
        match self.docker.inspect_exec(&exec.id).await?.exit_code {
            Some(0) => Ok(()),
            code => bail!("bootstrap exec in {name} exited with {code:?}"),
        }
    }

    /// Removes the machines (and their anonymous volumes), `at_once` at a time.
    pub async fn remove(&self, prefix: &str, n: usize, at_once: usize) -> Result<Duration> {
        let start = Instant::now();
        let results: Vec<Result<()>> = stream::iter(0..n)
            .map(|i| async move {
                let opts = RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .v(true)
                    .build();
                self.docker
                    .remove_container(&format!("{prefix}-{i}"), Some(opts))
                    .await
                    .context("remove")
            })
            .buffer_unordered(at_once.max(1))
            .collect()
            .await;
        results.into_iter().collect::<Result<()>>()?;
        Ok(start.elapsed())
    }
}
