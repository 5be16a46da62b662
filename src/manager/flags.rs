//! Command-line flags; most also read an environment variable (shown in `--help`). Upstream
//! CAPD's spellings are accepted too (aliases here; the rules and the flags without a meaning
//! here in `upstream.rs`; the whole list in docs/upstream-flags.md).
use std::{collections::BTreeMap, ffi::OsString, time::Duration};

use clap::{Parser, ValueEnum};

use super::upstream::{self, FeatureGates, Ignored, go_bool};
use crate::{
    api::parse_go_duration,
    controllers::{Concurrency, Scope, Settings},
    docker::{NodePrivilege, engine::EngineOptions, host_paths::HostPathPolicy},
    telemetry::LogFormat,
    webhook::ServerTls,
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
// A flag given twice takes its last value, as with pflag: kustomize patches written for upstream
// append an arg to override one already in the Deployment.
#[command(name = "manager", version, about, args_override_self = true)]
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
    /// DockerClusters reconciled at once (upstream: --dockercluster-concurrency, default 50).
    #[arg(
        long,
        alias = "dockercluster-concurrency",
        env = "CAPD_DOCKER_CLUSTER_CONCURRENCY",
        default_value_t = 10
    )]
    pub docker_cluster_concurrency: u16,
    /// DockerMachines reconciled at once.
    #[arg(
        long,
        aliases = ["concurrency", "dockermachine-concurrency"],
        env = "CAPD_DOCKER_MACHINE_CONCURRENCY",
        default_value_t = 100
    )]
    pub docker_machine_concurrency: u16,
    /// DockerMachinePools reconciled at once.
    #[arg(
        long = "dockermachinepool-concurrency",
        alias = "docker-machine-pool-concurrency",
        env = "CAPD_DOCKER_MACHINE_POOL_CONCURRENCY",
        default_value_t = 50
    )]
    pub docker_machine_pool_concurrency: u16,
    /// DevClusters reconciled at once.
    #[arg(
        long = "devcluster-concurrency",
        alias = "dev-cluster-concurrency",
        env = "CAPD_DEV_CLUSTER_CONCURRENCY",
        default_value_t = 50
    )]
    pub dev_cluster_concurrency: u16,
    /// DevMachines reconciled at once.
    #[arg(
        long = "devmachine-concurrency",
        alias = "dev-machine-concurrency",
        env = "CAPD_DEV_MACHINE_CONCURRENCY",
        default_value_t = 50
    )]
    pub dev_machine_concurrency: u16,
    /// DevMachinePools reconciled at once.
    #[arg(
        long = "devmachinepool-concurrency",
        alias = "dev-machine-pool-concurrency",
        env = "CAPD_DEV_MACHINE_POOL_CONCURRENCY",
        default_value_t = 100
    )]
    pub dev_machine_pool_concurrency: u16,
    /// Cluster API feature gates, `Name=bool,...` (upstream's list). `MachinePool=false` stops
    /// the DockerMachinePool and DevMachinePool controllers; the others change nothing here.
    #[arg(long, env = "CAPD_FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
    /// Address of /healthz and /readyz (plain HTTP, for the kubelet's probes).
    #[arg(long, env = "CAPD_HEALTH_ADDR", default_value = "0.0.0.0:9440")]
    pub health_addr: String,
    /// Address of /metrics (upstream's diagnostics endpoint): HTTPS, every request authenticated
    /// (TokenReview) and authorised (SubjectAccessReview, get on the non-resource URL /metrics),
    /// as upstream's, unless --insecure-diagnostics.
    #[arg(long, env = "CAPD_DIAGNOSTICS_ADDRESS", default_value = ":8443")]
    pub diagnostics_address: String,
    /// Serve /metrics over plain HTTP without authentication or authorisation.
    #[arg(long, env = "CAPD_INSECURE_DIAGNOSTICS", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
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
    /// File name of the webhook's certificate in --webhook-cert-dir.
    #[arg(long, env = "CAPD_WEBHOOK_CERT_NAME", default_value = crate::webhook::CERT_FILE)]
    pub webhook_cert_name: String,
    /// File name of the webhook's private key in --webhook-cert-dir.
    #[arg(long, env = "CAPD_WEBHOOK_KEY_NAME", default_value = crate::webhook::KEY_FILE)]
    pub webhook_key_name: String,
    /// Lowest TLS version of the webhook: VersionTLS12 or VersionTLS13 (10 and 11 mean 12).
    #[arg(long, env = "CAPD_TLS_MIN_VERSION", default_value = "VersionTLS12")]
    pub tls_min_version: String,
    /// TLS 1.2 cipher suites of the webhook, by Go's names (default: rustls's; TLS 1.3 suites
    /// are always offered, as in Go).
    #[arg(long, env = "CAPD_TLS_CIPHER_SUITES", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Run only while holding a Lease (for more than one replica).
    #[arg(long, env = "CAPD_LEADER_ELECT", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
    pub leader_elect: bool,
    /// How long a lease holds without renewal (Go duration).
    #[arg(long, env = "CAPD_LEADER_ELECT_LEASE_DURATION", default_value = "15s")]
    pub leader_elect_lease_duration: String,
    /// How long the leader tries to renew before it gives up (Go duration); it renews when
    /// the lease has this much left of --leader-elect-lease-duration.
    #[arg(long, env = "CAPD_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s")]
    pub leader_elect_renew_deadline: String,
    /// Upstream's wait between tries (Go duration): checked as upstream, the lease manager
    /// here retries on its own schedule.
    #[arg(long, env = "CAPD_LEADER_ELECT_RETRY_PERIOD", default_value = "2s")]
    pub leader_elect_retry_period: String,
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
    #[arg(long, env = "CAPD_DOCKER_ALLOW_PLAIN_TCP", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
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
    #[arg(long, env = "CAPD_EXTRA_MOUNT_ALLOW_DOCKER_SOCKET", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
    pub extra_mount_allow_docker_socket: bool,
    /// Serve `spec.backend.inMemory` of the Dev* kinds (upstream's test backend: simulated
    /// machines, each workload cluster's API server a listener in this process). On by default,
    /// as upstream always serves it, so that upstream's in-memory flavors work after a drop-in
    /// swap; off (`=false`), such objects are reported `BackendNotServed` and no listener is
    /// ever opened (docs/in-memory.md).
    #[arg(long, env = "CAPD_IN_MEMORY_BACKEND", default_value = "true", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
    pub in_memory_backend: bool,
    /// The address the in-memory workload clusters' API servers listen on and their endpoints
    /// name: the manager Pod's IP (upstream reads the same POD_IP).
    #[arg(long, env = "POD_IP", default_value = "127.0.0.1")]
    pub in_memory_host: String,
    /// Requeue period of healthy objects (Go duration).
    #[arg(
        long,
        alias = "sync-period",
        env = "CAPD_RESYNC_PERIOD",
        default_value = "10m"
    )]
    pub resync_period: String,
    /// Extra label key=value on every container and network created (repeatable).
    #[arg(
        long = "container-label",
        env = "CAPD_CONTAINER_LABELS",
        value_delimiter = ','
    )]
    pub container_labels: Vec<String>,
    /// Log format.
    #[arg(long, alias = "logging-format", env = "CAPD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level (RUST_LOG overrides; default info, or what -v gives).
    #[arg(long, env = "CAPD_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// klog verbosity, as upstream: 0-2 is info, 3-4 debug, 5 and more trace. --log-level wins.
    #[arg(short = 'v', long = "v", value_name = "N")]
    pub verbosity: Option<u32>,
    #[command(flatten)]
    pub ignored: Ignored,
}

