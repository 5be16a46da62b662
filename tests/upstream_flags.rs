//! The manager started with upstream CAPD's own Deployment arguments (cluster-api
//! test@v1.14.2, `infrastructure/docker/config/manager/manager.yaml`), read from the Go module
//! cache at test time with its clusterctl variables at their defaults, serves: a drop-in
//! replacement must not crash-loop on upstream's command line.
mod common;

use std::{collections::BTreeMap, process::Command, time::Duration};

use capd::{api::DockerCluster, controllers::docker_cluster::FINALIZER};
use common::{TestEnv, eventually, free_port};
use kube::{Api, ResourceExt};
use serde_json::json;

const UPSTREAM_MODULE: &str = "sigs.k8s.io/cluster-api/test@v1.14.2";

/// The `args` of upstream's manager container, as written (with `${VAR:=default}` in them).
fn upstream_manager_args() -> Vec<String> {
    let out = Command::new("go")
        .args(["mod", "download", "-json", UPSTREAM_MODULE])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("the go tool (to read upstream's manifest from the module cache)");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "go mod download {UPSTREAM_MODULE}: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let dir = info["Dir"].as_str().expect("module Dir");
    let path = format!("{dir}/infrastructure/docker/config/manager/manager.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let deployment: serde_json::Value = serde_yaml_ng::from_str(&text).expect("manager.yaml");
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    let manager = containers
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("the manager container");
    manager["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

/// clusterctl's `${VAR:=default}`: the variable's value when given, else the default.
fn substitute(arg: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("closing brace") + start;
        let inner = &rest[start + 2..end];
        let (name, default) = inner.split_once(":=").unwrap_or((inner, ""));
        out.push_str(vars.get(name).map_or(default, String::as_str));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn clusterctl_substitution() {
    let vars = BTreeMap::from([("B", "x".to_string())]);
    assert_eq!(substitute("--a=${A:=1},b=${B:=2}", &vars), "--a=1,b=x");
}

/// Upstream's args with the clusterctl variables in `vars`, the others at their defaults.
fn upstream_args_with(vars: &BTreeMap<&str, String>) -> Vec<String> {
    upstream_manager_args()
        .iter()
        .map(|a| substitute(a, vars))
        .collect()
}

/// `EXP_MACHINE_POOL=false` means what it means upstream: the pool controllers of both
/// families do not start, while the manager serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exp_machine_pool_false_keeps_the_pool_controllers_off() {
    let upstream = upstream_args_with(&BTreeMap::from([
        (
            "CAPI_DIAGNOSTICS_ADDRESS",
            format!("127.0.0.1:{}", free_port()),
        ),
        ("EXP_MACHINE_POOL", "false".to_string()),
    ]));
    assert!(
        upstream.iter().any(|a| a.contains("MachinePool=false")),
        "{upstream:?}"
    );
    let mut env = TestEnv::new("nopool").await;
    let lease = format!("capd-rs-test-{}", env.id);
    let mut args: Vec<&str> = upstream.iter().map(String::as_str).collect();
    let lease_flag = format!("--leader-elect-lease-name={lease}");
    args.push(&lease_flag);
    env.start_manager(&args, None);
    env.run(move |env| async move {
        env.manager_ready().await;
        for pool in ["DockerMachinePool", "DevMachinePool"] {
            eventually(
                Duration::from_secs(60),
                "pool controller reported off",
                || async {
                    env.manager_log()
                        .lines()
                        .any(|l| {
                            l.contains("MachinePool feature gate disabled") && l.contains(pool)
                        })
                        .then_some(())
                },
            )
            .await;
        }
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(env.client.clone(), common::rbac::NAMESPACE);
        let _ = leases.delete(&lease, &Default::default()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_deployment_args_start_a_serving_manager() {
    let raw = upstream_manager_args();
    assert!(
        raw.iter().any(|a| a.starts_with("--diagnostics-address=")),
        "upstream's args changed: {raw:?}"
    );
    // The shared host: the diagnostics address is a free port, set through its variable as a
    // clusterctl user would; every other variable keeps its default.
    let vars = BTreeMap::from([(
        "CAPI_DIAGNOSTICS_ADDRESS",
        format!("127.0.0.1:{}", free_port()),
    )]);
    let upstream: Vec<String> = raw.iter().map(|a| substitute(a, &vars)).collect();
    println!("upstream args: {upstream:?}");

    let mut env = TestEnv::new("upflag").await;
    // The harness's own flags (kubeconfig, health address, watch filter, test labels) come
    // first; upstream's `--leader-elect` takes this test's own Lease, not the shared default.
    let lease = format!("capd-rs-test-{}", env.id);
    let mut args: Vec<&str> = upstream.iter().map(String::as_str).collect();
    let lease_flag = format!("--leader-elect-lease-name={lease}");
    args.push(&lease_flag);
    env.start_manager(&args, None);
    // Ready, or exited (the issue: clap refused upstream's flags and the pod crash-looped):
    // say which at once rather than waiting out the readiness timeout.
    let readyz = format!("http://127.0.0.1:{}/readyz", env.handle().health_port);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let manager = env.manager.as_mut().expect("manager started");
        if let Ok(Some(status)) = manager.child.try_wait() {
            panic!(
                "the manager exited ({status}) on upstream's arguments:\n{}",
                manager.logs()
            );
        }
        if reqwest::get(&readyz).await.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "manager not ready in 90 s:\n{}",
            manager.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let id = env.id.clone();
    env.run(move |env| async move {
        let ns = env.namespace("ns").await;
        let name = format!("{id}-c");
        let cluster = env.create_cluster(&ns, &name, false).await;
        env.create_docker_cluster(&ns, &cluster, json!({})).await;
        eventually(
            Duration::from_secs(60),
            "DockerCluster reconciled (finalizer added)",
            || async {
                env.docker_cluster(&ns, &name)
                    .await
                    .filter(|dc: &DockerCluster| dc.finalizers().iter().any(|f| f == FINALIZER))
            },
        )
        .await;
        let log = env.manager_log();
        assert!(
            log.contains("feature gates"),
            "the feature gates are logged at start"
        );
        assert!(
            !log.contains("MachinePool feature gate disabled"),
            "EXP_MACHINE_POOL defaults to true: the pool controllers run"
        );
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(env.client.clone(), common::rbac::NAMESPACE);
        let _ = leases.delete(&lease, &Default::default()).await;
    })
    .await;
}
