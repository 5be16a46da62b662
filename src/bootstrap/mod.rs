//! Bootstrap data (the CAPI bootstrap Secret's `value`) turned into commands to exec in a node
//! container, and a runner that execs them one by one.
//!
//! Two halves. Planning is pure (`decode`, `limits`, `cloud_config`, `users`, `yaml`,
//! `ignition`, `kubeadm`, `plan`, `redact`): bytes in, steps out, no I/O at all. Running is I/O
//! (`runner`, and `images` for `preLoadImages`): it execs the steps in the node, through the
//! [`ContainerRuntime`](crate::docker::ContainerRuntime) port only; nothing here touches the
//! network, the host's filesystem or the API server.
//!
//! Supported input (see `reference/capd-inventory.md` §5, and the README):
//! - **cloud-config**: `bootcmd` first, then `write_files` and `runcmd` in document order, with
//!   `users` (accounts, groups, sudo rules, ssh authorized keys) created before the first
//!   `runcmd`. Every other module is accepted, as upstream CAPD does, and skipped: the plan names
//!   it ([`Planned::skipped`]) so the controller can say so once. `write_files` encodings `b64`,
//!   `gz` and `gz+b64` (base64, then gunzip: upstream forgets the gunzip) are supported.
//! - **Ignition** v2.x / v3.x (JSON, or the same document in YAML): `storage.files`,
//!   `storage.directories`, `storage.links` and `systemd.units`. Remote content sources are rejected.
//!
//! In both, the kubeadm config file CABPK writes is rewritten for a kind-style node, as upstream
//! CAPD does (containerd socket, kubelet flags, kube-proxy conntrack): see [`NodeOptions`].
//!
//! Secrets: the bootstrap data carries join tokens, certificate keys and private keys. Nothing in
//! this module logs it, and every text meant for a condition or a log ([`Step::description`],
//! [`BootstrapError`], [`StepFailure`]) is either built without file content or passed through
//! [`redact`].
mod cloud_config;
mod decode;
mod ignition;
mod images;
mod kubeadm;
mod limits;
mod plan;
mod redact;
mod runner;
mod users;
mod yaml;

use std::fmt;
use std::str::FromStr;

pub use images::{Plan, Progress, import_argv, run_plan, unique};
pub use limits::{MAX_DATA_BYTES, MAX_DECODED_BYTES, MAX_YAML_NODES};
pub use redact::{REDACTED, redact};
pub use runner::{
    CLAIM_PATH, PROGRESS_PATH, RunError, StepFailure, TAIL_CHARS, TAIL_LINES, file_in_node, run,
    steps_done,
};

/// The `type` of the Secrets CAPI's bootstrap providers write their data into (any type with a
/// `value` key is accepted, as upstream does).
pub const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

/// The file CABPK's commands create when bootstrap succeeded; checked before and after the run.
pub const SENTINEL_PATH: &str = "/run/cluster-api/bootstrap-success.complete";

/// The flag upstream CAPD inserts after `kubeadm init` / `kubeadm join` in cloud-config `runcmd`.
pub const KUBEADM_IGNORE_PREFLIGHT_ERRORS: &str = "--ignore-preflight-errors=SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables";

/// The format of the bootstrap data, from the bootstrap Secret's `format` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `cloud-config` (also the default when the key is absent or empty).
    CloudConfig,
    /// `ignition`.
    Ignition,
}

impl Format {
    /// Parse the Secret's `format` value: absent or empty means cloud-config.
    pub fn parse(value: Option<&str>) -> Result<Format, BootstrapError> {
        value.unwrap_or("").parse()
    }

    /// The value as written in the Secret.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::CloudConfig => "cloud-config",
            Format::Ignition => "ignition",
        }
    }
}

impl FromStr for Format {
    type Err = BootstrapError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "" | "cloud-config" => Ok(Format::CloudConfig),
            "ignition" => Ok(Format::Ignition),
            other => Err(BootstrapError::UnsupportedFormat(plan::shorten(other, 64))),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One command to exec in the node container.
///
/// `Debug` shows only the description and the size of stdin: argv and stdin may hold secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Step {
    /// The command and its arguments, exec'd directly (no shell unless the first one is a shell).
    pub argv: Vec<String>,
    /// Bytes fed to the command's stdin (file content for writes).
    pub stdin: Option<Vec<u8>>,
    /// Safe to show in conditions, events and logs: the action and path, or the redacted command
    /// line; never file content.
    pub description: String,
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Step")
            .field("description", &self.description)
            .field("argc", &self.argv.len())
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .finish()
    }
}

