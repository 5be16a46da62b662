//! Helpers of the end-to-end tests driven by the real Cluster API (tests/e2e*.rs).
use std::{collections::BTreeMap, process::Command};

use capd::{
    api::DockerMachine,
    docker::{ContainerRuntime, labels},
};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams},
};
use serde_json::json;

use super::*;

/// The versions hack/lib.sh builds (K8S_VERSION, CAPI_VERSION); `tests/hack_scripts.rs` checks
/// they are the same.
pub const K8S_VERSION: &str = "1.35.4";
pub const CAPI_VERSION: &str = "1.14.2";

/// A binary built by `hack/build-binaries.sh`.
pub fn bin(rel: &str) -> String {
    cache_dir().join("bin").join(rel).display().to_string()
}

pub fn kubectl(args: &[&str], stdin: Option<&str>) -> String {
    kubectl_at(&kubeconfig_path(), args, stdin).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
}

/// kubectl with the given kubeconfig (the plane's, or a workload cluster's); `Err` carries
/// stderr, so callers can poll.
pub fn kubectl_at(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new(bin(&format!("k8s-v{K8S_VERSION}/kubectl")))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--request-timeout=30s")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl (run hack/build-binaries.sh)");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `clusterctl generate cluster` from our default template with 1 control-plane machine and
/// `workers` workers. `node_image` sets `DOCKER_NODE_IMAGE` (default: the kind mapping's
/// `kindest/node:v<version>`); `worker_secret` switches the MachineDeployment to a prepared
/// bootstrap Secret (for the light image, whose control plane never initialises).
pub fn render_cluster(
    name: &str,
    ns: &str,
    workers: u32,
    node_image: Option<&str>,
    worker_secret: Option<&str>,
) -> String {
    render(name, ns, workers, node_image, worker_secret, K8S_VERSION)
}

/// [`render_cluster`] at another Kubernetes version (its node image from the kind mapping).
pub fn render_cluster_at(name: &str, ns: &str, workers: u32, version: &str) -> String {
    render(name, ns, workers, None, None, version)
}

fn render(
    name: &str,
    ns: &str,
    workers: u32,
    node_image: Option<&str>,
    worker_secret: Option<&str>,
    version: &str,
) -> String {
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/templates/cluster-template.yaml"
    );
    let mut cmd = Command::new(bin(&format!("capi-v{CAPI_VERSION}/clusterctl")));
    cmd.args([
        "generate",
        "cluster",
        name,
        "--from",
        template,
        "--kubernetes-version",
        &format!("v{version}"),
    ])
    .args([
        "--control-plane-machine-count",
        "1",
        "--worker-machine-count",
        &workers.to_string(),
        "--target-namespace",
        ns,
    ])
    .env("KUBECONFIG", kubeconfig_path());
    if let Some(image) = node_image {
        cmd.env("DOCKER_NODE_IMAGE", image);
    }
    let out = cmd.output().expect("clusterctl (run hack/capi.sh up)");
    assert!(
        out.status.success(),
        "clusterctl generate cluster: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8(out.stdout).unwrap();
    let Some(secret) = worker_secret else {
        return rendered;
    };
    let mut docs = Vec::new();
    for doc in rendered.split("\n---\n").filter(|d| d.contains("kind:")) {
        let mut v: serde_json::Value = serde_yaml_ng::from_str(doc).unwrap();
        match v["kind"].as_str() {
            Some("MachineDeployment") => {
                v["spec"]["template"]["spec"]["bootstrap"] = json!({"dataSecretName": secret})
            }
            Some("KubeadmConfigTemplate") => continue,
            _ => {}
        }
        docs.push(serde_yaml_ng::to_string(&v).unwrap());
    }
    docs.join("---\n")
}

pub fn capi_api(env: &TestEnvRef, ns: &str, group: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(group, "v1beta2", kind);
    Api::namespaced_with(
        env.client.clone(),
        ns,
        &kube::api::ApiResource::from_gvk(&gvk),
    )
}

pub async fn docker_machines(env: &TestEnvRef, ns: &str) -> Vec<DockerMachine> {
    Api::<DockerMachine>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

pub fn is_cp(dm: &DockerMachine) -> bool {
    dm.labels().contains_key("cluster.x-k8s.io/control-plane")
}

pub async fn cluster_containers(name: &str, ns: &str) -> Vec<capd::docker::ContainerInfo> {
    let selector = BTreeMap::from([
        (labels::KIND_CLUSTER.to_string(), name.to_string()),
        (labels::CLUSTER_NAMESPACE.to_string(), ns.to_string()),
    ]);
    docker().await.list(&selector).await.unwrap()
}
