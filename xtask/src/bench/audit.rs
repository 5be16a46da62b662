//! Kubernetes API requests counted at the API server, one instrument for every subject whatever
//! its client library counts: each manager under test runs as a ServiceAccount of its own (one
//! per run, in [`NAMESPACE`]), and the plane's kube-apiserver writes an audit event for each
//! request of those ServiceAccounts and of nobody else (`hack/plane.sh`: level Metadata for the
//! namespace's ServiceAccount group, only the ResponseComplete stage).
use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, ServiceAccount},
    rbac::v1::ClusterRoleBinding,
};
use kube::{
    Api, Client,
    api::{DeleteParams, PostParams},
    config::Kubeconfig,
};
use serde::Deserialize;
use serde_json::json;

/// The namespace of the managers' ServiceAccounts. The plane's audit policy names its group.
pub const NAMESPACE: &str = "capd-rs-bench";
/// How long a manager's token is valid: longer than any phase.
const TOKEN_SECONDS: i64 = 6 * 3600;

/// The identity one run's manager has at the API server.
pub struct Identity {
    name: String,
    /// As the audit log names it.
    pub username: String,
    /// A kubeconfig with the ServiceAccount's token (mode 0600, in the bench's work dir).
    pub kubeconfig: PathBuf,
}

impl Identity {
    /// A ServiceAccount named `name` bound to `cluster-admin` (both managers' own roles are
    /// narrower; the bench measures requests, not permissions), and a kubeconfig for it.
    pub async fn create(
        client: &Client,
        admin: &Kubeconfig,
        name: &str,
        dir: &Path,
    ) -> Result<Self> {
        let ns: Api<Namespace> = Api::all(client.clone());
        let created = ns
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": NAMESPACE}
                }))?,
            )
            .await;
        ignore_exists(created)?;
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
        let sa = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        ignore_exists(sas.create(&PostParams::default(), &sa).await)?;
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let binding = serde_json::from_value(json!({
            "metadata": {"name": binding_name(name)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
        }))?;
        ignore_exists(bindings.create(&PostParams::default(), &binding).await)?;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(TOKEN_SECONDS),
                ..Default::default()
            },
            ..Default::default()
        };
        let token = sas
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("a token for ServiceAccount {NAMESPACE}/{name}"))?
            .status
            .context("TokenRequest without status")?
            .token;
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        write_private(
            &kubeconfig,
            &serde_yaml_ng::to_string(&kubeconfig_for(admin, &token)?)?,
        )?;
        Ok(Self {
            name: name.to_string(),
            username: format!("system:serviceaccount:{NAMESPACE}:{name}"),
            kubeconfig,
        })
    }

    /// Remove the ServiceAccount, its binding and its kubeconfig (best effort).
    pub async fn delete(&self, client: &Client) {
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let _ = bindings
            .delete(&binding_name(&self.name), &DeleteParams::default())
            .await;
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
        let _ = sas.delete(&self.name, &DeleteParams::default()).await;
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

fn binding_name(name: &str) -> String {
    format!("{NAMESPACE}-{name}")
}

fn ignore_exists<T>(r: kube::Result<T>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The admin kubeconfig's current cluster, with a token user.
fn kubeconfig_for(admin: &Kubeconfig, token: &str) -> Result<serde_json::Value> {
    let current = admin.current_context.as_deref();
    let cluster_name = admin
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == current)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .context("the admin kubeconfig has no current context")?;
    let cluster = admin
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .with_context(|| format!("the admin kubeconfig has no cluster {cluster_name}"))?;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [serde_json::to_value(cluster)?],
        "users": [{"name": "bench", "user": {"token": token}}],
        "contexts": [{"name": "bench", "context": {"cluster": cluster_name, "user": "bench"}}],
        "current-context": "bench",
    }))
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// The part of an audit event (audit.k8s.io/v1 Event) the bench reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    request_received_timestamp: DateTime<Utc>,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: Option<String>,
}

/// `username`'s requests received in each of `windows` ([from, to)), by verb and resource
/// ("patch dockermachines/status"), from the audit log at `log`. Watches are left out: a watch's
/// event is written when it ends, which for most is after the phase (`rest_client_requests_total`
/// counts one when it starts; a manager's watches start before the first window).
pub fn count(
    log: &Path,
    username: &str,
    windows: &[(DateTime<Utc>, DateTime<Utc>)],
) -> Result<Vec<BTreeMap<String, u64>>> {
    let file = std::fs::File::open(log)
        .with_context(|| format!("open the API server's audit log {}", log.display()))?;
    count_lines(BufReader::new(file), username, windows)
}

