//! Every manager the tests start authenticates as a ServiceAccount bound to exactly the rules
//! shipped in `config/rbac` (read from the files, never restated here): a verb missing there
//! fails the test that needs it. Each manager's requests, by verb and resource, are appended to
//! [`usage_file`]; `tests/rbac.rs` then checks that every shipped verb was used by some test, so
//! a verb nothing calls fails too.
use std::path::{Path, PathBuf};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
    config::{AuthInfo, Context, Kubeconfig, NamedAuthInfo, NamedContext},
};
use serde_json::json;

/// The namespace of the test ServiceAccounts and of their leader-election Leases.
pub const NAMESPACE: &str = "capd-rs-test-rbac";
/// The ServiceAccount with the shipped ClusterRole (and the leader-election Role).
pub const CLUSTER_SA: &str = "manager";

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where every test manager's (verb, resource) pairs are appended, one `verb resource` per line.
pub fn usage_file() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rbac-usage.txt")
}

fn read_yaml<T: serde::de::DeserializeOwned>(path: &str) -> T {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The rules of a shipped role file.
pub fn shipped_rules(path: &str) -> Vec<PolicyRule> {
    let value: serde_json::Value = read_yaml(path);
    serde_json::from_value(value["rules"].clone()).unwrap()
}

async fn apply<K>(api: &Api<K>, name: &str, body: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply("capd-rs-tests").force(),
        &Patch::Apply(&body),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

fn subject(sa: &str) -> serde_json::Value {
    json!([{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}])
}

/// The ServiceAccount `sa` in [`NAMESPACE`], with the shipped leader-election Role there.
async fn service_account(client: &Client, sa: &str) {
    apply(
        &Api::<Namespace>::all(client.clone()),
        NAMESPACE,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await;
    apply(
        &Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
        sa,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}),
    )
    .await;
    let role = format!("{sa}-leader-election");
    apply(
        &Api::<Role>::namespaced(client.clone(), NAMESPACE),
        &role,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": role},
               "rules": shipped_rules("config/rbac/leader_election_role.yaml")}),
    )
    .await;
    apply(
        &Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE),
        &role,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": role},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
               "subjects": subject(sa)}),
    )
    .await;
}

/// A kubeconfig for the ServiceAccount bound to the shipped ClusterRole (`config/rbac/role.yaml`).
pub async fn cluster_role_kubeconfig(client: &Client) -> PathBuf {
    service_account(client, CLUSTER_SA).await;
    let name = "capd-rs-test-manager";
    apply(
        &Api::<ClusterRole>::all(client.clone()),
        name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
               "rules": shipped_rules("config/rbac/role.yaml")}),
    )
    .await;
    apply(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": subject(CLUSTER_SA)}),
    )
    .await;
    kubeconfig_for(client, CLUSTER_SA).await
}

/// A kubeconfig for ServiceAccount `sa` bound only to the shipped namespaced Role
/// (`config/rbac/namespaced/role.yaml`) in `watched`.
pub async fn namespaced_role_kubeconfig(client: &Client, sa: &str, watched: &str) -> PathBuf {
    service_account(client, sa).await;
    let name = "capd-rs-test-manager";
    apply(
        &Api::<Role>::namespaced(client.clone(), watched),
        name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
               "rules": shipped_rules("config/rbac/namespaced/role.yaml")}),
    )
    .await;
    apply(
        &Api::<RoleBinding>::namespaced(client.clone(), watched),
        name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": subject(sa)}),
    )
    .await;
    kubeconfig_for(client, sa).await
}

/// A token for `sa` (TokenRequest, 3 h) in a kubeconfig next to the plane's, same server and CA.
async fn kubeconfig_for(client: &Client, sa: &str) -> PathBuf {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3 * 3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token: TokenRequest = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_subresource("token", sa, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {sa}: {e}"));
    let token = token.status.expect("token status").token;

    let mut kc = Kubeconfig::read_from(super::kubeconfig_path()).expect("plane kubeconfig");
    let cluster = kc.clusters.first().expect("a cluster").name.clone();
    kc.auth_infos = vec![NamedAuthInfo {
        name: sa.to_string(),
        auth_info: Some(AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        }),
        other: Default::default(),
    }];
    kc.contexts = vec![NamedContext {
        name: sa.to_string(),
        context: Some(Context {
            cluster,
            user: Some(sa.to_string()),
            ..Default::default()
        }),
        other: Default::default(),
    }];
    kc.current_context = Some(sa.to_string());
    // One file per call (parallel tests' managers read theirs while another is written), and
    // only for this user: it holds a token that can read every Secret on the plane.
    static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let path = std::env::temp_dir().join(format!(
        "capd-rs-test-{sa}-{}-{n}.kubeconfig",
        std::process::id()
    ));
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    file.write_all(serde_yaml_ng::to_string(&kc).unwrap().as_bytes())
        .unwrap();
    path
}

/// Append the (verb, resource) pairs a manager's `/metrics` reports to [`usage_file`].
pub fn record_usage(metrics: &str) {
    let mut lines = String::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("capd_kube_api_requests_total{"))
    {
        let label = |key: &str| {
            let start = line.find(&format!("{key}=\""))? + key.len() + 2;
            let end = start + line[start..].find('"')?;
            Some(line[start..end].to_string())
        };
        if let (Some(verb), Some(resource)) = (label("verb"), label("resource")) {
            lines.push_str(&format!("{verb} {resource}\n"));
        }
    }
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(usage_file())
        .unwrap();
    f.write_all(lines.as_bytes()).unwrap();
}
