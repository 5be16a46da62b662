//! `cargo run -p xtask -- <task>`: see `--help`.
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::{Parser, Subcommand};
use xtask::bench::{nodes::NodeShape, objects::LightLoad};

#[derive(Parser)]
#[command(about = "capd-rs project tasks (reports and plots of measured runs)")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// capd-rs, upstream CAPD and the floor provisioning N light machines each, side by side on
    /// the local plane (run through `hack/bench.sh`, which prepares its inputs).
    Bench(Box<BenchArgs>),
    /// The engine alone removing N running node containers of one network, each count of
    /// `--at-once` in turn, in rounds (the measurement behind the engine adapter's removal cap).
    Removals {
        /// The engine's socket.
        #[arg(long, default_value = "unix:///var/run/docker.sock")]
        docker_host: String,
        /// The node image (hack/bench.sh builds capd-rs-bench/node:light).
        #[arg(long, default_value = "capd-rs-bench/node:light")]
        image: String,
        #[arg(long, default_value_t = 100)]
        n: usize,
        #[arg(long, value_delimiter = ',', default_value = "4,100")]
        at_once: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds one removal phase may take before the engine counts as hung.
        #[arg(long, default_value_t = 180)]
        timeout: u64,
    },
    /// Re-draw the table and plot of a bench result.
    BenchReport {
        json: PathBuf,
        png: PathBuf,
        #[arg(
            long,
            default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
        )]
        font: PathBuf,
    },
    /// The Markdown table of every upstream e2e `Describe` with what a run of
    /// `hack/upstream-e2e.sh` showed for it (from its Ginkgo JSON report); exits non-zero when a
    /// spec failed.
    E2eReport {
        /// The run's Ginkgo JSON report.
        json: PathBuf,
        /// Where to write the table (it is printed too).
        markdown: PathBuf,
        /// The table's heading (e.g. the date and commit of the run).
        #[arg(long, default_value = "## Upstream e2e specs against capd-rs")]
        heading: String,
    },
    /// The labels a dry run of the upstream e2e suite selected, one per line (from its Ginkgo
    /// JSON report): what `hack/upstream-e2e.sh` must prepare for a label filter.
    E2eSelected {
        /// The dry run's Ginkgo JSON report.
        json: PathBuf,
    },
    /// Print the fault matrix as a Markdown table from the rows the fault tests wrote.
    FaultsTable {
        /// Directory of the rows (`tests/faults.rs` writes `$CARGO_TARGET_TMPDIR/faults`).
        dir: PathBuf,
        /// The goal for acting on a new object after a fault, in seconds: rows that miss it,
        /// or lost, duplicated or leaked anything, are named after the table (the tests hold
        /// each fault to its bound and fail on their own).
        #[arg(long, default_value_t = 5.0)]
        act_goal: f64,
    },
    /// Plot a soak's series (JSON from `tests/soak.rs`) into a PNG and say whether it stayed
    /// flat after warm-up.
    /// Remove the test executables and incremental directories of the shared cargo target that
    /// nothing built or ran for `--keep-days` (earlier checkouts leave theirs behind), then fail
    /// unless `--min-free-gib` is free on its file system.
    PruneTarget {
        dir: PathBuf,
        #[arg(long, default_value_t = 2)]
        keep_days: u64,
        #[arg(long, default_value_t = 15)]
        min_free_gib: u64,
    },
    SoakPlot {
        json: PathBuf,
        png: PathBuf,
        /// A TrueType font for the labels.
        #[arg(
            long,
            default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
        )]
        font: PathBuf,
    },
}

