//! `DockerMachine`: one workload-cluster node as a container.
use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Deprecated, Initialization, MachineAddress, Mount};
use super::conditions::Condition;

// Annotations capd-rs keeps on a DockerMachine (DevMachine) for its restart-safe bootstrap.
/// When the current bootstrap of the node container started (RFC 3339), for a start made again
/// in an existing container; the pass that creates a container records its start on the
/// container instead (the label `capd-rs.x-k8s.io/bootstrap-start`), and the later one counts.
pub const STARTED_AT: &str = "capd-rs.x-k8s.io/bootstrap-started-at";
/// The token the current bootstrap claims the node's commands with, in the node's
/// `/var/lib/capd-rs/bootstrap-claim` (the start time, as [`STARTED_AT`]). Written with
/// [`STARTED_AT`] by managers whose runs claim first; a start on record without it was made by an
/// older manager, whose run may have begun its commands unclaimed.
pub const BOOTSTRAP_CLAIM: &str = "capd-rs.x-k8s.io/bootstrap-claim";
/// Set when the node container stopped while its bootstrap ran: the inputs it ran with
/// (`controllers::docker_machine::node::bootstrap_inputs`). The node is recreated once (an engine
/// restart stops it too); after a second stop, not until they change.
pub const STOPPED_DURING_BOOTSTRAP: &str = "capd-rs.x-k8s.io/node-stopped-during-bootstrap";

/// Go `time.Duration` syntax, as `metav1.Duration` accepts it ("5m", "1h30m", "90s").
pub const DURATION_PATTERN: &str =
    r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// Default for `spec.bootstrapTimeout`, as upstream.
pub const DEFAULT_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Desired state of a DockerMachine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "DockerMachine",
    plural = "dockermachines",
    namespaced,
    status = "DockerMachineStatus",
    category = "cluster-api",
    printcolumn = r#"{"name":"Cluster","type":"string","description":"Cluster","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"}"#,
    printcolumn = r#"{"name":"Provider ID","type":"string","description":"Provider ID","jsonPath":".spec.providerID","priority":10}"#,
    printcolumn = r#"{"name":"Failure domain","type":"string","description":"The failure domain where the DockerMachine has been scheduled","jsonPath":".status.failureDomain"}"#,
    printcolumn = r#"{"name":"IP","type":"string","description":"IP of the Machine","jsonPath":".status.addresses[?(@.type==\"InternalIP\")].address","priority":10}"#,
    printcolumn = r#"{"name":"Paused","type":"string","description":"Reconciliation paused","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","priority":10}"#,
    printcolumn = r#"{"name":"Provisioned","type":"string","description":"DockerMachine is provisioned","jsonPath":".status.initialization.provisioned"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Time duration since creation of DockerMachine","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachineSpec {
    /// `docker:////<container>`; set by the controller.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// Node image to use instead of the one chosen from the Machine's Kubernetes version. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::image_reference")]
    pub custom_image: Option<String>,
    /// Images saved from the host's Docker Engine and imported into the node (needs `ctr` in the
    /// node image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_load_images: Option<Vec<String>>,
    /// Host paths to mount into the node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_mounts: Option<Vec<Mount>>,
    /// Deprecated: set to true by the controller once bootstrap succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrapped: Option<bool>,
    /// How long bootstrap may take (Go duration, default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub bootstrap_timeout: Option<String>,
}

/// Observed state of a DockerMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerMachineStatus {
    /// Conditions: Ready, Paused, ContainerProvisioned, CGroupsReady, PreLoadedImagesReady,
    /// BootstrapCompleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// Provisioning state of the v1beta2 contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Kept equal to `initialization.provisioned` for readers of the older contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Whether this control-plane node has been added to the load balancer.
    #[serde(default)]
    pub load_balancer_configured: bool,
    /// Hostname and IPs of the node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// The failure domain of the Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// Fields of the v1beta1 contract (not written by this provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated>,
}

/// Parse a Go duration string ("1h2m3.5s", ".5s", "-1m", "0"), as Go's `time.ParseDuration`
/// reads it. `None` for anything [`DURATION_PATTERN`] rejects, and for a duration too long
/// to represent (Go refuses those too). A negative duration is zero: the timeout has passed.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let (negative, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if unsigned.is_empty() {
        return None;
    }
    if unsigned == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = unsigned;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..num_len];
        // Go wants a digit on at least one side of the point.
        if !number.bytes().any(|b| b.is_ascii_digit()) {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[num_len..];
        let (unit, secs) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6), // U+00B5 micro sign
            ("μs", 1e-6), // U+03BC Greek small letter mu
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .filter(|(u, _)| rest.starts_with(u))
        .max_by_key(|(u, _)| u.len())?;
        rest = &rest[unit.len()..];
        total += value * secs;
    }
    if negative {
        return Some(Duration::ZERO);
    }
    // Go's limit is about 292 years (i64 nanoseconds).
    if total > i64::MAX as f64 / 1e9 {
        return None;
    }
    Duration::try_from_secs_f64(total).ok()
}

impl DockerMachine {
    /// The bootstrap timeout from the spec, else `default`.
    pub fn bootstrap_timeout(&self, default: Duration) -> Duration {
        self.spec
            .bootstrap_timeout
            .as_deref()
            .and_then(parse_go_duration)
            .unwrap_or(default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("+2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(
            parse_go_duration("-1m"),
            Some(Duration::ZERO),
            "already passed"
        );
        assert_eq!(parse_go_duration("3μs"), Some(Duration::from_micros(3)));
        assert_eq!(parse_go_duration("3µs"), Some(Duration::from_micros(3)));
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration("m5"), None);
        assert_eq!(parse_go_duration(".s"), None);
        assert_eq!(parse_go_duration("5 minutes"), None);
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration("-"), None);
        assert_eq!(parse_go_duration("99999999999999999999h"), None, "no panic");
    }

    #[test]
    fn duration_pattern_agrees_with_parser() {
        let re = regex::Regex::new(DURATION_PATTERN).unwrap();
        for ok in [
            "5m", "1h30m", "1.5s", "10ms", ".5s", "1.s", "0", "-1m", "+3h", "2μs", "2µs",
        ] {
            assert!(re.is_match(ok) && parse_go_duration(ok).is_some(), "{ok}");
        }
        for bad in ["5", "m", "5 m", ".s", "five", "--1m", "1m-", ""] {
            assert!(
                !re.is_match(bad) && parse_go_duration(bad).is_none(),
                "{bad}"
            );
        }
    }
}
