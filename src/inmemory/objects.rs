//! What an in-memory machine puts in its workload cluster, phase by phase, as the API server
//! would hold it: the objects a kubelet and kubeadm would have made, reduced to the fields CAPI
//! core, KCP and CABPK read (docs/in-memory.md). Pure: JSON in, JSON out; the controller
//! stores them ([`super::store::Group::create`]).
//!
//! - Node phase: the Node (named as the DevMachine, with its providerID; a control plane's
//!   carries the control-plane label and taint), Ready from the start.
//! - Control planes: the static Pods of etcd, the API server, the scheduler and the controller
//!   manager (`<component>-<node>` in kube-system, Running and Ready, marked as mirror Pods so
//!   that a drain skips them as it skips a kubelet's).
//! - The first API server: what `kubeadm init` leaves behind that KCP reads (the kubeadm-config,
//!   kube-proxy and CoreDNS objects, the `kubeadm:get-nodes` RBAC).
use serde_json::{Value, json};

/// The control-plane role label and taint key kubeadm sets on a control-plane Node.
pub const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

/// The static Pods of a control-plane machine, in the order the phases make them: etcd with
/// the etcd phase, the others with the API server phase.
pub const ETCD: &str = "etcd";
pub const API_SERVER_COMPONENTS: &[&str] = &[
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The CoreDNS image kubeadm's default would be; KCP compares it with the one it wants and
/// updates the Deployment when they differ, as on a real cluster.
const COREDNS_IMAGE: &str = "registry.k8s.io/coredns/coredns:v1.10.1";
/// A Corefile KCP can read (it migrates it when it changes the CoreDNS version).
const COREFILE: &str = ".:53 {\n    errors\n    health\n    forward . /etc/resolv.conf\n}\n";

/// The Node of an in-memory machine. `version` is the Machine's `spec.version` (the kubelet's).
pub fn node(name: &str, provider_id: &str, version: Option<&str>, control_plane: bool) -> Value {
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    });
    let mut spec = json!({ "providerID": provider_id });
    if control_plane {
        labels[CONTROL_PLANE_ROLE] = json!("");
        spec["taints"] = json!([{ "key": CONTROL_PLANE_ROLE, "effect": "NoSchedule" }]);
    }
    let condition = |type_: &str, status: &str, reason: &str| json!({ "type": type_, "status": status, "reason": reason, "message": "in-memory" });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": labels },
        "spec": spec,
        "status": {
            "conditions": [
                condition("Ready", "True", "KubeletReady"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            ],
            "nodeInfo": {
                "kubeletVersion": version.unwrap_or_default(),
                "kubeProxyVersion": version.unwrap_or_default(),
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "in-memory://0",
            },
        },
    })
}

/// The name of a static Pod: `<component>-<node>`, as the kubelet names a mirror Pod.
pub fn static_pod_name(component: &str, node: &str) -> String {
    format!("{component}-{node}")
}

/// The mirror Pod of a control-plane component on `node`. `annotations` are the component's
/// own (the etcd member's identity on an etcd Pod).
pub fn static_pod(component: &str, node: &str, annotations: Value) -> Value {
    let name = static_pod_name(component, node);
    let mut annotations = match annotations {
        Value::Object(m) => m,
        _ => Default::default(),
    };
    // A mirror Pod is what a kubelet reports for a static Pod; drain leaves such Pods alone.
    annotations.insert("kubernetes.io/config.mirror".into(), json!(name));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": { "component": component, "tier": "control-plane" },
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,
            "priorityClassName": "system-node-critical",
            "containers": [{ "name": component, "image": format!("registry.k8s.io/{component}") }],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                { "type": "Initialized", "status": "True" },
                { "type": "ContainersReady", "status": "True" },
                { "type": "PodScheduled", "status": "True" },
                { "type": "Ready", "status": "True" },
            ],
        },
    })
}

/// `v1.35.4+build` as an image tag: `v1.35.4_build` (OCI tags have no `+`).
fn image_tag(version: &str) -> String {
    version.replace('+', "_")
}

