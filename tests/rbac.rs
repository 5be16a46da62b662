//! The shipped RBAC (config/rbac) against what the manager really does.
//! - The namespaced Role grants what the ClusterRole grants, and a manager bound to it alone,
//!   started with --namespace, provisions a cluster and a machine.
//! - `every_shipped_verb_is_used` (run by hack/test.sh after every other test): each verb the
//!   shipped roles grant was used by some test manager (their requests are recorded by
//!   tests/common/rbac.rs), so a grant nothing needs fails.
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use capd::api::DockerCluster;
use common::{rbac::*, *};
use kube::{
    Api, Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::json;

const BOOTSTRAP_OK: &str = include_str!("fixtures/bootstrap-ok.yaml");

/// (verb, resource) pairs a role file grants; core and named groups alike, by plural.
fn grants(path: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for rule in shipped_rules(path) {
        for resource in rule.resources.iter().flatten() {
            for verb in &rule.verbs {
                out.insert((verb.clone(), resource.clone()));
            }
        }
    }
    out
}

#[test]
fn the_namespaced_role_grants_what_the_cluster_role_grants() {
    // But the metrics endpoint's token and access reviews: cluster-scoped, no Role grants them.
    let reviews = ["authentication.k8s.io", "authorization.k8s.io"];
    let mut cluster = shipped_rules("config/rbac/role.yaml");
    cluster.retain(|r| {
        !r.api_groups
            .iter()
            .flatten()
            .any(|g| reviews.contains(&g.as_str()))
    });
    assert_eq!(shipped_rules("config/rbac/namespaced/role.yaml"), cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_bound_to_the_namespaced_role_alone_provisions() {
    let mut env = TestEnv::new("nsrole").await;
    let r = env.handle();
    let ns = r.namespace("ns").await;
    let sa = format!("manager-ns-{}", env.id);
    env.manager_kubeconfig = namespaced_role_kubeconfig(&env.client, &sa, &ns).await;

    // That identity can do nothing cluster-wide: the ClusterRole is not what makes it work.
    let kc = Kubeconfig::read_from(&env.manager_kubeconfig).unwrap();
    let sa_client = Client::try_from(
        Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let err = Api::<DockerCluster>::all(sa_client.clone())
        .list(&Default::default())
        .await
        .expect_err("a cluster-wide list must be forbidden");
    assert!(err.to_string().contains("forbidden"), "{err}");
    assert!(
        Api::<DockerCluster>::namespaced(sa_client, &ns)
            .list(&Default::default())
            .await
            .is_ok()
    );

    env.start_manager_in_namespace(&ns);
    env.run(|env| async move {
        let name = format!("{}-c", env.id);
        let cluster = env.create_cluster(&ns, &name, false).await;
        env.create_docker_cluster(&ns, &cluster, json!({})).await;
        eventually(Duration::from_secs(90), "DockerCluster Ready", || async {
            env.docker_cluster(&ns, &name)
                .await
                .filter(|dc| dc.cond_true("Ready"))
        })
        .await;
        env.mark_infrastructure_provisioned(&ns, &name).await;
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        env.create_machine(
            &ns,
            &name,
            &format!("{name}-cp"),
            true,
            Some("boot"),
            json!({"customImage": NODE_IMAGE}),
        )
        .await;
        eventually(
            Duration::from_secs(90),
            "DockerMachine provisioned",
            || async {
                env.docker_machine(&ns, &format!("{name}-cp"))
                    .await
                    .filter(fully_provisioned)
            },
        )
        .await;
        assert!(
            !env.manager_log().contains("forbidden"),
            "permission errors under the namespaced Role"
        );
    })
    .await;
}

/// Run last (hack/test.sh does, after the integration and e2e tests): every verb granted by the
/// shipped roles was used by a test manager.
#[test]
#[ignore = "reads what the other tests recorded; hack/test.sh runs it after them"]
fn every_shipped_verb_is_used() {
    let recorded = std::fs::read_to_string(usage_file())
        .unwrap_or_else(|e| panic!("{}: {e}; run the other tests first", usage_file().display()));
    let used: BTreeSet<(String, String)> = recorded
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(v, r)| (v.to_string(), r.to_string()))
        .collect();
    let mut granted = grants("config/rbac/role.yaml");
    granted.extend(grants("config/rbac/leader_election_role.yaml"));
    // Needed, but only when a race goes one way: caches::get reads an owner by name when its
    // watch has not delivered it yet. A test cannot force that without reaching into the manager.
    let race_only: BTreeSet<(String, String)> = [
        "clusters",
        "machines",
        "machinepools",
        "dockerclusters",
        "devclusters",
    ]
    .iter()
    .map(|r| ("get".to_string(), r.to_string()))
    .collect();
    // Never requested: the API server's OwnerReferencesPermissionEnforcement checks them when a
    // pool creates an instance owned by it with blockOwnerDeletion (the plane runs that plugin,
    // so the pool tests fail without them).
    let admission_only: BTreeSet<(String, String)> = [
        "dockermachinepools/finalizers",
        "devmachinepools/finalizers",
    ]
    .iter()
    .map(|r| ("update".to_string(), r.to_string()))
    .collect();
    let unused: Vec<_> = granted
        .difference(&used)
        .filter(|g| !race_only.contains(*g) && !admission_only.contains(*g))
        .collect();
    assert!(
        unused.is_empty(),
        "config/rbac grants what no test manager used (remove it, or test the path that needs it): {unused:?}\nused: {used:?}"
    );
}
