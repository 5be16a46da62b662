//! Upstream CAPD's command line (cluster-api v1.14, `test/infrastructure/docker`), so that its
//! Deployment and the kustomize patches written for it start this manager unchanged:
//! - [`normalize`]: pflag's spelling rules turned into clap's (`--leader_elect`, `-v=2`);
//! - [`go_bool`]: Go's `strconv.ParseBool`, for every boolean flag;
//! - [`FeatureGates`]: `--feature-gates`, of which only `MachinePool` changes what runs here;
//! - [`Ignored`]: the upstream flags that have no meaning here, accepted so a manifest that
//!   passes them still starts, and named once in the log.
//!
//! docs/upstream-flags.md lists every upstream flag and what this manager does with it.
use std::{collections::BTreeMap, ffi::OsString};

use clap::Args;

/// The arguments with pflag's rules applied, for clap: in a long flag's name `_` is `-`
/// (component-base's `WordSepNormalizeFunc`, which upstream installs), and klog's `-v`/`--v`
/// keeps its value whatever the form. Values, and everything after `--`, are left alone.
pub fn normalize<I, T>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut out = Vec::new();
    let mut rest = false;
    for arg in args.into_iter().map(Into::into) {
        let normalized = match arg.to_str() {
            Some("--") => {
                rest = true;
                None
            }
            Some(s) if !rest && s.starts_with("--") && s.len() > 2 => {
                let (name, value) = match s.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (s, None),
                };
                let name = name.replace('_', "-");
                Some(match value {
                    Some(v) => format!("{name}={v}"),
                    None => name,
                })
            }
            _ => None,
        };
        out.push(normalized.map(OsString::from).unwrap_or(arg));
    }
    out
}

/// Go's `strconv.ParseBool`, which pflag uses for `--flag=<bool>`.
pub fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (true, false, 1, 0, t, f)")),
    }
}

/// Our log level for klog's verbosity `-v=N`. Upstream logs at 2 by default, its usual
/// progress messages at 0 to 2, details at 4, and request-level noise from 5 on.
pub fn log_level_for_verbosity(v: u32) -> &'static str {
    match v {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    }
}

/// Cluster API's feature gates (`sig.k8s.io/cluster-api/feature`, v1.14) and their defaults.
/// `AllAlpha`/`AllBeta` are component-base's toggles for every gate of that stage.
const GATES: &[(&str, Stage, bool)] = &[
    (
        "MachineWaitForVolumeDetachConsiderVolumeAttachments",
        Stage::Ga,
        true,
    ),
    ("MachinePool", Stage::Beta, true),
    ("MachineSetPreflightChecks", Stage::Beta, true),
    ("PriorityQueue", Stage::Beta, true),
    ("ReconcilerRateLimiting", Stage::Beta, true),
    ("ClusterTopology", Stage::Alpha, false),
    ("KubeadmBootstrapFormatIgnition", Stage::Alpha, false),
    ("RuntimeSDK", Stage::Alpha, false),
    ("InPlaceUpdates", Stage::Alpha, false),
    ("MachineTaintPropagation", Stage::Alpha, false),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Alpha,
    Beta,
    Ga,
}

/// `--feature-gates=Name=bool,...` as upstream reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// Every known gate with its resulting value.
    pub enabled: BTreeMap<String, bool>,
    /// Names upstream does not know (upstream refuses to start; we log them and go on, so a
    /// manifest written for a later release still starts).
    pub unknown: Vec<String>,
}

impl FeatureGates {
    /// Parse the flag's value: `key=bool` pairs separated by commas, empty pairs skipped.
    pub fn parse(value: &str) -> Result<Self, String> {
        let mut given = BTreeMap::new();
        for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("--feature-gates: missing bool value for {pair}"))?;
            let b = go_bool(v.trim()).map_err(|e| format!("--feature-gates: {}: {e}", k.trim()))?;
            given.insert(k.trim().to_string(), b);
        }
        let all = |stage| match stage {
            Stage::Alpha => given.get("AllAlpha").copied(),
            Stage::Beta => given.get("AllBeta").copied(),
            Stage::Ga => None,
        };
        let enabled = GATES
            .iter()
            .map(|&(name, stage, default)| {
                let v = given.get(name).copied().or(all(stage)).unwrap_or(default);
                (name.to_string(), v)
            })
            .collect();
        let unknown = given
            .keys()
            .filter(|k| {
                !matches!(k.as_str(), "AllAlpha" | "AllBeta") && !GATES.iter().any(|g| g.0 == *k)
            })
            .cloned()
            .collect();
        Ok(Self { enabled, unknown })
    }

    /// Whether the DockerMachinePool and DevMachinePool controllers run (as upstream).
    pub fn machine_pool(&self) -> bool {
        self.enabled.get("MachinePool").copied().unwrap_or(true)
    }
}

