//! The diagnostics server against the real API server of the local plane, with the manager
//! running as the shipped ClusterRole's ServiceAccount (tests/common/rbac.rs):
//! - by default /metrics is HTTPS and answers 401 without a valid bearer token, 403 to a user
//!   the API server does not allow to get /metrics, and 200 to one bound to the shipped
//!   `metrics-reader` ClusterRole, with controller-runtime's series counting our reconciles;
//!   the reviews behind an allowed token are cached (repeated scrapes cost no API calls);
//! - with --insecure-diagnostics it is plain HTTP for anyone, and never on the health port.
mod common;

use std::time::Duration;

use capd::api::DockerCluster;
use common::*;
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// A ServiceAccount `name` in `ns` and a token for it (TokenRequest, 1 h).
async fn service_account_token(client: &Client, ns: &str, name: &str) -> String {
    let api = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("ServiceAccount {name}: {e}"));
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token: TokenRequest = api
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {name}: {e}"));
    token.status.expect("token status").token
}

/// The shipped metrics-reader ClusterRole (rules read from config/rbac), under a test name,
/// bound to `sa` in `ns`; returns the binding's name (cluster-scoped: the test deletes it).
async fn bind_metrics_reader(client: &Client, ns: &str, sa: &str, id: &str) -> String {
    let role = "capd-rs-test-metrics-reader";
    Api::<ClusterRole>::all(client.clone())
        .patch(
            role,
            &PatchParams::apply("capd-rs-tests").force(),
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": rbac::shipped_rules("config/rbac/metrics_reader_role.yaml"),
            })),
        )
        .await
        .expect("metrics-reader ClusterRole");
    let binding = format!("capd-rs-test-metrics-reader-{id}");
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            &binding,
            &PatchParams::apply("capd-rs-tests").force(),
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
            })),
        )
        .await
        .expect("metrics-reader ClusterRoleBinding");
    binding
}

/// The value of the sample line starting with `prefix` (metric name and labels), summed.
fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_token_whose_user_may_get_them() {
    let mut env = TestEnv::new("diag").await;
    let r = env.handle();
    let ns = r.namespace("ns").await;
    let reader = service_account_token(&env.client, &ns, "reader").await;
    let nobody = service_account_token(&env.client, &ns, "nobody").await;
    let binding = bind_metrics_reader(&env.client, &ns, "reader", &env.id).await;
    env.metrics_token = Some(reader.clone());
    env.start_manager(&[], None);
    let client = env.client.clone();
    env.run(|env| async move {
        env.manager_ready().await;
        let port = env.diagnostics_port;
        let status = |token: Option<&str>| {
            let token = token.map(str::to_string);
            async move {
                let client = reqwest::Client::builder()
                    .danger_accept_invalid_certs(true)
                    .build()
                    .unwrap();
                let mut request = client.get(format!("https://127.0.0.1:{port}/metrics"));
                if let Some(t) = token {
                    request = request.bearer_auth(t);
                }
                request.send().await.expect("HTTPS /metrics").status()
            }
        };
        // Plain HTTP is not served there.
        assert!(
            reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
                .await
                .map_or(true, |r| r.status() != 200),
            "plain HTTP /metrics must not answer"
        );
        assert_eq!(status(None).await, 401, "no token");
        assert_eq!(
            status(Some("not-a-token")).await,
            401,
            "a token the API server does not know"
        );
        assert_eq!(status(Some(&nobody)).await, 403, "a user without the role");

        // A reconcile is counted under controller-runtime's name. The DockerCluster has no
        // Cluster (the reconcile waits for its owner): enough to be counted, and independent of
        // CAPI's webhooks on the shared plane.
        let name = format!("{}-c", env.id);
        Api::<DockerCluster>::namespaced(env.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerCluster",
                    "metadata": {"name": name, "namespace": ns,
                                 "labels": {"cluster.x-k8s.io/watch-filter": env.id}},
                    "spec": {}
                }))
                .unwrap(),
            )
            .await
            .expect("create DockerCluster");
        let text = eventually(
            Duration::from_secs(90),
            "a dockercluster reconcile counted",
            || async {
                let response = scrape(port, Some(&reader)).await.ok()?;
                assert_eq!(response.status(), 200, "the metrics reader");
                let text = response.text().await.ok()?;
                (sample(
                    &text,
                    r#"controller_runtime_reconcile_total{controller="dockercluster""#,
                ) >= 1.0)
                    .then_some(text)
            },
        )
        .await;
        for series in [
            "controller_runtime_reconcile_time_seconds_bucket{",
            "controller_runtime_max_concurrent_reconciles{controller=\"dockermachine\"} 100",
            "controller_runtime_active_workers{",
            "rest_client_requests_total{code=\"201\",method=\"POST\",host=\"127.0.0.1:",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
            "capd_reconcile_total{",
        ] {
            assert!(text.contains(series), "{series} missing from /metrics");
        }

        // The reader's token was reviewed once: further scrapes are answered from the cache.
        let reviews = |text: &str| {
            sample(
                text,
                r#"capd_kube_api_requests_total{verb="create",resource="tokenreviews"}"#,
            )
        };
        let before = reviews(&text);
        assert!(before >= 1.0, "the manager made TokenReviews");
        let mut after = before;
        for _ in 0..5 {
            let text = scrape(port, Some(&reader)).await.unwrap().text().await.unwrap();
            after = reviews(&text);
        }
        assert_eq!(before, after, "repeated scrapes reviewed the token again");
    })
    .await;
    let _ = Api::<ClusterRoleBinding>::all(client)
        .delete(&binding, &DeleteParams::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_diagnostics_serve_plain_http_without_auth() {
    // No metrics token: the manager runs with --insecure-diagnostics.
    let mut env = TestEnv::new("diagin").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        env.manager_ready().await;
        let response = scrape(env.diagnostics_port, None)
            .await
            .expect("plain /metrics");
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        assert!(text.contains("process_start_time_seconds "), "{text}");
        assert!(
            text.contains(
                r#"controller_runtime_max_concurrent_reconciles{controller="dockermachine"} 100"#
            ),
            "{text}"
        );
        // Not on the health port any more (upstream has none there).
        let health = reqwest::get(format!("http://127.0.0.1:{}/metrics", env.health_port))
            .await
            .unwrap();
        assert_eq!(health.status(), 404);
    })
    .await;
}
