//! `hack/demo.sh` and `hack/test.sh` compose: the demo, brought up before the second half of the
//! suite (`hack/test.sh` does so right after the CAPI managers start) and left running while the
//! other tests create their own clusters on the same plane, is untouched by them, touched none of
//! their objects, and `hack/demo.sh down` then removes everything it made.
//!
//! Ignored by default: it needs the demo up. `hack/test.sh` runs it with `--ignored`.
mod common;

use std::{collections::BTreeSet, path::PathBuf, process::Command};

use capd::api::{DockerCluster, DockerMachine};
use common::{TEST_LABEL, cache_dir, client, cluster_provisioned, docker_lines};
use kube::{Api, ResourceExt};

/// The demo instance `hack/test.sh` brings up (`DEMO_NAME`; `hack/demo.sh`'s default otherwise):
/// its cluster, its run label, and (prefixed) its namespace and state directory.
fn instance() -> String {
    std::env::var("DEMO_NAME").unwrap_or_else(|_| "demo".into())
}

fn plane_dir() -> PathBuf {
    std::env::var("CAPD_RS_PLANE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| cache_dir().join("plane"))
}

/// Every `namespace=<value>` of the reconcile spans in the demo manager's log.
fn reconciled_namespaces(log: &str) -> BTreeSet<String> {
    let ansi = regex::Regex::new(r"\x1b\[[0-9;]*m").unwrap();
    let field = regex::Regex::new(r"namespace=([A-Za-z0-9.\-]+)").unwrap();
    let plain = ansi.replace_all(log, "");
    field
        .captures_iter(&plain)
        .map(|c| c[1].to_string())
        .collect()
}

/// The names of the containers (or networks) carrying the demo's run label.
fn labelled(kind: &str) -> Vec<String> {
    let label = format!("label={TEST_LABEL}={}", instance());
    match kind {
        "network" => docker_lines(&["network", "ls", "--filter", &label, "--format", "{{.Name}}"]),
        _ => docker_lines(&["ps", "-a", "--filter", &label, "--format", "{{.Names}}"]),
    }
}

#[tokio::test]
#[ignore = "needs the demo up (hack/test.sh brings it up and runs this)"]
async fn the_demo_beside_the_suite_is_untouched_and_leaves_nothing() {
    let (name, namespace) = (instance(), format!("capd-rs-{}", instance()));
    let client = client().await;
    let dcs: Api<DockerCluster> = Api::namespaced(client.clone(), &namespace);
    let dms: Api<DockerMachine> = Api::namespaced(client.clone(), &namespace);

    // Untouched: the cluster the demo made is still there, provisioned, with its three machines.
    let dc = dcs.get(&name).await.expect("the demo's DockerCluster");
    assert!(cluster_provisioned(dc.status.as_ref()), "{:?}", dc.status);
    let machines = dms.list(&Default::default()).await.unwrap().items;
    let provisioned: Vec<_> = machines
        .iter()
        .filter(|m| {
            m.status
                .as_ref()
                .and_then(|s| s.initialization.as_ref())
                .and_then(|i| i.provisioned)
                == Some(true)
        })
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(provisioned.len(), 3, "provisioned: {provisioned:?}");

    // Its containers are its own cluster's and nobody else's: the LB and the three nodes, all of
    // the demo's namespace (the old demo manager, watching every namespace, made containers for
    // the tests' clusters under the demo's label).
    let containers = labelled("container");
    assert_eq!(containers.len(), 4, "{containers:?}");
    assert!(containers.contains(&format!("{name}-lb")), "{containers:?}");
    for container in &containers {
        let ns = docker_lines(&[
            "inspect",
            "--format",
            "{{index .Config.Labels \"capd-rs.x-k8s.io/cluster-namespace\"}}",
            container,
        ]);
        assert_eq!(ns, [namespace.as_str()], "{container}");
    }

    // It reconciled nothing outside its namespace, though the suite's clusters shared the plane.
    let log = std::fs::read_to_string(plane_dir().join(&name).join("manager.log"))
        .expect("the demo manager's log");
    let namespaces = reconciled_namespaces(&log);
    assert_eq!(
        namespaces,
        BTreeSet::from([namespace.clone()]),
        "namespaces the demo manager reconciled in"
    );

    // Its teardown works whatever the suite did meanwhile, and leaves nothing of it.
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let down = Command::new(repo.join("hack/demo.sh"))
        .arg("down")
        .env("DEMO_NAME", &name)
        .current_dir(&repo)
        .output()
        .expect("hack/demo.sh down");
    assert!(
        down.status.success(),
        "hack/demo.sh down: {}\n{}",
        String::from_utf8_lossy(&down.stdout),
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(labelled("container"), Vec::<String>::new());
    assert_eq!(labelled("network"), Vec::<String>::new());
    assert!(dcs.get_opt(&name).await.unwrap().is_none());
}

#[test]
fn namespaces_are_read_from_the_spans_whatever_the_colours() {
    let log = "\x1b[2m2026\x1b[0m INFO reconcile{kind=DockerMachine \x1b[3mnamespace\x1b[0m\x1b[2m=\x1b[0mcapd-rs-demo name=m}: x\n\
               INFO reconcile{kind=DockerCluster namespace=other-ns name=c}: y\n\
               INFO controllers starting scope=Scope { namespace: Some(\"capd-rs-demo\") }";
    assert_eq!(
        reconciled_namespaces(log),
        BTreeSet::from(["capd-rs-demo".to_string(), "other-ns".to_string()])
    );
}