fn duration(flag: &str, value: &str) -> Result<Duration, String> {
    parse_go_duration(value)
        .ok_or_else(|| format!("--{flag}={value:?} is not a duration like 30s, 5m or 1h"))
}

/// The leader-election Lease's timing, in the lease manager's whole seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    pub duration_secs: u64,
    /// Renew when this much of the lease is left.
    pub grace_secs: u64,
}

impl Flags {
    /// Parse a command line the way upstream's pflag would read it (see `upstream::normalize`);
    /// what clap refuses (a flag neither we nor upstream have) is an error naming the flag.
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        Self::try_parse_from(upstream::normalize(args))
    }

    /// `--log-level`, else the level `-v` maps to, else info.
    pub fn log_level(&self) -> String {
        self.log_level
            .clone()
            .filter(|l| !l.is_empty())
            .or_else(|| {
                self.verbosity
                    .map(|v| upstream::log_level_for_verbosity(v).to_string())
            })
            .unwrap_or_else(|| "info".into())
    }

    pub fn feature_gates(&self) -> Result<FeatureGates, String> {
        FeatureGates::parse(&self.feature_gates)
    }

    /// The Lease's timing, checked as client-go checks it (the lease outlasts the renew
    /// deadline, which outlasts the retry period).
    pub fn lease_timing(&self) -> Result<LeaseTiming, String> {
        let lease = duration(
            "leader-elect-lease-duration",
            &self.leader_elect_lease_duration,
        )?;
        let renew = duration(
            "leader-elect-renew-deadline",
            &self.leader_elect_renew_deadline,
        )?;
        let retry = duration("leader-elect-retry-period", &self.leader_elect_retry_period)?;
        if renew >= lease || retry >= renew || retry.is_zero() {
            return Err(format!(
                "leader election needs --leader-elect-lease-duration ({lease:?}) > --leader-elect-renew-deadline ({renew:?}) > --leader-elect-retry-period ({retry:?}) > 0"
            ));
        }
        let (duration_secs, renew_secs) = (lease.as_secs().max(2), renew.as_secs().max(1));
        Ok(LeaseTiming {
            duration_secs,
            grace_secs: duration_secs.saturating_sub(renew_secs).max(1),
        })
    }

    /// The webhook server's certificate names and TLS, with the warnings to log once.
    pub fn server_tls(&self) -> Result<(ServerTls, Vec<String>), String> {
        super::webhook_tls::server_tls(
            &self.webhook_cert_name,
            &self.webhook_key_name,
            &self.tls_min_version,
            &self.tls_cipher_suites,
        )
    }

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

    /// What the controllers watch and how many objects each reconciles at once. Fails on a bad
    /// `--feature-gates` (it says whether the pool controllers run).
    pub fn scope(&self) -> Result<Scope, String> {
        Ok(Scope {
            namespace: self.namespace.clone().filter(|n| !n.is_empty()),
            watch_filter: self.watch_filter.clone().filter(|f| !f.is_empty()),
            docker: Concurrency {
                cluster: self.docker_cluster_concurrency,
                machine: self.docker_machine_concurrency,
                pool: self.docker_machine_pool_concurrency,
            },
            dev: Concurrency {
                cluster: self.dev_cluster_concurrency,
                machine: self.dev_machine_concurrency,
                pool: self.dev_machine_pool_concurrency,
            },
            machine_pools: self.feature_gates()?.machine_pool(),
        })
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
        assert_eq!(f.scope().unwrap().docker.machine, 7);
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

    fn parse(args: &[&str]) -> Flags {
        let mut all = vec!["manager"];
        all.extend_from_slice(args);
        Flags::try_parse_args(all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn upstream_deployment_args_parse_with_upstream_meaning() {
        let f = parse(&[
            "--leader-elect",
            "--diagnostics-address=:8443",
            "--insecure-diagnostics=false",
            "--feature-gates=MachinePool=false,ClusterTopology=false,PriorityQueue=true,ReconcilerRateLimiting=true",
        ]);
        assert!(f.leader_elect);
        assert_eq!(f.diagnostics_address, ":8443");
        assert!(!f.insecure_diagnostics);
        assert!(!f.scope().unwrap().machine_pools);
        // Defaults when absent, as upstream's.
        let d = parse(&[]);
        assert_eq!(d.diagnostics_address, ":8443");
        assert!(!d.insecure_diagnostics && !d.leader_elect);
        assert!(d.scope().unwrap().machine_pools);
        assert_eq!(
            d.lease_timing(),
            Ok(LeaseTiming {
                duration_secs: 15,
                grace_secs: 5
            })
        );
        assert_eq!(d.log_level(), "info");
        assert!(d.ignored.given().is_empty());
    }

    /// As pflag: a repeated flag takes its last value (a kustomize patch appending
    /// `--diagnostics-address=:8080` to upstream's Deployment), repeatable flags still add up.
    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let f = parse(&[
            "--diagnostics-address=:8443",
            "--insecure-diagnostics=false",
            "--container-label=a=1",
            "--diagnostics-address=:8080",
            "--insecure-diagnostics",
            "--container-label=b=2",
        ]);
        assert_eq!(f.diagnostics_address, ":8080");
        assert!(f.insecure_diagnostics);
        assert_eq!(f.container_labels.len(), 2, "{:?}", f.container_labels);
    }

    #[test]
    fn pflag_word_separators_and_go_booleans() {
        let f = parse(&[
            "--leader_elect=false",
            "--insecure_diagnostics",
            "--webhook_cert_name",
            "c_1.pem",
        ]);
        assert!(!f.leader_elect && f.insecure_diagnostics);
        assert_eq!(
            f.webhook_cert_name, "c_1.pem",
            "values keep their underscores"
        );
        for (v, want) in [("1", true), ("T", true), ("False", false), ("0", false)] {
            assert_eq!(parse(&[&format!("--leader-elect={v}")]).leader_elect, want);
        }
        assert!(Flags::try_parse_args(["manager", "--leader-elect=yes"]).is_err());
    }

    #[test]
    fn klog_verbosity_in_every_form() {
        for args in [["-v=4"], ["--v=4"], ["-v4"], ["--v=4"]] {
            assert_eq!(parse(&args).log_level(), "debug", "{args:?}");
        }
        assert_eq!(parse(&["-v", "2"]).log_level(), "info");
        assert_eq!(parse(&["--v", "6"]).log_level(), "trace");
        assert_eq!(parse(&["-v=6", "--log-level=warn"]).log_level(), "warn");
    }

    #[test]
    fn upstream_spellings_are_aliases_of_ours() {
        let f = parse(&[
            "--dockercluster-concurrency=3",
            "--dockermachine-concurrency=4",
            "--dockermachinepool-concurrency=5",
            "--devcluster-concurrency=6",
            "--devmachine-concurrency=7",
            "--devmachinepool-concurrency=8",
            "--sync-period=15m",
            "--logging-format=json",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20s",
            "--leader-elect-retry-period=5s",
            "--webhook-key-name=k.pem",
            "--tls-min-version=VersionTLS13",
        ]);
        let scope = f.scope().unwrap();
        assert_eq!(
            (
                scope.docker.cluster,
                scope.docker.machine,
                scope.docker.pool
            ),
            (3, 4, 5)
        );
        assert_eq!(
            (scope.dev.cluster, scope.dev.machine, scope.dev.pool),
            (6, 7, 8)
        );
        assert_eq!(f.settings().unwrap().resync, Duration::from_secs(900));
        assert_eq!(f.log_format, LogFormat::Json);
        assert_eq!(
            f.lease_timing(),
            Ok(LeaseTiming {
                duration_secs: 30,
                grace_secs: 10
            })
        );
        let (tls, _) = f.server_tls().unwrap();
        assert_eq!(tls.key_name, "k.pem");
        assert!(tls.tls13_only);
        let bad = parse(&["--leader-elect-renew-deadline=20s"]);
        assert!(bad.lease_timing().unwrap_err().contains("renew-deadline"));
    }

    #[test]
    fn upstream_flags_without_a_meaning_are_accepted_and_listed() {
        let f = parse(&[
            "--profiler-address=localhost:6060",
            "--contention-profiling",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
            "--vmodule=foo=2",
            "--log-flush-frequency=5s",
            "--skip-crd-migration-phases=StorageVersionMigration",
            "--clustercache-client-qps=20",
        ]);
        let given = f.ignored.given();
        assert!(given.contains(&"--profiler-address=localhost:6060".to_string()));
        assert!(given.contains(&"--contention-profiling=true".to_string()));
        assert_eq!(given.len(), 8, "{given:?}");
        // Upstream's types still hold.
        assert!(Flags::try_parse_args(["manager", "--kube-api-burst=many"]).is_err());
    }

    #[test]
    fn a_flag_neither_we_nor_upstream_have_is_refused_by_name() {
        let e = Flags::try_parse_args(["manager", "--no-such-flag=1"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--no-such-flag"), "{e}");
        let e = Flags::try_parse_args(["manager", "--feature-gates=MachinePool=maybe"])
            .unwrap()
            .scope()
            .unwrap_err();
        assert!(e.contains("MachinePool"), "{e}");
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
