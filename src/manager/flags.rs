//! Command-line flags; each also reads an environment variable (shown in `--help`).
use std::{collections::BTreeMap, time::Duration};

use clap::{Parser, ValueEnum};

use crate::{
    api::parse_go_duration,
    controllers::{Scope, Settings},
    docker::{NodePrivilege, engine::EngineOptions, host_paths::HostPathPolicy},
    telemetry::LogFormat,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrivilegeMode {
    /// `--privileged`, as upstream CAPD.
    Privileged,
    /// All capabilities but `--node-cap-drop`, seccomp/apparmor unconfined, all devices: for
    /// hosts that refuse `--privileged` ("unable to apply caps").
    AllCapabilities,
}

/// capd-rs manager: reconciles DockerCluster and DockerMachine objects into containers.
#[derive(Parser, Debug, Clone)]
#[command(name = "manager", version, about)]
pub struct Flags {
    /// Path to a kubeconfig; in-cluster config (or $KUBECONFIG) when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<String>,
    /// Watch only this namespace (default: all).
    #[arg(long, env = "CAPD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value>.
    #[arg(long, env = "CAPD_WATCH_FILTER")]
    pub watch_filter: Option<String>,
    /// DockerClusters reconciled at once.
    #[arg(long, env = "CAPD_DOCKER_CLUSTER_CONCURRENCY", default_value_t = 10)]
    pub docker_cluster_concurrency: u16,
    /// DockerMachines reconciled at once.
    #[arg(
        long,
        alias = "concurrency",
        env = "CAPD_DOCKER_MACHINE_CONCURRENCY",
        default_value_t = 100
    )]
    pub docker_machine_concurrency: u16,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "CAPD_HEALTH_ADDR", default_value = "0.0.0.0:9440")]
    pub health_addr: String,
    /// Address of /metrics: HTTPS, every request authenticated (TokenReview) and authorised
    /// (SubjectAccessReview, get on the non-resource URL /metrics), as upstream's.
    #[arg(long, env = "CAPD_DIAGNOSTICS_ADDRESS", default_value = ":8443")]
    pub diagnostics_address: String,
    /// Serve /metrics over plain HTTP without authentication or authorisation.
    #[arg(long, env = "CAPD_INSECURE_DIAGNOSTICS", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub insecure_diagnostics: bool,
    /// Port of the conversion webhook (HTTPS, `/convert`).
    #[arg(long, env = "CAPD_WEBHOOK_PORT", default_value_t = 9443)]
    pub webhook_port: u16,
    /// Address the conversion webhook listens on. All addresses by default, as upstream: in a
    /// cluster the API server reaches the Pod through a Service, i.e. on the Pod's own address.
    /// The webhook has no client authentication (the API server presents none by default), so
    /// its bodies, connections and request time are bounded (see `webhook.rs`); a manager run as
    /// a host process can set 127.0.0.1.
    #[arg(long, env = "CAPD_WEBHOOK_HOST", default_value = "0.0.0.0")]
    pub webhook_host: String,
    /// Directory with the webhook's tls.crt and tls.key (a cert-manager Secret mounted there);
    /// without them the manager runs with conversion off.
    #[arg(
        long,
        env = "CAPD_WEBHOOK_CERT_DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub webhook_cert_dir: std::path::PathBuf,
    /// Run only while holding a Lease (for more than one replica).
    #[arg(long, env = "CAPD_LEADER_ELECT", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "CAPD_LEADER_ELECT_LEASE_NAME",
        default_value = "capd-rs-controller-leader-election"
    )]
    pub leader_elect_lease_name: String,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "CAPD_LEADER_ELECT_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Default load-balancer image (per-cluster spec.loadBalancer.imageRepository/imageTag win).
    #[arg(
        long,
        env = "CAPD_LB_IMAGE",
        default_value = crate::docker::specs::DEFAULT_LB_IMAGE
    )]
    pub lb_image: String,
    /// How node containers get their privileges.
    #[arg(long, env = "CAPD_NODE_PRIVILEGE", value_enum, default_value_t = PrivilegeMode::Privileged)]
    pub node_privilege: PrivilegeMode,
    /// Capabilities left out in all-capabilities mode (comma-separated).
    #[arg(
        long,
        env = "CAPD_NODE_CAP_DROP",
        value_delimiter = ',',
        default_value = "SYS_RESOURCE"
    )]
    pub node_cap_drop: Vec<String>,
    /// Default bootstrap timeout (Go duration; spec.bootstrapTimeout wins).
    #[arg(long, env = "CAPD_BOOTSTRAP_TIMEOUT", default_value = "5m")]
    pub bootstrap_timeout: String,
    /// Docker network every container joins (created if missing).
    #[arg(long, env = "CAPD_DOCKER_NETWORK", default_value = "kind")]
    pub docker_network: String,
    /// Docker Engine address (unix://, tcp:// or https://); the local socket when empty.
    #[arg(long, env = "DOCKER_HOST")]
    pub docker_host: Option<String>,
    /// Reach a tcp:// engine over TLS, verifying it and presenting a client certificate (any
    /// non-empty value but "0" or "false" turns it on; the docker CLI also counts "0" as on).
    #[arg(long, env = "DOCKER_TLS_VERIFY")]
    pub docker_tls_verify: Option<String>,
    /// Directory with ca.pem, cert.pem and key.pem for --docker-tls-verify (default ~/.docker).
    #[arg(long, env = "DOCKER_CERT_PATH")]
    pub docker_cert_path: Option<String>,
    /// Allow unencrypted tcp:// to an engine that is not on loopback (bootstrap data, keys
    /// included, then crosses the network in clear: only on a network you trust).
    #[arg(long, env = "CAPD_DOCKER_ALLOW_PLAIN_TCP", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub docker_allow_plain_tcp: bool,
    /// Host path prefix that spec.extraMounts may name (repeatable or comma-separated; default:
    /// any path but the host's root and the Docker socket with its parent directories).
    #[arg(
        long = "extra-mount-allowed-prefix",
        env = "CAPD_EXTRA_MOUNT_ALLOWED_PREFIXES",
        value_delimiter = ','
    )]
    pub extra_mount_allowed_prefixes: Vec<String>,
    /// Let spec.extraMounts name the Docker socket (self-hosted management clusters, whose
    /// nodes run this provider; every DockerMachine author is then root on the host).
    #[arg(long, env = "CAPD_EXTRA_MOUNT_ALLOW_DOCKER_SOCKET", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub extra_mount_allow_docker_socket: bool,
    /// Requeue period of healthy objects (Go duration).
    #[arg(long, env = "CAPD_RESYNC_PERIOD", default_value = "10m")]
    pub resync_period: String,
    /// Extra label key=value on every container and network created (repeatable).
    #[arg(
        long = "container-label",
        env = "CAPD_CONTAINER_LABELS",
        value_delimiter = ','
    )]
    pub container_labels: Vec<String>,
    /// Log format.
    #[arg(long, env = "CAPD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level (RUST_LOG overrides).
    #[arg(long, env = "CAPD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