/// Why bootstrap data could not be turned into commands. Messages name formats, keys, paths and
/// positions, never content.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    /// The Secret's `format` is neither `cloud-config` nor `ignition`.
    #[error(
        "unsupported bootstrap data format {0:?}: expected \"cloud-config\" (the default) or \"ignition\""
    )]
    UnsupportedFormat(String),
    /// The data is empty (or only comments).
    #[error("{format} bootstrap data is empty")]
    Empty { format: Format },
    /// The data does not parse; `message` is the parser's problem and position.
    #[error("{format} bootstrap data is not valid {syntax}: {message}")]
    Syntax {
        format: Format,
        /// `YAML`, `JSON` or `UTF-8`.
        syntax: &'static str,
        message: String,
    },
    /// The document parses but its top level is not a mapping/object.
    #[error("{format} bootstrap data must be a mapping at the top level, found {found}{hint}")]
    NotAMapping {
        format: Format,
        found: &'static str,
        hint: &'static str,
    },
    /// The data is larger than any bootstrap Secret can hold.
    #[error(
        "{format} bootstrap data is {size} bytes, more than the {limit} bytes (1 MiB) accepted"
    )]
    TooLarge {
        format: Format,
        size: usize,
        limit: usize,
    },
    /// YAML aliases expand the document far past its own text ("billion laughs").
    #[error(
        "{format} bootstrap data expands past {nodes} nodes or {bytes} bytes of text once its YAML aliases are expanded; use fewer aliases"
    )]
    Expands {
        format: Format,
        nodes: u64,
        bytes: u64,
    },
    /// Something inside the document is invalid: `location` names the entry (`write_files[2]
    /// (/etc/foo)`, `storage.files[0] (/etc/bar)`, `runcmd[3]`), `reason` says what is wrong.
    #[error("{location}: {reason}")]
    Invalid { location: String, reason: String },
}

/// Facts about the node that shape the commands but are not in the bootstrap data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeOptions {
    /// The host (and so the node container) uses cgroup v1: the kubelet is told to accept it
    /// (`--fail-cgroupv1=false`; kubelet 1.35 refuses cgroup v1 otherwise).
    pub cgroup_v1: bool,
    /// The node image was built by kind v0.19 or older (upstream's kind mode 0.19, from the
    /// same table that runs such a container in the host's cgroup namespace): the kubelet is
    /// left its own `cgroup-root` and `runtime-cgroups`, as upstream leaves them; the `/kubelet`
    /// layout came with kind v0.20's private cgroup namespace.
    pub old_kind_image: bool,
}

/// What bootstrap data asks for: the commands, and the modules accepted but not honoured.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Planned {
    pub steps: Vec<Step>,
    /// cloud-config modules (and `users[i].key`s) a kind-style node cannot honour, in document
    /// order; names only, never values.
    pub skipped: Vec<String>,
}

/// Turn bootstrap data into the ordered list of commands to exec in the node container.
///
/// The kubeadm config file in the data (cloud-config `/run/kubeadm/kubeadm.yaml` or
/// `/run/kubeadm/kubeadm-join-config.yaml`, Ignition `/etc/kubeadm.yml`) is written rewritten for
/// a kind-style node: containerd `criSocket` when unset, the kubelet flags a node in a container
/// needs, and `conntrack.maxPerCore: 0` for kube-proxy.
pub fn commands(
    format: Format,
    data: &[u8],
    options: &NodeOptions,
) -> Result<Vec<Step>, BootstrapError> {
    plan(format, data, options).map(|p| p.steps)
}

