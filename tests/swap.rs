//! Swapping upstream CAPD v1.14.2 for capd-rs and back, with a real workload cluster (needs the
//! CAPI managers up: `hack/capi.sh up`; upstream's manager: `hack/build-binaries.sh
//! capd-upstream`; the node image: `hack/node-image.sh`).
//!
//! Upstream CAPD (a local process, as `xtask bench` runs it) creates 1 control plane + 1 worker
//! from our default template until the Nodes are Ready; it stops, capd-rs starts: no container
//! is recreated (same IDs), the MachineDeployment scales to 2 and the new Node is Ready. Then
//! back to upstream: it keeps the cluster (no container recreated); then capd-rs again, and the
//! Cluster's deletion leaves no container.
//!
//! Upstream CAPD puts its containers on the Docker network `kind` (hard-coded), so capd-rs runs
//! with `--docker-network=kind` here; the test creates `kind` (labelled with its run id) when it
//! is missing and removes it afterwards if it made it.
mod common;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{capi_e2e::*, workload::*, *};
// The haproxy.cfg template `xtask bench` gives upstream's load balancer: upstream's default asks
// for `maxconn 100000`, more descriptors than containers get here, so its haproxy dies on the
// first reload. capd-rs's own config copes.
use xtask_figures::upstream::UPSTREAM_HAPROXY_TEMPLATE;

const UPSTREAM_NETWORK: &str = "kind";
const NODE: &str = "kindest/node:v1.35.4";

/// Upstream CAPD's manager as a child process, watching one namespace.
struct Upstream {
    child: Child,
    log: PathBuf,
}