#[derive(clap::Args)]
struct BenchArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Light loads, in the order run (none given: no light workload): `N` machines in one
    /// Cluster, or `clusters:K:N`, the same N spread evenly over K Clusters, each in a namespace
    /// of its own (the remainder one each to the first Clusters).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N|clusters:K:N",
        value_parser = LightLoad::parse
    )]
    n: Vec<LightLoad>,
    /// Also run the real-node workload, after the light ones: one run per shape `C+W` (C control
    /// planes + W workers, to all Nodes Ready), in the order given; alone, 1+2. With the
    /// `--nodes-*` settings.
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 0..=1,
        default_missing_value = "1+2",
        value_name = "C+W",
        value_parser = NodeShape::parse
    )]
    real_nodes: Vec<NodeShape>,
    /// clusterctl, to render the real-node workload from `--nodes-template`.
    #[arg(long, requires = "real_nodes")]
    nodes_clusterctl: Option<PathBuf>,
    #[arg(long, requires = "real_nodes")]
    nodes_template: Option<PathBuf>,
    /// e.g. v1.35.4.
    #[arg(long, requires = "real_nodes")]
    nodes_kubernetes_version: Option<String>,
    /// The kind-style node image of that version.
    #[arg(long, requires = "real_nodes")]
    nodes_image: Option<String>,
    /// In-memory loads, after the others: `N` (one cluster of 1 control plane + N-1 workers)
    /// or `pairs:N` (N/2 clusters of 1 + 1); both providers, no floor.
    #[arg(long, value_delimiter = ',')]
    in_memory: Vec<String>,
    /// The Kubernetes version of the in-memory machines, e.g. v1.35.4.
    #[arg(long, default_value = "v1.35.4")]
    in_memory_version: String,
    /// Shell command run after each swap of the Docker* CRDs (CAPI's caches).
    #[arg(long)]
    after_crd_swap: Option<String>,
    /// The plane's audit log (`hack/plane.sh audit-log`): each manager runs as a ServiceAccount
    /// of its own and its requests are counted there too.
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// The `partial.json` of an unfinished run of the same command and code on this host: its
    /// phases are kept, the others run.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Any of capd-rs, upstream, floor.
    #[arg(long, value_delimiter = ',', default_value = "floor,capd-rs,upstream")]
    subjects: Vec<String>,
    /// Rounds per N; each round rotates the order of the subjects.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Drop the kernel's clean caches before each phase (needs root).
    #[arg(long)]
    drop_caches: bool,
    #[arg(long)]
    capd_rs_manager: PathBuf,
    #[arg(long)]
    upstream_manager: PathBuf,
    #[arg(long)]
    upstream_version: String,
    /// The code measured: the last commit that changed it, `-dirty` when it has uncommitted
    /// changes (a resumed run must measure the same, committed code).
    #[arg(long, default_value = "")]
    code: String,
    #[arg(long)]
    own_crds: PathBuf,
    #[arg(long)]
    upstream_crds: PathBuf,
    #[arg(long)]
    webhook_cert_dir: PathBuf,
    /// Node image of every machine (both providers and the floor).
    #[arg(long)]
    image: String,
    #[arg(long)]
    lb_image: String,
    #[arg(long, default_value = "/var/run/docker.sock")]
    engine_socket: PathBuf,
    /// Where logs, the relay's socket and partial results go.
    #[arg(long)]
    work_dir: PathBuf,
    /// Seconds of steady state observed with the machines provisioned.
    #[arg(long, default_value_t = 20)]
    idle_seconds: u64,
    /// `subject=image`: a manager image whose size to report.
    #[arg(long = "manager-image")]
    manager_images: Vec<String>,
    /// The command line to record in the result.
    #[arg(long, default_value = "hack/bench.sh")]
    command: String,
    #[arg(long)]
    json: PathBuf,
    #[arg(long)]
    png: PathBuf,
    #[arg(long)]
    markdown: PathBuf,
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    font: PathBuf,
}

fn write_bench(
    report: &xtask::bench::report::Report,
    json: &Path,
    png: &Path,
    markdown: Option<&Path>,
    font: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::write(json, serde_json::to_string_pretty(report)? + "\n")?;
    report.plot(png, font)?;
    let table = report.markdown();
    if let Some(md) = markdown {
        std::fs::write(md, &table)?;
    }
    print!("{table}");
    Ok(())
}

/// `loads` without repeats, in the order first given: a load given twice would reuse its run's
/// id, and so create its namespace while the first one's is still terminating.
fn once_each<T: PartialEq + Copy>(loads: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(loads.len());
    for l in loads {
        if !out.contains(l) {
            out.push(*l);
        }
    }
    out
}

/// A setting `--real-nodes` cannot go without.
fn need<T>(v: Option<T>, flag: &str) -> Result<T, String> {
    v.ok_or(format!("--real-nodes needs {flag}"))
}