fn duration(flag: &str, value: &str) -> Result<Duration, String> {
    parse_go_duration(value)
        .ok_or_else(|| format!("--{flag}={value:?} is not a duration like 30s, 5m or 1h"))
}

impl Flags {
    /// Controller settings, validated.
    pub fn settings(&self) -> Result<Settings, String> {
        let mut extra_labels = BTreeMap::new();
        for l in self.container_labels.iter().filter(|l| !l.is_empty()) {
            let (k, v) = l
                .split_once('=')
                .ok_or_else(|| format!("--container-label={l:?} is not key=value"))?;
            extra_labels.insert(k.to_string(), v.to_string());
        }
        let prefixes: Vec<String> = self
            .extra_mount_allowed_prefixes
            .iter()
            .filter(|p| !p.is_empty())
            .cloned()
            .collect();
        if let Some(bad) = prefixes
            .iter()
            .find(|p| !p.starts_with('/') || p.split('/').any(|c| c == ".."))
        {
            return Err(format!(
                "--extra-mount-allowed-prefix={bad:?} is not an absolute path without \"..\""
            ));
        }
        let socket = self.docker_host.as_deref().and_then(|h| {
            h.strip_prefix("unix://")
                .or(h.starts_with('/').then_some(h))
        });
        Ok(Settings {
            lb_image: self.lb_image.clone(),
            node_privilege: match self.node_privilege {
                PrivilegeMode::Privileged => NodePrivilege::Privileged,
                PrivilegeMode::AllCapabilities => NodePrivilege::AllCapabilities {
                    drop: self
                        .node_cap_drop
                        .iter()
                        .filter(|c| !c.is_empty())
                        .cloned()
                        .collect(),
                },
            },
            bootstrap_timeout: duration("bootstrap-timeout", &self.bootstrap_timeout)?,
            network: self.docker_network.clone(),
            extra_labels,
            resync: duration("resync-period", &self.resync_period)?,
            // Read from the engine at start (manager::run), not a flag.
            cgroup_v1: false,
            // A bootstrap runs in the background after its reconcile returned: bound them by the
            // same number (0 means unbounded, as for the controller).
            max_bootstraps: match self.docker_machine_concurrency {
                0 => tokio::sync::Semaphore::MAX_PERMITS,
                n => usize::from(n),
            },
            host_paths: {
                let policy = HostPathPolicy::new(socket, &prefixes);
                if self.extra_mount_allow_docker_socket {
                    policy.allowing_docker_socket()
                } else {
                    policy
                }
            },
        })
    }

