//! A real `clusterctl init --infrastructure docker` on a kind management cluster, then workload
//! clusters from `clusterctl generate cluster`, everything as Pods: cert-manager, CAPI core,
//! kubeadm bootstrap, kubeadm control plane and capd-rs, from images built locally
//! (`hack/kind-providers.sh build`, run first: no registry is reachable) and a local clusterctl
//! repository (`hack/kind-providers.sh repo`) holding two versions of capd-rs: this one and the
//! next patch version (the same build under a second image tag).
//!
//! Asserted, in the order a user meets it:
//! - init: clusterctl installs cert-manager from our manifest and every provider, capd-rs at
//!   this version; every provider Deployment is Available; the webhooks are served (CAPI's
//!   defaulting and validation: an invalid Cluster only its webhooks can refuse is refused; ours:
//!   DockerMachineTemplates read at v1beta1 go through capd-rs' conversion webhook;
//!   cert-manager's: clusterctl's own check creates an Issuer and a Certificate); cert-manager
//!   never refused by its RBAC;
//! - workload clusters: the default flavor (KubeadmControlPlane, MachineDeployment) and
//!   development-mp (ClusterClass quick-start of Dev* templates, a MachinePool on our
//!   DevMachinePool), each with its control-plane and worker Node Ready and the Cluster
//!   Available, their containers made by capd-rs in its Pod through the mounted Docker socket;
//! - `clusterctl upgrade plan` offers the next version and `upgrade apply` installs it: the
//!   inventory and the Deployment's image change, the Clusters stay Available;
//! - `clusterctl move` of the namespace to a second kind management cluster: the objects leave
//!   the first, the Clusters are Available and unpaused on the second, every DockerMachine and
//!   DevMachine Ready there, and no container was created, removed or restarted (upgrade
//!   included); `clusterctl describe cluster` on the second renders our conditions;
//! - deleting the Clusters on the second cluster removes every container of them;
//! - `clusterctl delete --infrastructure docker` removes the provider and keeps the CRDs;
//! - `hack/kind.sh down` leaves no kind container behind.
mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::Arc,
    time::{Duration, Instant},
};

use common::{capi_e2e::*, docker_lines, workload::*};
use serde_json::Value;

/// Label capd-rs puts on every container of a cluster: the Cluster's namespace.
const NAMESPACE_LABEL: &str = "capd-rs.x-k8s.io/cluster-namespace";
/// The capd-rs components' Deployment.
const MANAGER: &str = "capd-system/capd-controller-manager";
/// What `hack/kind-providers.sh` tags the next version's image (CAPD_IMAGE + "-next").
const NEXT_IMAGE: &str = "docker.io/capd-rs/manager:kind-next";

/// This provider's version, as clusterctl names it.
fn this_version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// The next patch version: what `clusterctl upgrade` moves to (metadata.yaml's release series
/// of this version covers it).
fn next_version() -> String {
    let v = env!("CARGO_PKG_VERSION");
    let (minor, patch) = v.rsplit_once('.').expect("major.minor.patch");
    format!(
        "v{minor}.{}",
        patch.parse::<u32>().expect("a numeric patch") + 1
    )
}

struct Kind {
    cluster: String,
    network: String,
    /// The namespace of the workload cluster (its containers carry it as a label).
    namespace: String,
    /// The capd-rs version `init` installs (None: the newest in the repository).
    init_version: Option<String>,
}

impl Kind {
    fn run(&self, script: &str, verb: &str) -> Output {
        let mut cmd = Command::new(script);
        cmd.arg(verb)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("KIND_CLUSTER", &self.cluster)
            // kind-providers.sh passes the network on to our components (CAPD_DOCKER_NETWORK).
            .env("KIND_EXPERIMENTAL_DOCKER_NETWORK", &self.network)
            .env_remove("CAPD_DOCKER_NETWORK")
            // CAPI's gate: the development-mp flavor is a ClusterClass.
            .env("CLUSTER_TOPOLOGY", "true")
            .env("CAPD_NEXT_VERSION", next_version());
        match &self.init_version {
            Some(v) => cmd.env("CAPD_INIT_VERSION", v),
            None => cmd.env_remove("CAPD_INIT_VERSION"),
        };
        cmd.output()
            .unwrap_or_else(|e| panic!("{script} runs: {e}"))
    }