fn main() -> ExitCode {
    match run(Cli::parse().task) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(task: Task) -> Result<bool, Box<dyn std::error::Error>> {
    match task {
        Task::PruneTarget {
            dir,
            keep_days,
            min_free_gib,
        } => {
            let keep = std::time::Duration::from_secs(keep_days * 86_400);
            let p = xtask::target_prune::prune(&dir, keep)?;
            let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
            let free = xtask::target_prune::available_bytes(&dir)?;
            println!(
                "{}: removed {} unused for {keep_days} days ({:.1} GiB); {:.1} GiB free",
                dir.display(),
                p.removed,
                gib(p.bytes),
                gib(free)
            );
            if free < min_free_gib << 30 {
                eprintln!(
                    "error: {:.1} GiB free, the suite needs {min_free_gib} GiB (etcd, node \
                     containers and test builds); free some (docker image prune, ~/.cache) and retry",
                    gib(free)
                );
                return Ok(false);
            }
            Ok(true)
        }
        Task::Bench(a) => {
            let images = a
                .manager_images
                .iter()
                .map(|s| {
                    s.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .ok_or(format!("--manager-image {s}: want subject=image"))
                })
                .collect::<Result<_, _>>()?;
            let nodes = if a.real_nodes.is_empty() {
                None
            } else {
                Some(xtask::bench::nodes::NodesConfig {
                    clusterctl: need(a.nodes_clusterctl, "--nodes-clusterctl")?,
                    template: need(a.nodes_template, "--nodes-template")?,
                    kubernetes_version: need(
                        a.nodes_kubernetes_version,
                        "--nodes-kubernetes-version",
                    )?,
                    image: need(a.nodes_image, "--nodes-image")?,
                    shapes: once_each(&a.real_nodes),
                })
            };
            let in_memory = a
                .in_memory
                .iter()
                .map(|l| xtask::bench::in_memory::Shape::parse(l))
                .collect::<anyhow::Result<Vec<_>>>()
                .map_err(|e| format!("--in-memory: {e}"))?;
            let cfg = xtask::bench::Config {
                kubeconfig: a.kubeconfig,
                ns: once_each(&a.n),
                subjects: a.subjects,
                rounds: a.rounds.into(),
                drop_caches: a.drop_caches,
                capd_rs_manager: a.capd_rs_manager,
                upstream_manager: a.upstream_manager,
                upstream_version: a.upstream_version,
                code: a.code,
                own_crds: a.own_crds,
                upstream_crds: a.upstream_crds,
                webhook_cert_dir: a.webhook_cert_dir,
                image: a.image,
                lb_image: a.lb_image,
                engine_socket: a.engine_socket,
                work_dir: a.work_dir,
                idle: std::time::Duration::from_secs(a.idle_seconds),
                images,
                command: a.command,
                nodes,
                in_memory,
                in_memory_version: a.in_memory_version,
                after_crd_swap: a.after_crd_swap,
                audit_log: a.audit_log,
                resume: a.resume,
            };
            let report = tokio::runtime::Runtime::new()?
                .block_on(xtask::bench::run(cfg))
                .map_err(|e| format!("{e:#}"))?;
            write_bench(
                &report,
                &a.json,
                &a.png,
                Some(a.markdown.as_path()),
                &a.font,
            )?;
            Ok(true)
        }
        Task::Removals {
            docker_host,
            image,
            n,
            at_once,
            rounds,
            timeout,
        } => {
            let cfg = xtask::bench::removals::Config {
                docker_host,
                image,
                n,
                at_once,
                rounds,
                timeout: std::time::Duration::from_secs(timeout),
            };
            let out = tokio::runtime::Runtime::new()?
                .block_on(xtask::bench::removals::run(&cfg))
                .map_err(|e| format!("{e:#}"))?;
            print!(
                "{}",
                xtask::bench::removals::table(&out.engine, cfg.n, &cfg.at_once, &out.samples)
            );
            if let Some(e) = &out.clean_up_error {
                println!("\nclean-up after the rounds failed: {e}");
            }
            Ok(out.samples.iter().all(|s| s.seconds.is_some()) && out.clean_up_error.is_none())
        }
        Task::BenchReport { json, png, font } => {
            let text =
                std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
            let report: xtask::bench::report::Report = serde_json::from_str(&text)?;
            report.plot(&png, &font)?;
            print!("{}", report.markdown());
            Ok(true)
        }
        Task::E2eReport {
            json,
            markdown,
            heading,
        } => {
            let outcomes = e2e_outcomes(&json)?;
            let (md, tally) = xtask::e2e_report::markdown(&outcomes, &heading);
            std::fs::write(&markdown, &md)?;
            print!("{md}");
            Ok(tally.failed == 0)
        }
        Task::E2eSelected { json } => {
            let outcomes = e2e_outcomes(&json)?;
            for label in xtask::e2e_report::selected(&outcomes) {
                println!("{label}");
            }
            Ok(true)
        }
        Task::FaultsTable { dir, act_goal } => {
            let rows =
                xtask::faults::read_rows(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            print!("{}", xtask::faults::table(&rows));
            let missed: Vec<_> = rows
                .iter()
                .filter(|r| !r.meets(act_goal))
                .map(|r| r.fault.as_str())
                .collect();
            if !missed.is_empty() {
                println!(
                    "\nGoals (acted on within {act_goal} s, Ready again, nothing lost, duplicated or leaked) missed by: {}",
                    missed.join(", ")
                );
            }
            Ok(!rows.is_empty())
        }
        Task::SoakPlot { json, png, font } => {
            let text =
                std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
            let report: xtask::soak::Report = serde_json::from_str(&text)?;
            xtask::soak::plot(&report, &png, &font)?;
            println!("wrote {}", png.display());
            let grew = report.growth();
            for g in &grew {
                eprintln!("grew after warm-up: {g}");
            }
            Ok(grew.is_empty())
        }
    }
}

/// The outcome of every label of a Ginkgo JSON report, or an error naming the file.
fn e2e_outcomes(
    json: &std::path::Path,
) -> Result<std::collections::BTreeMap<String, xtask::e2e_report::Outcome>, String> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    xtask::e2e_report::outcomes(&text).map_err(|e| format!("{}: {e}", json.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `xtask bench` with every required setting and `extra`.
    fn bench(extra: &[&str]) -> Result<BenchArgs, clap::Error> {
        let required = [
            "xtask",
            "bench",
            "--kubeconfig=k",
            "--capd-rs-manager=m",
            "--upstream-manager=u",
            "--upstream-version=v1.14.2",
            "--own-crds=o",
            "--upstream-crds=c",
            "--webhook-cert-dir=w",
            "--image=i",
            "--lb-image=l",
            "--work-dir=d",
            "--json=j",
            "--png=p",
            "--markdown=md",
        ];
        let args = required.iter().chain(extra);
        match Cli::try_parse_from(args)?.task {
            Task::Bench(a) => Ok(*a),
            _ => unreachable!("parsed as bench"),
        }
    }

    fn shape(control_planes: usize, workers: usize) -> NodeShape {
        NodeShape {
            control_planes,
            workers,
        }
    }

    #[test]
    fn light_loads_may_be_spread_over_clusters_in_the_order_given() {
        let a = bench(&["--n", "1,clusters:10:100,100"]).unwrap();
        assert_eq!(
            a.n,
            [
                LightLoad::one(1),
                LightLoad {
                    n: 100,
                    clusters: 10
                },
                LightLoad::one(100),
            ]
        );
        assert!(a.real_nodes.is_empty(), "no real nodes unless asked");
        assert!(bench(&[]).unwrap().n.is_empty());
        for bad in ["clusters:0:10", "clusters:10:5", "0", "ten", "clusters:10"] {
            let e = refused(&["--n", bad]);
            assert!(e.to_string().contains(bad), "{bad}: names the value: {e}");
        }
        let e = bench(&["--n", "clusters:0:10"]).err().unwrap().to_string();
        assert!(e.contains("at least 1 Cluster"), "{e}");
    }

    /// The error for arguments xtask must refuse as a bad value.
    fn refused(args: &[&str]) -> clap::Error {
        let e = bench(args)
            .err()
            .unwrap_or_else(|| panic!("{args:?} accepted"));
        assert_eq!(
            e.kind(),
            clap::error::ErrorKind::ValueValidation,
            "{args:?}: {e}"
        );
        e
    }

    #[test]
    fn real_nodes_alone_is_one_plus_two_and_shapes_may_be_listed() {
        assert_eq!(bench(&["--real-nodes"]).unwrap().real_nodes, [shape(1, 2)]);
        assert_eq!(
            bench(&["--real-nodes", "1+2,3+5"]).unwrap().real_nodes,
            [shape(1, 2), shape(3, 5)]
        );
        // The flag's value is optional: what follows it is still a flag of its own.
        let a = bench(&["--real-nodes", "--n", "10"]).unwrap();
        assert_eq!(
            (a.real_nodes, a.n),
            (vec![shape(1, 2)], vec![LightLoad::one(10)])
        );
        assert!(
            bench(&["--nodes-image=x"]).is_err(),
            "the node settings still need --real-nodes"
        );
        for bad in ["0+2", "2+2", "3", "3+x"] {
            refused(&["--real-nodes", bad]);
        }
        let e = bench(&["--real-nodes", "0+2"]).err().unwrap().to_string();
        assert!(e.contains("at least 1 control plane"), "{e}");
    }

    #[test]
    fn a_load_given_twice_runs_once_where_first_given() {
        assert_eq!(once_each(&[10, 100, 10, 50, 100]), [10, 100, 50]);
        assert_eq!(
            once_each(&[shape(1, 2), shape(3, 5), shape(1, 2)]),
            [shape(1, 2), shape(3, 5)]
        );
        assert!(once_each::<u8>(&[]).is_empty());
    }
}