impl Upstream {
    fn start(id: &str, ns: &str, run: u32) -> Self {
        let bin = cache_dir().join(format!("bin/capd-upstream-v{CAPI_VERSION}/manager"));
        assert!(
            bin.exists(),
            "{} missing: run hack/build-binaries.sh capd-upstream",
            bin.display()
        );
        let plane = kubeconfig_path().parent().unwrap().to_path_buf();
        let log = std::env::temp_dir().join(format!("capd-upstream-{id}-{run}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .arg(format!("--kubeconfig={}", kubeconfig_path().display()))
            .arg("--leader-elect=false")
            .arg(format!("--namespace={ns}"))
            .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
            .arg(format!("--diagnostics-address=127.0.0.1:{}", free_port()))
            .arg("--insecure-diagnostics")
            .arg(format!("--webhook-port={}", free_port()))
            // The plane's webhook serving certificate (hack/capi.sh's); upstream's webhooks are
            // not registered, its server only has to start.
            .arg(format!(
                "--webhook-cert-dir={}",
                plane.join("pki/webhook").display()
            ))
            .env_remove("KUBECONFIG")
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("start upstream CAPD");
        Self { child, log }
    }

    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kubelet flags a node needs on this host (cgroup v1, swap, kind's `/kubelet` cgroup):
/// capd-rs adds them to kubeadm's configuration by itself, upstream CAPD expects them in the
/// template (as `xtask bench` gives them to it).
fn with_kubelet_args(rendered: &str) -> String {
    const ARGS: [(&str, &str); 3] = [
        ("fail-cgroupv1", "false"),
        ("fail-swap-on", "false"),
        ("cgroup-root", "/kubelet"),
    ];
    let mut docs = Vec::new();
    for doc in rendered.split("\n---\n").filter(|d| d.contains("kind:")) {
        let mut v: serde_json::Value = serde_yaml_ng::from_str(doc).unwrap();
        let paths: &[&[&str]] = match v["kind"].as_str() {
            Some("KubeadmControlPlane") => &[
                &["spec", "kubeadmConfigSpec", "initConfiguration"],
                &["spec", "kubeadmConfigSpec", "joinConfiguration"],
            ],
            Some("KubeadmConfigTemplate") => &[&["spec", "template", "spec", "joinConfiguration"]],
            _ => &[],
        };
        for path in paths {
            let mut at = &mut v;
            for key in path.iter().chain(&["nodeRegistration"]) {
                if at.get(*key).is_none() {
                    at[*key] = serde_json::json!({});
                }
                at = &mut at[*key];
            }
            if !at["kubeletExtraArgs"].is_array() {
                at["kubeletExtraArgs"] = serde_json::json!([]);
            }
            let list = at["kubeletExtraArgs"].as_array_mut().unwrap();
            for (name, value) in ARGS {
                if !list.iter().any(|a| a["name"] == name) {
                    list.push(serde_json::json!({"name": name, "value": value}));
                }
            }
        }
        docs.push(serde_yaml_ng::to_string(&v).unwrap());
    }
    docs.join("---\n")
}

/// Point the DockerCluster at [`UPSTREAM_HAPROXY_TEMPLATE`] (for upstream), or at nothing (for
/// capd-rs, whose own generated config copes with the descriptor limit).
fn upstream_lb_template(ns: &str, cluster: &str, on: bool) {
    let name = format!("{cluster}-haproxy");
    if on {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns},
            "data": {"value": UPSTREAM_HAPROXY_TEMPLATE}});
        kubectl(&["apply", "-f", "-"], Some(&cm.to_string()));
    }
    let reference = if on {
        serde_json::json!({"name": name})
    } else {
        serde_json::Value::Null
    };
    let patch = serde_json::json!({"spec": {"loadBalancer": {"customHAProxyConfigTemplateRef": reference}}});
    kubectl(
        &[
            "patch",
            "dockercluster",
            cluster,
            "-n",
            ns,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
}

/// name -> ID of the cluster's containers (by upstream's cluster label, which ours carry too).
fn containers(cluster: &str) -> BTreeMap<String, String> {
    docker_lines(&[
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        &format!("label=io.x-k8s.kind.cluster={cluster}"),
        "--format",
        "{{.Names}} {{.ID}}",
    ])
    .into_iter()
    .filter_map(|l| {
        let (n, id) = l.split_once(' ')?;
        Some((n.to_string(), id.to_string()))
    })
    .collect()
}

fn assert_kept(before: &BTreeMap<String, String>, now: &BTreeMap<String, String>, when: &str) {
    for (name, id) in before {
        assert_eq!(
            now.get(name),
            Some(id),
            "{when}: container {name} was recreated or removed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swap_upstream_capd_for_capd_rs_and_back() {
    let mut env = TestEnv::new("swap").await;
    env.network = UPSTREAM_NETWORK.to_string();
    let made_network = docker_lines(&["network", "ls", "-q", "--filter", "name=^kind$"]).is_empty();
    if made_network {
        docker_cli(&[
            "network",
            "create",
            "--label",
            &format!("{TEST_LABEL}={}", env.id),
            UPSTREAM_NETWORK,
        ]);
    }
    let ns = env.handle().namespace("ns").await;
    let name = format!("{}-w", env.id);
    let cluster = name.clone();
    let leftover = name.clone();
    env.run_mut(|env| {
        Box::pin(async move {
            let t0 = Instant::now();
            let h = env.handle();
            // 1. Upstream creates the cluster.
            kubectl(
                &["apply", "-f", "-"],
                Some(&with_kubelet_args(&render_cluster(
                    &name,
                    &ns,
                    1,
                    Some(NODE),
                    None,
                ))),
            );
            // Before upstream starts, so its LB never runs its default config.
            upstream_lb_template(&ns, &name, true);
            let mut upstream = Upstream::start(&env.id, &ns, 1);
            let kc = workload_kubeconfig(&h, &ns, &name).await;
            let up = tokio::time::timeout(
                NODES_READY,
                wait_for_nodes(&h, &ns, &kc, 1, 1, "upstream: 1+1 Ready"),
            )
            .await;
            if up.is_err() {
                panic!(
                    "upstream never got 1+1 Nodes Ready; its log:\n{}",
                    upstream.tail()
                );
            }
            eprintln!(
                "upstream created the cluster: {:.0}s",
                t0.elapsed().as_secs_f64()
            );
            upstream.stop();
            let before = containers(&cluster);
            assert_eq!(before.len(), 3, "LB, control plane, worker: {before:?}");

            // 2. capd-rs takes over: nothing recreated; scale the MachineDeployment to 2.
            let t1 = Instant::now();
            upstream_lb_template(&ns, &name, false);
            env.start_manager_in_namespace(&ns);
            let h = env.handle();
            h.manager_ready().await;
            kubectl(
                &[
                    "scale",
                    "machinedeployment",
                    &format!("{name}-md-0"),
                    "-n",
                    &ns,
                    "--replicas=2",
                ],
                None,
            );
            wait_for_nodes(&h, &ns, &kc, 1, 2, "capd-rs: scaled to 1+2 Ready").await;
            let after = containers(&cluster);
            assert_kept(&before, &after, "after the swap to capd-rs");
            assert_eq!(after.len(), 4, "{after:?}");
            eprintln!(
                "capd-rs adopted and scaled: {:.0}s",
                t1.elapsed().as_secs_f64()
            );
            // The adoptions are on record.
            let dms = docker_machines(&h, &ns).await;
            let adopted = dms
                .iter()
                .filter(|dm| {
                    kube::ResourceExt::annotations(*dm)
                        .contains_key(capd::docker::adoption::ADOPTED_CONTAINER)
                })
                .count();
            assert_eq!(adopted, 2, "both upstream machines are recorded as adopted");
            if let Some(m) = env.manager.as_mut() {
                m.terminate();
            }
            env.manager = None;

            // 3. Back to upstream: it keeps the cluster as it is.
            let t2 = Instant::now();
            upstream_lb_template(&ns, &name, true);
            let mut upstream = Upstream::start(&env.id, &ns, 2);
            tokio::time::sleep(Duration::from_secs(30)).await;
            wait_for_nodes(&h, &ns, &kc, 1, 2, "upstream again: 1+2 Ready").await;
            assert_kept(
                &after,
                &containers(&cluster),
                "after the swap back to upstream",
            );
            upstream.stop();
            eprintln!("upstream kept it: {:.0}s", t2.elapsed().as_secs_f64());

            // 4. capd-rs again, and the Cluster's deletion leaves nothing.
            let t3 = Instant::now();
            upstream_lb_template(&ns, &name, false);
            env.start_manager_in_namespace(&ns);
            let h = env.handle();
            h.manager_ready().await;
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert_kept(
                &after,
                &containers(&cluster),
                "after the second swap to capd-rs",
            );
            kubectl(
                &["delete", "cluster", &name, "-n", &ns, "--wait=false"],
                None,
            );
            eventually(Duration::from_secs(300), "no container left", || async {
                containers(&cluster).is_empty().then_some(())
            })
            .await;
            eprintln!(
                "capd-rs deleted it: {:.0}s; whole swap test {:.0}s",
                t3.elapsed().as_secs_f64(),
                t0.elapsed().as_secs_f64()
            );
        })
    })
    .await;
    // Whatever happened: upstream's containers carry no run label; remove them by cluster name.
    for (c, _) in containers(&leftover) {
        let _ = Command::new("docker").args(["rm", "-f", "-v", &c]).output();
    }
    if made_network {
        let _ = Command::new("docker")
            .args(["network", "rm", UPSTREAM_NETWORK])
            .output();
    }
}