/// [`commands`], and the modules skipped.
pub fn plan(format: Format, data: &[u8], options: &NodeOptions) -> Result<Planned, BootstrapError> {
    limits::check_size(format, data)?;
    match format {
        Format::CloudConfig => cloud_config::plan(data, options),
        Format::Ignition => ignition::commands(data, options).map(|steps| Planned {
            steps,
            skipped: vec![],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_parsing() {
        assert_eq!(Format::parse(None).unwrap(), Format::CloudConfig);
        assert_eq!(Format::parse(Some("")).unwrap(), Format::CloudConfig);
        assert_eq!(
            Format::parse(Some("cloud-config")).unwrap(),
            Format::CloudConfig
        );
        assert_eq!(Format::parse(Some("ignition")).unwrap(), Format::Ignition);
        assert_eq!(
            "ignition\n".parse::<Format>().unwrap(),
            Format::Ignition,
            "surrounding whitespace is tolerated"
        );
        let err = Format::parse(Some("cloudinit")).unwrap_err();
        assert_eq!(err, BootstrapError::UnsupportedFormat("cloudinit".into()));
        let msg = err.to_string();
        assert!(msg.contains("\"cloudinit\""), "{msg}");
        assert!(
            msg.contains("cloud-config") && msg.contains("ignition"),
            "{msg}"
        );
        assert_eq!(Format::Ignition.to_string(), "ignition");
        assert_eq!(Format::CloudConfig.as_str(), "cloud-config");
    }

    #[test]
    fn unsupported_format_value_is_bounded() {
        let long = "x".repeat(1000);
        let msg = Format::parse(Some(&long)).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
    }

    #[test]
    fn step_debug_hides_argv_and_stdin() {
        let step = Step {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "kubeadm join --token abcdef.0123456789abcdef".into(),
            ],
            stdin: Some(b"-----BEGIN PRIVATE KEY-----".to_vec()),
            description: "write /etc/x".into(),
        };
        let dbg = format!("{step:?}");
        assert!(!dbg.contains("abcdef"), "{dbg}");
        assert!(!dbg.contains("PRIVATE"), "{dbg}");
        assert!(dbg.contains("write /etc/x"), "{dbg}");
        assert!(dbg.contains("27"), "stdin size shown: {dbg}");
    }

    /// The written kubeadm config, parsed back.
    fn written_config(steps: &[Step], path: &str) -> Vec<serde_yaml_ng::Value> {
        use serde::Deserialize;
        let write = steps
            .iter()
            .find(|s| s.argv.len() == 4 && s.argv[3] == path && s.argv[2] == "cat > \"$0\"")
            .unwrap_or_else(|| panic!("no write of {path}: {steps:?}"));
        let text = String::from_utf8(write.stdin.clone().unwrap()).unwrap();
        serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
            .collect()
    }

    #[test]
    fn kubeadm_config_is_rewritten_in_both_formats() {
        let v1 = NodeOptions {
            cgroup_v1: true,
            ..NodeOptions::default()
        };
        let arg = |doc: &serde_yaml_ng::Value, name: &str| -> Option<String> {
            doc["nodeRegistration"]["kubeletExtraArgs"]
                .as_sequence()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .map(|e| e["value"].as_str().unwrap().to_string())
        };

        let steps = commands(
            Format::CloudConfig,
            include_bytes!("testdata/cabpk-init.yaml"),
            &v1,
        )
        .unwrap();
        let docs = written_config(&steps, "/run/kubeadm/kubeadm.yaml");
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "ClusterConfiguration",
                "InitConfiguration",
                "KubeProxyConfiguration"
            ]
        );
        assert_eq!(arg(&docs[1], "fail-cgroupv1").as_deref(), Some("false"));
        assert_eq!(arg(&docs[1], "cgroup-root").as_deref(), Some("/kubelet"));
        assert_eq!(docs[2]["conntrack"]["maxPerCore"], 0);
        assert!(
            steps
                .iter()
                .any(|s| s.argv == ["chmod", "0640", "/run/kubeadm/kubeadm.yaml"])
        );

        let steps = commands(
            Format::Ignition,
            include_bytes!("testdata/cabpk-ignition-v2.json"),
            &v1,
        )
        .unwrap();
        let docs = written_config(&steps, "/etc/kubeadm.yml");
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "ClusterConfiguration",
                "InitConfiguration",
                "KubeProxyConfiguration"
            ]
        );
        assert_eq!(
            docs[1]["bootstrapTokens"][0]["token"],
            "abcdef.0123456789abcdef"
        );
        assert_eq!(
            docs[1]["nodeRegistration"]["criSocket"],
            "unix:///var/run/containerd/containerd.sock"
        );
        assert_eq!(arg(&docs[1], "fail-cgroupv1").as_deref(), Some("false"));
        assert_eq!(
            arg(&docs[1], "image-gc-high-threshold").as_deref(),
            Some("100")
        );
        assert_eq!(docs[2]["conntrack"]["maxPerCore"], 0);
        for s in &steps {
            assert!(!s.description.contains("abcdef."), "{}", s.description);
        }
    }

    #[test]
    fn dispatches_on_format() {
        let opts = NodeOptions::default();
        let cc = commands(
            Format::CloudConfig,
            b"#cloud-config\nruncmd:\n  - [true]\n",
            &opts,
        )
        .unwrap();
        assert_eq!(cc.len(), 1);
        let ign = commands(
            Format::Ignition,
            br#"{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"a.service","enabled":true}]}}"#,
            &opts,
        )
        .unwrap();
        assert!(
            ign.iter()
                .any(|s| s.argv == ["systemctl", "enable", "--now", "a.service"])
        );
        // cloud-config handed over as ignition: parses as YAML, but is not an Ignition config.
        let err = commands(Format::Ignition, b"#cloud-config\nruncmd: []\n", &opts).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ignition.version: missing: an Ignition config must declare its spec version"
        );
    }
}