fn count_lines(
    reader: impl BufRead,
    username: &str,
    windows: &[(DateTime<Utc>, DateTime<Utc>)],
) -> Result<Vec<BTreeMap<String, u64>>> {
    let mut out = vec![BTreeMap::new(); windows.len()];
    // The user's name in quotes: most lines are other runs' and are not parsed.
    let quoted = format!("\"{username}\"");
    for line in reader.lines() {
        let line = line?;
        if !line.contains(&quoted) {
            continue;
        }
        let Ok(e) = serde_json::from_str::<Event>(&line) else {
            continue;
        };
        if e.stage != "ResponseComplete" || e.user.username != username || e.verb == "watch" {
            continue;
        }
        let t = e.request_received_timestamp;
        let Some(i) = windows.iter().position(|(from, to)| *from <= t && t < *to) else {
            continue;
        };
        let resource = e
            .object_ref
            .map_or_else(String::new, |o| match o.subresource {
                Some(sub) => format!("{}/{sub}", o.resource),
                None => o.resource,
            });
        *out[i].entry(format!("{} {resource}", e.verb)).or_default() += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An audit event line; `resource` may name a subresource ("dockermachines/status").
    fn line(stage: &str, user: &str, verb: &str, resource: &str, at: &str) -> String {
        let mut object = json!({"namespace": "ns", "name": "m"});
        match resource.split_once('/') {
            Some((r, sub)) => {
                object["resource"] = json!(r);
                object["subresource"] = json!(sub);
            }
            None => object["resource"] = json!(resource),
        }
        json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "auditID": "x", "stage": stage, "requestURI": "/apis/...", "verb": verb,
            "user": {"username": user, "groups": ["system:serviceaccounts"]},
            "objectRef": object, "requestReceivedTimestamp": at,
            "stageTimestamp": at,
        })
        .to_string()
    }

    #[test]
    fn counts_one_users_completed_requests_by_window_verb_and_resource() {
        const DONE: &str = "ResponseComplete";
        let me = "system:serviceaccount:capd-rs-bench:bench-rs-n10-r1-1";
        let other = "system:serviceaccount:capd-rs-bench:bench-up-n10-r1-1";
        let status = "dockermachines/status";
        let lines = [
            line(DONE, me, "patch", status, "2026-11-28T10:00:01.5Z"),
            line(DONE, me, "patch", status, "2026-11-28T10:00:02Z"),
            line(DONE, me, "get", "secrets", "2026-11-28T10:00:03Z"),
            line(
                "ResponseStarted",
                me,
                "get",
                "secrets",
                "2026-11-28T10:00:03Z",
            ),
            line(DONE, me, "watch", "dockermachines", "2026-11-28T10:00:03Z"),
            line(DONE, other, "get", "secrets", "2026-11-28T10:00:03Z"),
            line(DONE, me, "get", "secrets", "2026-11-28T10:00:10Z"),
            line(DONE, me, "list", "machines", "2026-11-28T09:59:59Z"),
            format!("not json, but it names \"{me}\""),
        ]
        .join("\n");
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let windows = [
            (t("2026-11-28T10:00:00Z"), t("2026-11-28T10:00:10Z")),
            (t("2026-11-28T10:00:10Z"), t("2026-11-28T10:00:20Z")),
        ];
        let got = count_lines(lines.as_bytes(), me, &windows).unwrap();
        let expect = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        assert_eq!(
            got,
            [
                expect(&[("patch dockermachines/status", 2), ("get secrets", 1)]),
                expect(&[("get secrets", 1)]),
            ],
            "one stage per request, no watch, no other user, each in its window, none outside"
        );
    }

    #[test]
    fn a_manager_kubeconfig_keeps_the_cluster_and_carries_only_the_token() {
        let admin: Kubeconfig = serde_yaml_ng::from_str(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: plane\n  cluster:\n    server: https://127.0.0.1:16443\n    certificate-authority-data: Q0E=\nusers:\n- name: admin\n  user:\n    client-key-data: S0VZ\ncontexts:\n- name: plane\n  context: {cluster: plane, user: admin}\ncurrent-context: plane\n",
        )
        .unwrap();
        let kc = kubeconfig_for(&admin, "tok").unwrap();
        assert_eq!(
            kc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:16443"
        );
        assert_eq!(
            kc["clusters"][0]["cluster"]["certificate-authority-data"],
            "Q0E="
        );
        assert_eq!(
            kc["users"],
            json!([{"name": "bench", "user": {"token": "tok"}}])
        );
        assert!(!kc.to_string().contains("S0VZ"), "no admin key: {kc}");
        let parsed: Kubeconfig = serde_json::from_value(kc).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some("bench"));
    }
}