/// What `kubeadm init` leaves for KCP to read and update, as `(kind, object)`; created once per
/// cluster, by its first API server. The kubeadm-config's ClusterConfiguration starts empty:
/// KCP writes what it wants there.
pub fn kubeadm_init_objects(version: Option<&str>) -> Vec<(&'static str, Value)> {
    let proxy_image = format!(
        "registry.k8s.io/kube-proxy:{}",
        image_tag(version.unwrap_or("v0.0.0"))
    );
    let rbac = "rbac.authorization.k8s.io";
    vec![
        (
            "ClusterRole",
            json!({
                "apiVersion": format!("{rbac}/v1"), "kind": "ClusterRole",
                "metadata": { "name": "kubeadm:get-nodes" },
                "rules": [{ "apiGroups": [""], "resources": ["nodes"], "verbs": ["get"] }],
            }),
        ),
        (
            "ClusterRoleBinding",
            json!({
                "apiVersion": format!("{rbac}/v1"), "kind": "ClusterRoleBinding",
                "metadata": { "name": "kubeadm:get-nodes" },
                "roleRef": { "apiGroup": rbac, "kind": "ClusterRole", "name": "kubeadm:get-nodes" },
                "subjects": [{ "apiGroup": rbac, "kind": "Group", "name": "system:bootstrappers:kubeadm:default-node-token" }],
            }),
        ),
        (
            "ConfigMap",
            config_map("kubeadm-config", "ClusterConfiguration", ""),
        ),
        (
            "DaemonSet",
            workload("DaemonSet", "kube-proxy", "kube-proxy", &proxy_image),
        ),
        ("ConfigMap", config_map("coredns", "Corefile", COREFILE)),
        (
            "Deployment",
            workload("Deployment", "coredns", "kube-dns", COREDNS_IMAGE),
        ),
    ]
}

/// A kube-system ConfigMap `name` holding one `key`.
fn config_map(name: &str, key: &str, value: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "kube-system" },
        "data": { key: value },
    })
}

/// A kube-system DaemonSet or Deployment `name` whose Pods (labelled `k8s-app: <app>`) run one
/// container of the same name: what KCP reads and patches of kube-proxy and CoreDNS.
fn workload(kind: &str, name: &str, app: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": { "name": name, "namespace": "kube-system", "labels": { "k8s-app": app } },
        "spec": {
            "selector": { "matchLabels": { "k8s-app": app } },
            "template": {
                "metadata": { "labels": { "k8s-app": app } },
                "spec": { "containers": [{ "name": name, "image": image }] },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_plane_node_has_the_role_label_and_taint_a_worker_has_neither() {
        let cp = node("m-1", "in-memory://m-1", Some("v1.35.4"), true);
        assert_eq!(cp["metadata"]["labels"][CONTROL_PLANE_ROLE], "");
        assert_eq!(cp["spec"]["taints"][0]["key"], CONTROL_PLANE_ROLE);
        assert_eq!(cp["spec"]["providerID"], "in-memory://m-1");
        assert_eq!(cp["status"]["nodeInfo"]["kubeletVersion"], "v1.35.4");
        assert_eq!(cp["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(cp["status"]["conditions"][0]["status"], "True");
        let w = node("w", "in-memory://w", None, false);
        assert!(w["metadata"]["labels"].get(CONTROL_PLANE_ROLE).is_none());
        assert!(w["spec"].get("taints").is_none());
    }

    #[test]
    fn a_static_pod_is_named_and_labelled_as_kcp_looks_it_up() {
        let p = static_pod("etcd", "m-1", json!({"x": "1"}));
        assert_eq!(p["metadata"]["name"], "etcd-m-1");
        assert_eq!(p["metadata"]["namespace"], "kube-system");
        assert_eq!(p["metadata"]["labels"]["component"], "etcd");
        assert_eq!(p["metadata"]["labels"]["tier"], "control-plane");
        assert_eq!(p["metadata"]["annotations"]["x"], "1");
        assert_eq!(
            p["metadata"]["annotations"]["kubernetes.io/config.mirror"],
            "etcd-m-1"
        );
        assert_eq!(p["spec"]["nodeName"], "m-1");
        assert_eq!(p["status"]["phase"], "Running");
        assert!(
            p["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        );
    }

    #[test]
    fn kube_proxy_carries_the_version_as_an_image_tag() {
        let objs = kubeadm_init_objects(Some("v1.35.4+k3"));
        let (_, ds) = objs.iter().find(|(k, _)| *k == "DaemonSet").unwrap();
        assert_eq!(
            ds["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.k8s.io/kube-proxy:v1.35.4_k3"
        );
        let names: Vec<_> = objs
            .iter()
            .map(|(k, v)| format!("{k}/{}", v["metadata"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            names,
            [
                "ClusterRole/kubeadm:get-nodes",
                "ClusterRoleBinding/kubeadm:get-nodes",
                "ConfigMap/kubeadm-config",
                "DaemonSet/kube-proxy",
                "ConfigMap/coredns",
                "Deployment/coredns"
            ]
        );
    }
}