    /// `hack/kind.sh up`, then `hack/kind-providers.sh init` (load, repository, clusterctl init);
    /// returns init's output.
    fn up_and_init(&self) -> String {
        let t0 = Instant::now();
        ok(
            &format!("hack/kind.sh up {}", self.cluster),
            &self.run("hack/kind.sh", "up"),
        );
        eprintln!(
            "{}: kind cluster up: {:.0}s",
            self.cluster,
            t0.elapsed().as_secs_f64()
        );
        let t1 = Instant::now();
        let init = self.run("hack/kind-providers.sh", "init");
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&init.stdout),
            String::from_utf8_lossy(&init.stderr)
        );
        eprintln!("{log}");
        ok(
            &format!("hack/kind-providers.sh init {}", self.cluster),
            &init,
        );
        eprintln!(
            "{}: images loaded + clusterctl init: {:.0}s",
            self.cluster,
            t1.elapsed().as_secs_f64()
        );
        log
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

    /// Each workload container as "name id started-at", sorted: equal lists mean nothing was
    /// created, removed or restarted in between.
    fn workload_container_states(&self) -> Vec<String> {
        let ids = self.workload_containers();
        if ids.is_empty() {
            return ids;
        }
        let mut args = vec!["inspect", "-f", "{{.Name}} {{.Id}} {{.State.StartedAt}}"];
        args.extend(ids.iter().map(String::as_str));
        let mut states = docker_lines(&args);
        states.sort();
        states
    }

    /// `clusterctl <args> --kubeconfig <this cluster's> --config <its repository's>`; panics
    /// with clusterctl's output when it fails.
    fn clusterctl(&self, args: &[&str]) -> String {
        let out = Command::new(bin(&format!("capi-v{CAPI_VERSION}/clusterctl")))
            .args(args)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .arg("--config")
            .arg(self.clusterctl_config())
            .output()
            .expect("clusterctl");
        ok(&format!("clusterctl {}", args.join(" ")), &out)
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

/// clusterctl's Provider inventory, as "type:name:version", sorted.
fn inventory(kc: &Path) -> Vec<String> {
    let providers = wl_json(kc, &["get", "providers.clusterctl.cluster.x-k8s.io", "-A"])
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
    inventory
}

/// Every provider Deployment Available: cert-manager's three, CAPI's three, ours.
async fn providers_available(kc: &Path) {
    let deployments = poll(
        Duration::from_secs(300),
        "every provider Deployment Available",
        || {
            let ds = provider_deployments(kc)?;
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
        MANAGER,
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
}

/// Waits for each named Cluster to be Available (CAPI's verdict: control plane and workers
/// available) and not paused.
async fn clusters_available(kc: &Path, ns: &str, names: &[&str], t0: Instant, what: &str) {
    for name in names {
        poll(
            Duration::from_secs(300),
            &format!("{what}: {name} Available"),
            || {
                let cluster = wl_json(kc, &["get", "cluster", name, "-n", ns])?;
                (condition(&cluster, "Available") && cluster["spec"]["paused"] != true)
                    .then_some(())
            },
        )
        .await;
        eprintln!(
            "{what}: {name} Available after {:.0}s",
            t0.elapsed().as_secs_f64()
        );
    }
}

/// Names of the namespace's infrastructure machines of both families and whether each is Ready.
fn infra_machines(kc: &Path, ns: &str) -> Option<Vec<(String, bool)>> {
    let list = wl_json(kc, &["get", "dockermachines,devmachines", "-n", ns])?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .map(|m| {
                (
                    format!(
                        "{}/{}",
                        m["kind"].as_str().unwrap_or_default(),
                        m["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                    condition(m, "Ready"),
                )
            })
            .collect(),
    )
}

#[tokio::test]
async fn clusterctl_init_upgrade_move_and_delete_on_kind() {
    let id = std::process::id();
    let network = format!("capd-init{id}");
    let ns = format!("kind-wl{id}");
    let kind = Kind {
        cluster: format!("capd-init{id}"),
        network: network.clone(),
        namespace: ns.clone(),
        init_version: Some(this_version()),
    };
    // The target of `clusterctl move`: on the same network, so that its capd-rs reaches the
    // workload clusters' load balancers and nodes.
    let target = Arc::new(Kind {
        cluster: format!("capd-move{id}"),
        network,
        namespace: ns.clone(),
        init_version: None,
    });

    let init_log = kind.up_and_init();
    assert!(
        init_log.contains("Installing cert-manager"),
        "clusterctl installed cert-manager from our manifest"
    );
    let kc = kind.kubeconfig();
    providers_available(&kc).await;

    // clusterctl knows every provider, capd-rs at the version init was asked for.
    let installed = inventory(&kc);
    eprintln!("clusterctl inventory: {installed:?}");
    assert_eq!(installed.len(), 4, "{installed:?}");
    assert!(installed.contains(&format!("CoreProvider:cluster-api:v{CAPI_VERSION}")));
    let docker_at = |v: &str| format!("InfrastructureProvider:docker:{v}");
    assert!(
        installed.contains(&docker_at(&this_version())),
        "{installed:?}"
    );

    // CAPI's webhooks answer: a Cluster whose topology version is no semantic version passes the
    // CRD schema (no pattern) and is refused by CAPI's validating webhook, after its defaulting
    // webhook prefixed the "v".
    wl(&kc, &["create", "namespace", &ns], None).unwrap();
    let invalid = serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "invalid", "namespace": ns},
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
        let k8s = format!("v{K8S_VERSION}");
        let mut args = vec!["generate", "cluster", name, "--infrastructure", "docker"];
        args.extend(["--kubernetes-version", &k8s]);
        args.extend(["--control-plane-machine-count", "1"]);
        args.extend(["--worker-machine-count", "1"]);
        args.extend(["--target-namespace", &ns]);
        if let Some(flavor) = flavor {
            args.extend(["--flavor", flavor]);
        }
        let manifest = kind.clusterctl(&args);
        wl(&kc, &["apply", "-f", "-"], Some(&manifest))
            .unwrap_or_else(|e| panic!("kubectl apply cluster {name}: {e}"));
    }
    // The move target comes up meanwhile (mostly waiting: kind, image loads, clusterctl).
    let target_init = {
        let target = target.clone();
        tokio::task::spawn_blocking(move || target.up_and_init())
    };

    // Our conversion webhook: `wl`'s two templates read back at v1beta1 (the class's are
    // DevMachineTemplates, v1beta2 only, as upstream's).
    // Polled: clusterctl waits for the Deployments, not for cainjector to put the CA into the
    // CRD's conversion config.
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

    // Their Nodes Ready, seen through their own API (the kubeconfig Secret KCP writes).
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
    }
    clusters_available(&kc, &ns, &["wl", "cc"], t2, "apply").await;

    // The MachinePool's worker is an instance of our DevMachinePool: its providerID listed in
    // the pool, a DevMachine owned by the pool. The list follows the instance's provisioned,
    // which the bootstrap's poll reports after the kubelet may already have joined (the Node
    // Ready above): waited for, not read once.
    let provider_ids = |pools: &serde_json::Value| -> Vec<serde_json::Value> {
        pools["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| {
                p["spec"]["providerIDList"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    };
    let pools = poll(
        Duration::from_secs(120),
        "the DevMachinePool lists its instance's providerID",
        || {
            let pools = wl_json(&kc, &["get", "devmachinepools", "-n", &ns])?;
            (provider_ids(&pools).len() == 1).then_some(pools)
        },
    )
    .await;
    let ids = provider_ids(&pools);
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
    let containers = kind.workload_container_states();
    assert_eq!(containers.len(), 6, "{containers:?}");

    // clusterctl upgrade: the plan offers the next version, apply installs it.
    let t3 = Instant::now();
    let plan = kind.clusterctl(&["upgrade", "plan"]);
    eprintln!("{plan}");
    assert!(
        plan.lines().any(|l| l.contains("infrastructure-docker")
            && l.contains(&this_version())
            && l.contains(&next_version())),
        "the plan offers {} -> {}:\n{plan}",
        this_version(),
        next_version()
    );
    let upgrade = format!("capd-system/docker:{}", next_version());
    kind.clusterctl(&[
        "upgrade",
        "apply",
        "--infrastructure",
        &upgrade,
        "--wait-providers",
    ]);
    eprintln!(
        "clusterctl upgrade apply: {:.0}s",
        t3.elapsed().as_secs_f64()
    );
    assert!(
        inventory(&kc).contains(&docker_at(&next_version())),
        "{:?}",
        inventory(&kc)
    );
    let (mgr_ns, mgr) = MANAGER.split_once('/').unwrap();
    let deployment = wl_json(&kc, &["get", "deployment", mgr, "-n", mgr_ns]).unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"], NEXT_IMAGE,
        "the upgraded Deployment runs the next version's image"
    );
    providers_available(&kc).await;
    clusters_available(&kc, &ns, &["wl", "cc"], t3, "upgrade").await;

    // clusterctl move of the namespace to the second management cluster.
    let target_log = target_init.await.expect("the move target's init");
    assert!(
        target_log.contains("Installing cert-manager"),
        "{target_log}"
    );
    let tkc = target.kubeconfig();
    providers_available(&tkc).await;
    assert!(
        inventory(&tkc).contains(&docker_at(&next_version())),
        "{:?}",
        inventory(&tkc)
    );
    let t4 = Instant::now();
    let to = tkc.display().to_string();
    kind.clusterctl(&["move", "--namespace", &ns, "--to-kubeconfig", &to]);
    eprintln!("clusterctl move: {:.0}s", t4.elapsed().as_secs_f64());
    let left = wl_json(
        &kc,
        &["get", "clusters,dockermachines,devmachines", "-n", &ns],
    )
    .unwrap();
    assert!(
        left["items"].as_array().unwrap().is_empty(),
        "moved objects left on the source: {left}"
    );
    clusters_available(&tkc, &ns, &["wl", "cc"], t4, "move").await;
    let ready = poll(
        Duration::from_secs(120),
        "every DockerMachine and DevMachine Ready on the target",
        || {
            let ms = infra_machines(&tkc, &ns)?;
            (ms.len() == 4 && ms.iter().all(|m| m.1)).then_some(ms)
        },
    )
    .await;
    eprintln!("on the target: {ready:?}");
    let described = target.clusterctl(&[
        "describe",
        "cluster",
        "wl",
        "-n",
        &ns,
        "--show-conditions",
        "all",
        "--grouping=false",
    ]);
    eprintln!("{described}");
    // Our DockerCluster's row and its conditions.
    for want in [
        &format!("DockerCluster {ns}/wl"),
        "LoadBalancerAvailable",
        "NotPaused",
    ] {
        assert!(described.contains(want), "{want} in:\n{described}");
    }
    // Neither the upgrade nor the move touched a container: same ids, same start times.
    assert_eq!(
        kind.workload_container_states(),
        containers,
        "containers created, removed or restarted by the upgrade or the move"
    );

    // Deleting the Clusters on the target removes every container of them.
    let t5 = Instant::now();
    wl(
        &tkc,
        &["delete", "cluster", "--all", "-n", &ns, "--wait=false"],
        None,
    )
    .unwrap();
    poll(
        Duration::from_secs(300),
        "the Clusters and their containers gone",
        || {
            let left = wl_json(&tkc, &["get", "clusters", "-n", &ns])?;
            (left["items"].as_array()?.is_empty() && kind.workload_containers().is_empty())
                .then_some(())
        },
    )
    .await;
    eprintln!("Clusters deleted: {:.0}s", t5.elapsed().as_secs_f64());

    // clusterctl delete: the provider goes, its CRDs (and so any object of them) stay.
    kind.clusterctl(&["delete", "--infrastructure", "docker"]);
    let after = inventory(&kc);
    assert!(
        !after
            .iter()
            .any(|p| p.starts_with("InfrastructureProvider:")),
        "{after:?}"
    );
    assert!(
        wl(&kc, &["get", "deployment", mgr, "-n", mgr_ns], None).is_err(),
        "the capd-rs Deployment is gone"
    );
    wl(
        &kc,
        &[
            "get",
            "crd",
            "dockerclusters.infrastructure.cluster.x-k8s.io",
        ],
        None,
    )
    .expect("clusterctl delete keeps the CRDs");

    for k in [&kind, &*target] {
        ok("hack/kind.sh down", &k.run("hack/kind.sh", "down"));
        let label = format!("label=io.x-k8s.kind.cluster={}", k.cluster);
        assert!(docker_lines(&["ps", "-aq", "--filter", &label]).is_empty());
    }
}
