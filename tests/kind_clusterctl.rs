//! A real `clusterctl init --infrastructure docker` on a kind management cluster, then workload
//! clusters from `clusterctl generate cluster`, everything as Pods: cert-manager, CAPI core,
//! kubeadm bootstrap, kubeadm control plane and capd-rs, from images built locally
//! (`hack/kind-providers.sh build`, run first: no registry is reachable) and a local clusterctl
//! repository (`hack/kind-providers.sh repo`).
//!
//! Asserted: clusterctl installs cert-manager from our manifest and every provider; every provider
//! Deployment is Available; the webhooks are served (CAPI's defaulting and validation: an invalid
//! Cluster only its webhooks can refuse is refused; ours: DockerMachineTemplates read at v1beta1
//! go through capd-rs' conversion webhook; cert-manager's: clusterctl's own check creates an
//! Issuer and a Certificate); cert-manager never refused by its RBAC; two workload clusters, the
//! default flavor (KubeadmControlPlane, MachineDeployment) and development-mp (ClusterClass
//! quick-start of Dev* templates, a MachinePool on our DevMachinePool), each with its
//! control-plane and worker Node Ready and the Cluster Available, their containers made by capd-rs
//! in its Pod through the mounted Docker socket; deleting the Clusters removes every container of
//! them; `hack/kind.sh down` leaves no kind container behind.
mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use common::{capi_e2e::*, docker_lines, workload::*};
use serde_json::Value;

/// Label capd-rs puts on every container of a cluster: the Cluster's namespace.
const NAMESPACE_LABEL: &str = "capd-rs.x-k8s.io/cluster-namespace";

struct Kind {
    cluster: String,
    network: String,
    /// The namespace of the workload cluster (its containers carry it as a label).
    namespace: String,
}

impl Kind {
    fn run(&self, script: &str, verb: &str) -> Output {
        Command::new(script)
            .arg(verb)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("KIND_CLUSTER", &self.cluster)
            // kind-providers.sh passes the network on to our components (CAPD_DOCKER_NETWORK).
            .env("KIND_EXPERIMENTAL_DOCKER_NETWORK", &self.network)
            .env_remove("CAPD_DOCKER_NETWORK")
            // CAPI's gate: the development-mp flavor is a ClusterClass.
            .env("CLUSTER_TOPOLOGY", "true")
            .output()
            .unwrap_or_else(|e| panic!("{script} runs: {e}"))
    }

    fn dir(&self) -> PathBuf {
        common::cache_dir().join("kind").join(&self.cluster)
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir().join("kubeconfig")
    }

    fn clusterctl_config(&self) -> PathBuf {
        self.dir().join("clusterctl-repo").join("clusterctl.yaml")
    }

    fn workload_containers(&self) -> Vec<String> {
        docker_lines(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label={NAMESPACE_LABEL}={}", self.namespace),
        ])
    }
}

/// Whatever happens: the kind cluster first (so capd-rs, in it, cannot recreate what follows),
/// then the workload containers (made by capd-rs, so not kind's), then the network, which
/// `hack/kind.sh down` removes only once nothing uses it.
impl Drop for Kind {
    fn drop(&mut self) {
        let _ = self.run("hack/kind.sh", "down");
        let ids = self.workload_containers();
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v"])
                .args(&ids)
                .output();
            let _ = self.run("hack/kind.sh", "down");
        }
    }
}

fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls every two seconds (kubectl is a process: the 250 ms of `eventually` would keep a core
/// busy for minutes).
async fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            eprintln!("{what}: {:.0}s", t0.elapsed().as_secs_f64());
            return v;
        }
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn condition(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// Every Deployment clusterctl installed (label `clusterctl.cluster.x-k8s.io`), by
/// namespace/name, with whether it is Available.
fn provider_deployments(kc: &Path) -> Option<Vec<(String, bool)>> {
    let list = wl_json(
        kc,
        &[
            "get",
            "deployments",
            "-A",
            "-l",
            "clusterctl.cluster.x-k8s.io",
        ],
    )?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .map(|d| {
                let name = format!(
                    "{}/{}",
                    d["metadata"]["namespace"].as_str().unwrap_or_default(),
                    d["metadata"]["name"].as_str().unwrap_or_default()
                );
                (name, condition(d, "Available"))
            })
            .collect(),
    )
}

