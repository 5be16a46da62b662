//! The report of a run of upstream Cluster API's e2e specs against capd-rs (`hack/upstream-e2e.sh`):
//! every `Describe` of upstream's `test/e2e` (module `sigs.k8s.io/cluster-api/test` v1.14) for the
//! Docker provider, with what the run's Ginkgo JSON report says about it, as a Markdown table.
//!
//! The catalogue below is the one place that says which upstream spec our suite runs under which
//! label (`hack/upstream-e2e/specs_test.go`), and, for the others, why not.
use std::{collections::BTreeMap, fmt::Write as _};

use serde::Deserialize;

/// How our suite covers one upstream `Describe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Run under this Ginkgo label of `hack/upstream-e2e/specs_test.go`, with upstream's input.
    Label(&'static str),
    /// Not run here, for this reason.
    NotRunnable(&'static str),
}

/// One upstream `Describe`: its file in upstream's `test/e2e` and what it tests, in our words.
#[derive(Clone, Copy, Debug)]
pub struct UpstreamSpec {
    pub file: &'static str,
    pub what: &'static str,
    pub coverage: Coverage,
}

use Coverage::{Label, NotRunnable};

const IN_MEMORY: &str = "starts from an older release's management cluster (clusterctl and upstream's providers of that release, with CAPD's in-memory backend for the workload cluster), which the spec downloads from GitHub; building them from the Go module proxy is not wired yet";
const CONFORMANCE: &str = "needs the Kubernetes conformance image, which cannot be built offline";

/// Every `Describe` of upstream's `test/e2e` v1.14 (39), in file order.
pub const UPSTREAM_SPECS: &[UpstreamSpec] = &[
    spec(
        "autoscaler_test.go",
        "autoscaler with ClusterClass",
        NotRunnable(
            "needs cluster-autoscaler built from the Go module proxy and the autoscaler flavor's workload manifest; not tried yet",
        ),
    ),
    spec(
        "cluster_deletion_test.go",
        "cluster deletion phases with ClusterClass",
        Label("cluster-deletion"),
    ),
    spec(
        "cluster_in_place_update_test.go",
        "in-place update with ClusterClass",
        Label("in-place-update"),
    ),
    spec(
        "cluster_upgrade_runtimesdk_test.go",
        "upgrade with RuntimeSDK",
        Label("cluster-upgrade-runtimesdk"),
    ),
    spec(
        "cluster_upgrade_runtimesdk_test.go",
        "upgrade with RuntimeSDK, ClusterClass in another namespace",
        Label("cluster-upgrade-runtimesdk-cross-ns"),
    ),
    spec(
        "cluster_upgrade_runtimesdk_test.go",
        "chained upgrades with RuntimeSDK",
        NotRunnable(
            "chains upgrades from KUBERNETES_VERSION_CHAINED_UPGRADE_FROM, four minors below the \
             target, through every minor to it: five node images, one per minor",
        ),
    ),
    spec(
        "cluster_upgrade_test.go",
        "upgrade and conformance",
        NotRunnable(CONFORMANCE),
    ),
    spec(
        "cluster_upgrade_test.go",
        "upgrade with ClusterClass",
        Label("cluster-upgrade"),
    ),
    spec(
        "cluster_upgrade_test.go",
        "upgrade with a HA control plane",
        Label("cluster-upgrade-ha"),
    ),
    spec(
        "cluster_upgrade_test.go",
        "upgrade with a HA control plane, scale-in rollout",
        Label("cluster-upgrade-ha-scale-in"),
    ),
    spec(
        "clusterclass_changes_test.go",
        "ClusterClass changes",
        Label("clusterclass-changes"),
    ),
    spec(
        "clusterclass_rollout_test.go",
        "ClusterClass rollouts",
        Label("clusterclass-rollout"),
    ),
    spec(
        "clusterctl_upgrade_test.go",
        "clusterctl upgrade v1.11 to current",
        NotRunnable(IN_MEMORY),
    ),
    spec(
        "clusterctl_upgrade_test.go",
        "clusterctl upgrade v1.12 to current",
        NotRunnable(IN_MEMORY),
    ),
    spec(
        "clusterctl_upgrade_test.go",
        "clusterctl upgrade v1.13 to current",
        NotRunnable(IN_MEMORY),
    ),
    spec(
        "clusterctl_upgrade_test.go",
        "clusterctl upgrade v1.13 to current, latest CI management cluster",
        NotRunnable("needs Kubernetes' latest CI build, which is not on the Go module proxy"),
    ),
    spec(
        "k8s_conformance_test.go",
        "conformance",
        NotRunnable(CONFORMANCE),
    ),
    spec(
        "k8s_conformance_test.go",
        "conformance on latest CI Kubernetes",
        NotRunnable(CONFORMANCE),
    ),
    spec(
        "kcp_adoption_test.go",
        "KCP adopts hand-made control-plane Machines",
        // Runs at KUBERNETES_VERSION_ADOPTION (v1.36.3): for 1.31 <= v < 1.36 KCP adds the
        // ControlPlaneKubeletLocalMode gate to the config it wants, so the Machines it adopts
        // look outdated and are rolled out (seen at v1.35.4). hack/upstream-e2e/config.yaml.
        Label("kcp-adoption"),
    ),
    spec(
        "kcp_infra_adoption_test.go",
        "KCP infrastructure adoption",
        Label("kcp-infra-adoption"),
    ),
    spec(
        "kcp_md_rollout_test.go",
        "KCP and MachineDeployment rollout, taint propagation",
        Label("kcp-md-rollout"),
    ),
    spec(
        "kcp_remediations_test.go",
        "KCP remediation",
        Label("kcp-remediation"),
    ),
    spec(
        "kubeadm_join_old_nodes_test.go",
        "kubeadm join of an older worker",
        NotRunnable(
            "its flavor's fetch-kubeadm.sh downloads kubeadm from dl.k8s.io (the URL is fixed in the \
             flavor; this host is offline and calls no outside address)",
        ),
    ),
    spec(
        "machine_pool_test.go",
        "MachinePools",
        Label("machine-pool"),
    ),
    spec(
        "md_remediations_test.go",
        "MachineDeployment remediation",
        Label("md-remediation"),
    ),
    spec(
        "md_scale_test.go",
        "MachineDeployment scale out/in",
        Label("md-scale"),
    ),
    spec(
        "node_drain_test.go",
        "Node drain with volume detach",
        Label("node-drain"),
    ),
    spec("quick_start_test.go", "quick-start", Label("quick-start")),
    spec(
        "quick_start_test.go",
        "quick-start with ClusterClass",
        Label("quick-start-clusterclass"),
    ),
    spec(
        "quick_start_test.go",
        "quick-start with v1beta1 ClusterClass",
        Label("quick-start-v1beta1-clusterclass"),
    ),
    spec(
        "quick_start_test.go",
        "quick-start with IPv6",
        Label("quick-start-ipv6"),
    ),
    spec(
        "quick_start_test.go",
        "quick-start with Ignition",
        Label("quick-start-ignition"),
    ),
    spec(
        "quick_start_test.go",
        "quick-start dual-stack, IPv4 primary",
        Label("quick-start-dualstack-ipv4-primary"),
    ),
    spec(
        "quick_start_test.go",
        "quick-start dual-stack, IPv6 primary",
        Label("quick-start-dualstack-ipv6-primary"),
    ),
    spec(
        "quick_start_test.go",
        "quick-start with ClusterClass without workers",
        Label("quick-start-no-workers"),
    ),
    spec("scale_test.go", "scale", Label("scale")),
    spec(
        "self_hosted_test.go",
        "self-hosted with ClusterClass",
        Label("self-hosted"),
    ),
    spec(
        "self_hosted_test.go",
        "self-hosted with ClusterClass, HA control plane",
        Label("self-hosted-ha"),
    ),
    spec(
        "self_hosted_test.go",
        "self-hosted single node with ClusterClass",
        Label("self-hosted-single-node"),
    ),
];

const fn spec(file: &'static str, what: &'static str, coverage: Coverage) -> UpstreamSpec {
    UpstreamSpec {
        file,
        what,
        coverage,
    }
}

/// The parts of a Ginkgo JSON report (`-ginkgo.json-report`) the table needs.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Suite {
    #[serde(default)]
    spec_reports: Vec<SpecReport>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SpecReport {
    #[serde(default)]
    container_hierarchy_labels: Option<Vec<Vec<String>>>,
    #[serde(default)]
    leaf_node_type: String,
    #[serde(default)]
    state: String,
    /// Nanoseconds.
    #[serde(default)]
    run_time: u64,
    #[serde(default)]
    failure: Option<Failure>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Failure {
    #[serde(default)]
    message: String,
}

/// What a run showed for one label.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Passed {
        seconds: f64,
    },
    Failed {
        seconds: f64,
        message: String,
    },
    /// In the suite, not selected by this run's label filter (or skipped).
    NotRun,
}

