//! A kind management cluster from this project's node image (`hack/kind.sh`): the first step of
//! running capd-rs, CAPI and cert-manager as Pods. Asserted: the Node goes Ready; CoreDNS runs
//! and a Pod resolves both a Service name and a Docker container name through it (the node
//! image's DNS setup; without it CoreDNS stops on "Loop detected"); the host's Docker socket is
//! in the node (for capd-rs as a Pod); `down` leaves no container or network behind.
mod common;

use std::{path::PathBuf, process::Command, time::Duration};

use common::{docker_lines, eventually, workload::*};

struct Kind {
    cluster: String,
    network: String,
}

impl Kind {
    fn script(&self, verb: &str) -> std::process::Output {
        Command::new("hack/kind.sh")
            .arg(verb)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("KIND_CLUSTER", &self.cluster)
            .env("KIND_EXPERIMENTAL_DOCKER_NETWORK", &self.network)
            .output()
            .expect("hack/kind.sh runs")
    }

    fn kubeconfig(&self) -> PathBuf {
        common::cache_dir()
            .join("kind")
            .join(&self.cluster)
            .join("kubeconfig")
    }
}

/// `hack/kind.sh down` even when the test fails half-way.
impl Drop for Kind {
    fn drop(&mut self) {
        let _ = self.script("down");
    }
}

#[tokio::test]
async fn a_kind_management_cluster_from_our_node_image() {
    let id = std::process::id();
    let kind = Kind {
        cluster: format!("capd-kind{id}"),
        network: format!("capd-kind{id}"),
    };
    let up = kind.script("up");
    assert!(
        up.status.success(),
        "hack/kind.sh up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let kc = kind.kubeconfig();
    let node = format!("{}-control-plane", kind.cluster);

    eventually(Duration::from_secs(120), "the Node Ready", || async {
        let n = wl_json(&kc, &["get", "node", &node])?;
        n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
            .then_some(())
    })
    .await;
    eventually(Duration::from_secs(120), "CoreDNS Ready", || async {
        let pods = wl_json(
            &kc,
            &["get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns"],
        )?;
        let items = pods["items"].as_array()?;
        (!items.is_empty()
            && items.iter().all(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            }))
        .then_some(())
    })
    .await;

    // Names through CoreDNS: a Service, and the node's container name (Docker's resolver, which
    // CoreDNS forwards to through the node's resolv.conf). Tried for up to a minute: CoreDNS
    // Ready does not yet mean kube-proxy has programmed the kube-dns Service (a first CI run
    // looked up too early).
    let lookups = format!(
        "for i in $(seq 60); do getent hosts kubernetes.default.svc.cluster.local && \
         getent ahostsv4 {node} && exit 0; echo attempt $i failed; sleep 1; done; exit 1"
    );
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "dns",
        "image": format!("registry.k8s.io/kube-proxy:v{}", common::capi_e2e::K8S_VERSION),
        "imagePullPolicy": "Never", "command": ["sh", "-c", lookups]}]}})
    .to_string();
    wl(&kc, &["apply", "-f", "-"], Some(&pod)).unwrap();
    let phase = eventually(Duration::from_secs(180), "the dns Pod done", || async {
        let p = wl_json(&kc, &["get", "pod", "dns"])?;
        let phase = p["status"]["phase"].as_str()?.to_string();
        (phase == "Succeeded" || phase == "Failed").then_some(phase)
    })
    .await;
    let logs = wl(&kc, &["logs", "dns"], None).unwrap_or_default();
    eprintln!("name lookups from a Pod:\n{logs}");
    assert_eq!(phase, "Succeeded", "name lookups from a Pod: {logs}");
    assert!(logs.contains("10.96.0.1"), "the kubernetes Service: {logs}");
    assert!(
        logs.contains(" STREAM "),
        "the node container's name: {logs}"
    );

    let mounts = docker_lines(&[
        "inspect",
        "-f",
        "{{range .Mounts}}{{.Destination}}{{\"\\n\"}}{{end}}",
        &node,
    ]);
    assert!(
        mounts.iter().any(|m| m == "/var/run/docker.sock"),
        "the Docker socket in the node: {mounts:?}"
    );

    let down = kind.script("down");
    assert!(
        down.status.success(),
        "hack/kind.sh down: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    let label = format!("label=io.x-k8s.kind.cluster={}", kind.cluster);
    assert!(docker_lines(&["ps", "-aq", "--filter", &label]).is_empty());
    let name = format!("name=^{}$", kind.network);
    assert!(
        docker_lines(&["network", "ls", "-q", "--filter", &name]).is_empty(),
        "the cluster's network is removed"
    );
}