#[tokio::test]
async fn clusterctl_init_on_kind_then_a_workload_cluster() {
    let id = std::process::id();
    let kind = Kind {
        cluster: format!("capd-init{id}"),
        network: format!("capd-init{id}"),
        namespace: format!("kind-wl{id}"),
    };
    let t0 = Instant::now();
    ok("hack/kind.sh up", &kind.run("hack/kind.sh", "up"));
    eprintln!("kind cluster up: {:.0}s", t0.elapsed().as_secs_f64());
    let kc = kind.kubeconfig();

    // load + repo + clusterctl init --wait-providers.
    let t1 = Instant::now();
    let init = kind.run("hack/kind-providers.sh", "init");
    let init_log = format!(
        "{}{}",
        String::from_utf8_lossy(&init.stdout),
        String::from_utf8_lossy(&init.stderr)
    );
    eprintln!("{init_log}");
    ok("hack/kind-providers.sh init", &init);
    eprintln!(
        "images loaded + clusterctl init: {:.0}s",
        t1.elapsed().as_secs_f64()
    );
    assert!(
        init_log.contains("Installing cert-manager"),
        "clusterctl installed cert-manager from our manifest"
    );

    // Every provider Deployment Available: cert-manager's three, CAPI's three, ours.
    let deployments = poll(
        Duration::from_secs(300),
        "every provider Deployment Available",
        || {
            let ds = provider_deployments(&kc)?;
            (ds.len() == 7 && ds.iter().all(|d| d.1)).then_some(ds)
        },
    )
    .await;
    let names: Vec<_> = deployments.iter().map(|d| d.0.as_str()).collect();
    for want in [
        "cert-manager/cert-manager",
        "cert-manager/cert-manager-cainjector",
        "cert-manager/cert-manager-webhook",
        "capi-system/capi-controller-manager",
        "capi-kubeadm-bootstrap-system/capi-kubeadm-bootstrap-controller-manager",
        "capi-kubeadm-control-plane-system/capi-kubeadm-control-plane-controller-manager",
        "capd-system/capd-controller-manager",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }

    // clusterctl knows every provider.
    let providers = wl_json(&kc, &["get", "providers.clusterctl.cluster.x-k8s.io", "-A"])
        .expect("clusterctl's Provider inventory");
    let mut inventory: Vec<String> = providers["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}:{}:{}",
                p["type"].as_str().unwrap_or_default(),
                p["providerName"].as_str().unwrap_or_default(),
                p["version"].as_str().unwrap_or_default()
            )
        })
        .collect();
    inventory.sort();
    eprintln!("clusterctl inventory: {inventory:?}");
    assert_eq!(inventory.len(), 4, "{inventory:?}");
    assert!(inventory.contains(&format!("CoreProvider:cluster-api:v{CAPI_VERSION}")));
    assert!(
        inventory
            .iter()
            .any(|p| p.starts_with("InfrastructureProvider:docker:"))
    );

    // CAPI's webhooks answer: a Cluster whose topology version is no semantic version passes the
    // CRD schema (no pattern) and is refused by CAPI's validating webhook, after its defaulting
    // webhook prefixed the "v".
    wl(&kc, &["create", "namespace", &kind.namespace], None).unwrap();
    let invalid = serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "invalid", "namespace": kind.namespace},
        "spec": {"topology": {"version": "not-a-version", "classRef": {"name": "none"}}}})
    .to_string();
    let refused = wl(
        &kc,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&invalid),
    )
    .expect_err("an invalid Cluster is refused");
    assert!(
        refused.contains("\"vnot-a-version\": version must be a valid semantic version"),
        "refused by CAPI's webhooks: {refused}"
    );

    // The workload clusters, as a user makes them: clusterctl generate cluster from our
    // repository. `wl`: the default flavor (KubeadmControlPlane, MachineDeployment); `cc`: the
    // development-mp flavor (ClusterClass quick-start, workers in a MachinePool).
    let t2 = Instant::now();
    for (name, flavor) in [("wl", None), ("cc", Some("development-mp"))] {
        let mut generate = Command::new(bin(&format!("capi-v{CAPI_VERSION}/clusterctl")));
        generate
            .args(["generate", "cluster", name, "--infrastructure", "docker"])
            .args(["--kubernetes-version", &format!("v{K8S_VERSION}")])
            .args(["--control-plane-machine-count", "1"])
            .args(["--worker-machine-count", "1"])
            .args(["--target-namespace", &kind.namespace])
            .arg("--config")
            .arg(kind.clusterctl_config())
            .arg("--kubeconfig")
            .arg(&kc);
        if let Some(flavor) = flavor {
            generate.args(["--flavor", flavor]);
        }
        let manifest = ok(
            &format!("clusterctl generate cluster {name}"),
            &generate.output().expect("clusterctl"),
        );
        wl(&kc, &["apply", "-f", "-"], Some(&manifest))
            .unwrap_or_else(|e| panic!("kubectl apply cluster {name}: {e}"));
    }

    // Our conversion webhook: `wl`'s two templates read back at v1beta1 (the class's are
    // DevMachineTemplates, v1beta2 only, as upstream's).
    // Polled: clusterctl waits for the Deployments, not for cainjector to put the CA into the
    // CRD's conversion config.
    let ns = kind.namespace.clone();
    let v1beta1 = poll(
        Duration::from_secs(60),
        "DockerMachineTemplates at v1beta1 (our conversion webhook)",
        || {
            let list = wl_json(
                &kc,
                &[
                    "get",
                    "dockermachinetemplates.v1beta1.infrastructure.cluster.x-k8s.io",
                    "-n",
                    &ns,
                ],
            )?;
            (list["items"].as_array()?.len() == 2).then_some(list)
        },
    )
    .await;
    assert!(
        v1beta1["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta1"),
        "{v1beta1}"
    );

    // Their Nodes Ready, seen through their own API (the kubeconfig Secret KCP writes), and CAPI's
    // own verdict: each Cluster Available (control plane and workers available).
    for name in ["wl", "cc"] {
        let secret_name = format!("{name}-kubeconfig");
        let secret = poll(
            NODES_READY,
            &format!("{name}: the kubeconfig Secret"),
            || wl_json(&kc, &["get", "secret", &secret_name, "-n", &ns]),
        )
        .await;
        use base64::Engine as _;
        let value = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["value"].as_str().unwrap())
            .unwrap();
        let wl_kc = std::env::temp_dir().join(format!("capd-rs-kind{id}-{name}.kubeconfig"));
        std::fs::write(&wl_kc, value).unwrap();
        let ready = poll(
            NODES_READY,
            &format!("{name}: 1 control-plane + 1 worker Node Ready"),
            || {
                let ready = ready_nodes(&wl_kc)?;
                (ready.len() == 2).then_some(ready)
            },
        )
        .await;
        eprintln!(
            "{name}: apply -> 2 Nodes Ready: {:.0}s ({ready:?})",
            t2.elapsed().as_secs_f64()
        );
        let _ = std::fs::remove_file(&wl_kc);
        poll(
            Duration::from_secs(300),
            &format!("{name}: the Cluster Available"),
            || {
                let cluster = wl_json(&kc, &["get", "cluster", name, "-n", &ns])?;
                condition(&cluster, "Available").then_some(())
            },
        )
        .await;
        eprintln!(
            "{name}: apply -> Cluster Available: {:.0}s",
            t2.elapsed().as_secs_f64()
        );
    }
    // The MachinePool's worker is an instance of our DevMachinePool: its providerID listed in
    // the pool, a DevMachine owned by the pool.
    let pools = wl_json(&kc, &["get", "devmachinepools", "-n", &ns]).unwrap();
    let ids: Vec<_> = pools["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            p["spec"]["providerIDList"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(ids.len(), 1, "{pools}");
    let machines = wl_json(&kc, &["get", "devmachines", "-n", &ns]).unwrap();
    let pooled = machines["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["kind"] == "DevMachinePool")
        })
        .count();
    assert_eq!(pooled, 1, "{machines}");
    // cert-manager's own RBAC (hack/kind/cert-manager.yaml) was enough for all of it.
    for d in [
        "cert-manager",
        "cert-manager-cainjector",
        "cert-manager-webhook",
    ] {
        let logs = wl(
            &kc,
            &["logs", "-n", "cert-manager", &format!("deploy/{d}")],
            None,
        )
        .unwrap_or_default();
        // RBAC's refusals only ("forbidden: User ... cannot ..."), not e.g. "forbidden: unable to
        // create new content in namespace ... being terminated" (clusterctl's check namespace).
        let denied: Vec<_> = logs
            .lines()
            .filter(|l| l.contains("forbidden: User"))
            .collect();
        assert!(denied.is_empty(), "{d} was refused: {denied:#?}");
    }
    // Made by capd-rs in its Pod: per cluster 2 nodes + the load balancer, on the kind
    // cluster's network.
    let containers = kind.workload_containers();
    assert_eq!(containers.len(), 6, "{containers:?}");

    // Deleting the Clusters removes every container of them.
    let t3 = Instant::now();
    wl(
        &kc,
        &["delete", "cluster", "--all", "-n", &ns, "--wait=false"],
        None,
    )
    .unwrap();
    poll(
        Duration::from_secs(300),
        "the Clusters and their containers gone",
        || {
            let left = wl_json(&kc, &["get", "clusters", "-n", &ns])?;
            (left["items"].as_array()?.is_empty() && kind.workload_containers().is_empty())
                .then_some(())
        },
    )
    .await;
    eprintln!("Clusters deleted: {:.0}s", t3.elapsed().as_secs_f64());

    ok("hack/kind.sh down", &kind.run("hack/kind.sh", "down"));
    let label = format!("label=io.x-k8s.kind.cluster={}", kind.cluster);
    assert!(docker_lines(&["ps", "-aq", "--filter", &label]).is_empty());
}