/// The outcome of every label the report ran, from a Ginkgo JSON report.
pub fn outcomes(report_json: &str) -> Result<BTreeMap<String, Outcome>, serde_json::Error> {
    let suites: Vec<Suite> = serde_json::from_str(report_json)?;
    let mut out = BTreeMap::new();
    for r in suites.iter().flat_map(|s| &s.spec_reports) {
        if r.leaf_node_type != "It" {
            continue;
        }
        let seconds = r.run_time as f64 / 1e9;
        let outcome = match r.state.as_str() {
            "passed" => Outcome::Passed { seconds },
            "skipped" | "pending" => Outcome::NotRun,
            _ => Outcome::Failed {
                seconds,
                message: r
                    .failure
                    .as_ref()
                    .map(|f| first_line(&f.message))
                    .unwrap_or_else(|| r.state.clone()),
            },
        };
        for label in r.container_hierarchy_labels.iter().flatten().flatten() {
            out.insert(label.clone(), outcome.clone());
        }
    }
    Ok(out)
}

/// The labels a dry run (`-ginkgo.dry-run`) selected: a dry run reports every spec its filter
/// selects as passed, without running it, and the others as skipped.
pub fn selected(outcomes: &BTreeMap<String, Outcome>) -> Vec<&str> {
    outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Passed { .. }))
        .map(|(label, _)| label.as_str())
        .collect()
}