    /// How to reach the Docker Engine.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            host: self.docker_host.clone(),
            tls_verify: self
                .docker_tls_verify
                .as_deref()
                .is_some_and(|v| !matches!(v.trim(), "" | "0" | "false")),
            cert_path: self
                .docker_cert_path
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(Into::into),
            allow_plain_tcp: self.docker_allow_plain_tcp,
        }
    }

    /// `host:port` of the conversion webhook.
    pub fn webhook_addr(&self) -> String {
        format!("{}:{}", self.webhook_host, self.webhook_port)
    }

    pub fn scope(&self) -> Scope {
        Scope {
            namespace: self.namespace.clone().filter(|n| !n.is_empty()),
            watch_filter: self.watch_filter.clone().filter(|f| !f.is_empty()),
            cluster_concurrency: self.docker_cluster_concurrency,
            machine_concurrency: self.docker_machine_concurrency,
        }
    }

    /// `--leader-elect-namespace`, else `$POD_NAMESPACE`.
    pub fn resolve_env_fallbacks(mut self) -> Self {
        if self
            .leader_elect_namespace
            .as_deref()
            .is_none_or(str::is_empty)
        {
            self.leader_elect_namespace = std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty());
        }
        if self.docker_host.as_deref() == Some("") {
            self.docker_host = None;
        }
        // Go-style ":9440" (what kubebuilder manifests pass) means all interfaces.
        if self.health_addr.starts_with(':') {
            self.health_addr = format!("0.0.0.0{}", self.health_addr);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags_into_settings() {
        let f = Flags::parse_from([
            "manager",
            "--node-privilege=all-capabilities",
            "--container-label=capd-rs.test/run=abc",
            "--bootstrap-timeout=90s",
            "--concurrency=7",
            "--leader-elect",
        ]);
        let s = f.settings().unwrap();
        assert_eq!(
            s.node_privilege,
            NodePrivilege::AllCapabilities {
                drop: vec!["SYS_RESOURCE".into()]
            }
        );
        assert_eq!(s.extra_labels["capd-rs.test/run"], "abc");
        assert_eq!(s.bootstrap_timeout, Duration::from_secs(90));
        assert_eq!(f.scope().machine_concurrency, 7);
        assert!(f.leader_elect);
    }

    #[test]
    fn engine_options_read_the_docker_cli_variables() {
        let f = Flags::parse_from([
            "manager",
            "--docker-host=tcp://10.0.0.5:2376",
            "--docker-tls-verify=1",
            "--docker-cert-path=/certs",
        ]);
        let o = f.engine_options();
        assert!(o.tls_verify && !o.allow_plain_tcp);
        assert_eq!(o.cert_path, Some("/certs".into()));
        assert_eq!(o.check(), Ok(()));
        let plain = Flags::parse_from([
            "manager",
            "--docker-host=tcp://10.0.0.5:2375",
            "--docker-tls-verify=0",
        ]);
        assert!(
            plain
                .engine_options()
                .check()
                .unwrap_err()
                .contains("plain TCP")
        );
        let allowed = Flags::parse_from([
            "manager",
            "--docker-host=tcp://10.0.0.5:2375",
            "--docker-allow-plain-tcp",
        ]);
        assert_eq!(allowed.engine_options().check(), Ok(()));
    }

    #[test]
    fn go_style_listen_address() {
        let f = Flags::parse_from(["manager", "--health-addr=:9440"]).resolve_env_fallbacks();
        assert_eq!(f.health_addr, "0.0.0.0:9440");
    }

    #[test]
    fn rejects_bad_values_with_the_flag_name() {
        let f = Flags::parse_from(["manager", "--bootstrap-timeout=soon"]);
        assert!(f.settings().unwrap_err().contains("--bootstrap-timeout"));
        let f = Flags::parse_from(["manager", "--container-label=nolabel"]);
        assert!(f.settings().unwrap_err().contains("key=value"));
        let f = Flags::parse_from(["manager", "--extra-mount-allowed-prefix=data"]);
        assert!(
            f.settings()
                .unwrap_err()
                .contains("--extra-mount-allowed-prefix")
        );
    }

    #[test]
    fn host_path_policy_from_flags() {
        let f = Flags::parse_from([
            "manager",
            "--docker-host=unix:///srv/engine.sock",
            "--extra-mount-allowed-prefix=/srv,/data",
        ]);
        let policy = f.settings().unwrap().host_paths;
        assert_eq!(
            policy,
            HostPathPolicy::new(Some("/srv/engine.sock"), &["/srv".into(), "/data".into()])
        );
        assert!(policy.check("/srv").is_err(), "holds the engine's socket");
        assert!(policy.check("/etc").is_err(), "not allowed");
        assert_eq!(policy.check("/data/x"), Ok(()));
    }
}