/// Upstream flags with no meaning here: accepted (with upstream's value types, so a typo in a
/// number fails as it would upstream) and named once in the start-up log.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Upstream CAPD flags accepted and ignored (docs/upstream-flags.md)")]
pub struct Ignored {
    /// pprof: not served by this manager.
    #[arg(long, value_name = "ADDR")]
    pub profiler_address: Option<String>,
    /// Go block profiling: no Go runtime here.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
    pub contention_profiling: Option<bool>,
    /// No DockerMachineTemplate controller here.
    #[arg(long, value_name = "N")]
    pub dockermachinetemplate_concurrency: Option<i64>,
    /// No DevMachineTemplate controller here.
    #[arg(long, value_name = "N")]
    pub devmachinetemplate_concurrency: Option<i64>,
    /// No ClusterCache: workload clusters are reached per reconcile.
    #[arg(long, value_name = "N")]
    pub clustercache_concurrency: Option<i64>,
    /// No ClusterCache (see above).
    #[arg(long, value_name = "QPS")]
    pub clustercache_client_qps: Option<f32>,
    /// No ClusterCache (see above).
    #[arg(long, value_name = "N")]
    pub clustercache_client_burst: Option<i64>,
    /// No client-side rate limit in the kube client here.
    #[arg(long, value_name = "QPS")]
    pub kube_api_qps: Option<f32>,
    /// No client-side rate limit in the kube client here.
    #[arg(long, value_name = "N")]
    pub kube_api_burst: Option<i64>,
    /// No CRD storage-version migrator here.
    #[arg(long, value_name = "PHASES")]
    pub skip_crd_migration_phases: Option<String>,
    /// rustls picks the key exchange groups.
    #[arg(long, value_name = "IDS")]
    pub tls_curve_preferences: Option<String>,
    /// klog per-file verbosity: no klog here.
    #[arg(long, value_name = "PATTERN=N")]
    pub vmodule: Option<String>,
    /// Logs are written unbuffered here.
    #[arg(long, value_name = "DURATION")]
    pub log_flush_frequency: Option<String>,
    /// One log stream here.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
    pub log_text_split_stream: Option<bool>,
    /// One log stream here.
    #[arg(long, value_name = "SIZE")]
    pub log_text_info_buffer_size: Option<String>,
    /// One log stream here.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = go_bool)]
    pub log_json_split_stream: Option<bool>,
    /// One log stream here.
    #[arg(long, value_name = "SIZE")]
    pub log_json_info_buffer_size: Option<String>,
}

impl Ignored {
    /// `--flag=value` of each ignored flag that was given, for the start-up log.
    pub fn given(&self) -> Vec<String> {
        fn one<T: std::fmt::Display>(out: &mut Vec<String>, name: &str, v: &Option<T>) {
            if let Some(v) = v {
                out.push(format!("--{name}={v}"));
            }
        }
        let mut out = Vec::new();
        one(&mut out, "profiler-address", &self.profiler_address);
        one(&mut out, "contention-profiling", &self.contention_profiling);
        one(
            &mut out,
            "dockermachinetemplate-concurrency",
            &self.dockermachinetemplate_concurrency,
        );
        one(
            &mut out,
            "devmachinetemplate-concurrency",
            &self.devmachinetemplate_concurrency,
        );
        one(
            &mut out,
            "clustercache-concurrency",
            &self.clustercache_concurrency,
        );
        one(
            &mut out,
            "clustercache-client-qps",
            &self.clustercache_client_qps,
        );
        one(
            &mut out,
            "clustercache-client-burst",
            &self.clustercache_client_burst,
        );
        one(&mut out, "kube-api-qps", &self.kube_api_qps);
        one(&mut out, "kube-api-burst", &self.kube_api_burst);
        one(
            &mut out,
            "skip-crd-migration-phases",
            &self.skip_crd_migration_phases,
        );
        one(
            &mut out,
            "tls-curve-preferences",
            &self.tls_curve_preferences,
        );
        one(&mut out, "vmodule", &self.vmodule);
        one(&mut out, "log-flush-frequency", &self.log_flush_frequency);
        one(
            &mut out,
            "log-text-split-stream",
            &self.log_text_split_stream,
        );
        one(
            &mut out,
            "log-text-info-buffer-size",
            &self.log_text_info_buffer_size,
        );
        one(
            &mut out,
            "log-json-split-stream",
            &self.log_json_split_stream,
        );
        one(
            &mut out,
            "log-json-info-buffer-size",
            &self.log_json_info_buffer_size,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_word_separators_in_long_flag_names_only() {
        let out = normalize([
            "manager",
            "--leader_elect",
            "--webhook_cert_dir=/a_b",
            "--watch-filter",
            "x_y",
            "-v=3",
            "--",
            "--not_a_flag",
        ]);
        let out: Vec<&str> = out.iter().map(|s| s.to_str().unwrap()).collect();
        assert_eq!(
            out,
            [
                "manager",
                "--leader-elect",
                "--webhook-cert-dir=/a_b",
                "--watch-filter",
                "x_y",
                "-v=3",
                "--",
                "--not_a_flag"
            ]
        );
    }

    #[test]
    fn go_booleans() {
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(go_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(go_bool(f), Ok(false), "{f}");
        }
        assert!(go_bool("yes").is_err());
    }

    #[test]
    fn feature_gates_as_upstream_reads_them() {
        let g = FeatureGates::parse(
            "MachinePool=false,ClusterTopology=true,PriorityQueue=true,ReconcilerRateLimiting=true",
        )
        .unwrap();
        assert!(!g.machine_pool());
        assert!(g.enabled["ClusterTopology"]);
        assert!(g.unknown.is_empty());
        // Defaults, AllBeta, an unknown gate (logged, not fatal), bad values (fatal).
        assert!(FeatureGates::parse("").unwrap().machine_pool());
        assert!(!FeatureGates::parse("AllBeta=false").unwrap().machine_pool());
        assert!(
            FeatureGates::parse("AllBeta=false,MachinePool=true")
                .unwrap()
                .machine_pool()
        );
        assert_eq!(
            FeatureGates::parse("Later=true").unwrap().unknown,
            ["Later"]
        );
        assert!(
            FeatureGates::parse("MachinePool=maybe")
                .unwrap_err()
                .contains("MachinePool")
        );
        assert!(FeatureGates::parse("MachinePool").is_err());
    }

    #[test]
    fn verbosity_to_level() {
        assert_eq!(log_level_for_verbosity(0), "info");
        assert_eq!(log_level_for_verbosity(2), "info");
        assert_eq!(log_level_for_verbosity(4), "debug");
        assert_eq!(log_level_for_verbosity(10), "trace");
    }
}