fn first_line(s: &str) -> String {
    let line = s.trim().lines().next().unwrap_or("").trim();
    let cut: String = line.chars().take(160).collect();
    cut.replace('|', "\\|")
}

/// Counts of the table's rows.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub passed: usize,
    pub failed: usize,
    pub not_run: usize,
    pub not_runnable: usize,
}

/// The Markdown table of every upstream `Describe` with this run's outcome, and its tally.
pub fn markdown(outcomes: &BTreeMap<String, Outcome>, heading: &str) -> (String, Tally) {
    let mut t = Tally::default();
    let mut md = format!(
        "{heading}\n\n| # | Upstream spec (`test/e2e/`) | Label here | Result | Minutes |\n|---|---|---|---|---|\n"
    );
    for (i, s) in UPSTREAM_SPECS.iter().enumerate() {
        let (label, result, minutes) = match s.coverage {
            NotRunnable(reason) => {
                t.not_runnable += 1;
                (
                    "".to_string(),
                    format!("not runnable here: {reason}"),
                    String::new(),
                )
            }
            Label(l) => match outcomes.get(l) {
                Some(Outcome::Passed { seconds }) => {
                    t.passed += 1;
                    (
                        format!("`{l}`"),
                        "pass".into(),
                        format!("{:.1}", seconds / 60.0),
                    )
                }
                Some(Outcome::Failed { seconds, message }) => {
                    t.failed += 1;
                    (
                        format!("`{l}`"),
                        format!("FAIL: {message}"),
                        format!("{:.1}", seconds / 60.0),
                    )
                }
                Some(Outcome::NotRun) | None => {
                    t.not_run += 1;
                    (
                        format!("`{l}`"),
                        "not run in this run".into(),
                        String::new(),
                    )
                }
            },
        };
        let _ = writeln!(
            md,
            "| {} | {}: {} | {label} | {result} | {minutes} |",
            i + 1,
            s.file,
            s.what
        );
    }
    let _ = writeln!(
        md,
        "\n{} pass, {} fail, {} not run in this run, {} not runnable here (of {}).",
        t.passed,
        t.failed,
        t.not_run,
        t.not_runnable,
        UPSTREAM_SPECS.len()
    );
    (md, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_has_every_upstream_describe_and_labels_are_unique() {
        assert_eq!(UPSTREAM_SPECS.len(), 39);
        let mut labels: Vec<_> = UPSTREAM_SPECS
            .iter()
            .filter_map(|s| match s.coverage {
                Label(l) => Some(l),
                NotRunnable(_) => None,
            })
            .collect();
        let n = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), n, "a label names one upstream spec");
    }

    /// Every label the catalogue names is a `Label("…")` of the suite, so a renamed spec cannot
    /// silently turn into "not run".
    #[test]
    fn every_label_is_one_of_the_suite() {
        let suite = include_str!("../../hack/upstream-e2e/specs_test.go");
        for s in UPSTREAM_SPECS {
            if let Label(l) = s.coverage {
                assert!(
                    suite.contains(&format!("Label(\"{l}\")")),
                    "{l} is not a label of hack/upstream-e2e/specs_test.go"
                );
            }
        }
    }

    #[test]
    fn a_report_becomes_rows_with_pass_fail_and_not_run() {
        let json = r#"[{"SpecReports":[
          {"LeafNodeType":"BeforeSuite","State":"passed","RunTime":1},
          {"ContainerHierarchyLabels":[["quick-start"]],"LeafNodeType":"It","State":"passed","RunTime":312000000000},
          {"ContainerHierarchyLabels":[["md-remediation"]],"LeafNodeType":"It","State":"failed","RunTime":60000000000,
           "Failure":{"Message":"Timed out after 300s.\nmore | detail"}},
          {"ContainerHierarchyLabels":[["md-scale"]],"LeafNodeType":"It","State":"skipped","RunTime":0}
        ]}]"#;
        let o = outcomes(json).unwrap();
        assert_eq!(o["quick-start"], Outcome::Passed { seconds: 312.0 });
        assert_eq!(o["md-scale"], Outcome::NotRun);
        let (md, tally) = markdown(&o, "## run");
        assert_eq!(tally.passed, 1);
        assert_eq!(tally.failed, 1);
        assert_eq!(
            tally.passed + tally.failed + tally.not_run + tally.not_runnable,
            39
        );
        assert!(
            md.contains("| quick_start_test.go: quick-start | `quick-start` | pass | 5.2 |"),
            "{md}"
        );
        assert!(md.contains("FAIL: Timed out after 300s. |"), "{md}");
        assert!(md.contains("not runnable here: needs the Kubernetes conformance image"));
        assert_eq!(
            md.lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| #"))
                .count(),
            39
        );
    }

    #[test]
    fn a_dry_run_selects_the_labels_it_reports_passed() {
        let report = r#"[{"SpecReports": [
            {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
            {"LeafNodeType": "It", "State": "passed", "ContainerHierarchyLabels": [["self-hosted"]]},
            {"LeafNodeType": "It", "State": "skipped", "ContainerHierarchyLabels": [["kcp-adoption"]]},
            {"LeafNodeType": "It", "State": "passed", "ContainerHierarchyLabels": [["scale"]]}
        ]}]"#;
        let outcomes = outcomes(report).unwrap();
        assert_eq!(selected(&outcomes), ["scale", "self-hosted"]);
    }
}
