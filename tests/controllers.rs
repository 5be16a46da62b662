//! Integration tests of the controllers against the real local plane and Docker Engine.
//! Prerequisite: `hack/plane.sh up` (the README's test command does it). Without the plane these
//! tests fail; they never skip.
mod common;

use futures::FutureExt;
use std::time::Duration;

use capd::{
    api::{DockerCluster, DockerMachine, conditions::ConditionStatus},
    docker::{ContainerRuntime, engine::BollardRuntime, labels},
};
use common::*;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

const LONG: Duration = Duration::from_secs(90);
const BOOTSTRAP_OK: &str = include_str!("fixtures/bootstrap-ok.yaml");

fn node_spec() -> serde_json::Value {
    json!({"customImage": NODE_IMAGE})
}

async fn haproxy_cfg(lb: &str) -> String {
    let docker = docker().await;
    lb_config(&docker, lb).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_and_machines_lifecycle() {
    let mut env = TestEnv::new("life").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let lb = format!("{name}-lb");
        let dc = env.provisioned_cluster(&ns, &name).await;

        // Finalizer, endpoint, provisioned/ready and conditions on the DockerCluster.
        assert!(
            dc.finalizers()
                .contains(&"dockercluster.infrastructure.cluster.x-k8s.io".to_string())
        );
        let status = dc.status.clone().unwrap();
        assert_eq!(status.ready, Some(true));
        assert!(is_true(status.conditions.as_ref(), "LoadBalancerAvailable"));
        assert!(is_true(status.conditions.as_ref(), "Ready"));
        assert_eq!(
            condition(status.conditions.as_ref(), "Paused")
                .unwrap()
                .status,
            ConditionStatus::False
        );

        // A running LB container with our labels, whose address is the endpoint.
        let lb_info = inspect(&docker, &lb).await.expect("LB container exists");
        assert!(lb_info.is_running());
        assert_eq!(lb_info.labels[labels::KIND_CLUSTER], name);
        assert_eq!(lb_info.labels[labels::KIND_ROLE], "external-load-balancer");
        assert_eq!(lb_info.labels[labels::CLUSTER_NAMESPACE], ns);
        assert_eq!(lb_info.labels[labels::OWNER_UID], dc.uid().unwrap());
        assert_eq!(lb_info.labels[TEST_LABEL], env.id);
        let endpoint = dc
            .spec
            .control_plane_endpoint
            .clone()
            .expect("endpoint set");
        assert_eq!(endpoint.host.as_deref(), lb_info.ipv4.as_deref());
        assert_eq!(endpoint.port, Some(6443));

        // HAProxy answers on the published ports: the API frontend and the stats page.
        let api_port = lb_info.host_ports["6443/tcp"];
        tokio::net::TcpStream::connect(("127.0.0.1", api_port))
            .await
            .expect("HAProxy accepts on the published API port");
        let stats_port = lb_info.host_ports["8404/tcp"];
        let stats = reqwest::get(format!("http://127.0.0.1:{stats_port}/stats"))
            .await
            .expect("stats answer");
        assert_eq!(stats.status(), 200);
        assert!(stats.text().await.unwrap().contains("kube-apiservers"));
        // On loopback only (read-only is checked below, once there is a server to act on).
        assert_eq!(
            docker_cli_output(&["port", &lb, "8404/tcp"]),
            format!("127.0.0.1:{stats_port}")
        );

        // Every version of the DockerMachines, as a watch sees them.
        let versions = versions_of::<DockerMachine>(Api::namespaced(env.client.clone(), &ns));

        // A control-plane and a worker machine with bootstrap data.
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        env.create_machine(
            &ns,
            &name,
            &format!("{name}-cp-0"),
            true,
            Some("boot"),
            node_spec(),
        )
        .await;
        env.create_machine(&ns, &name, "worker-0", false, Some("boot"), node_spec())
            .await;
        let cp = format!("{name}-cp-0");
        let worker = format!("{name}-worker-0"); // machine name does not start with the cluster name

        for (dm_name, container) in [
            (cp.clone(), cp.clone()),
            ("worker-0".to_string(), worker.clone()),
        ] {
            let dm = eventually(LONG, &format!("{dm_name} provisioned"), || async {
                env.docker_machine(&ns, &dm_name)
                    .await
                    .filter(fully_provisioned)
            })
            .await;
            assert_eq!(
                dm.spec.provider_id.as_deref(),
                Some(format!("docker:////{container}").as_str())
            );
            let st = dm.status.clone().unwrap();
            assert_eq!(st.initialization.and_then(|i| i.provisioned), Some(true));
            assert!(is_true(st.conditions.as_ref(), "ContainerProvisioned"));
            // Upstream v1.14's bootstrap conditions, and not v1.13's.
            for t in ["CGroupsReady", "PreLoadedImagesReady", "BootstrapCompleted"] {
                assert!(is_true(st.conditions.as_ref(), t), "{t}");
            }
            assert!(
                !st.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "BootstrapExecSucceeded"),
                "v1.13's condition is gone"
            );
            assert!(is_true(st.conditions.as_ref(), "Ready"));
            let info = inspect(&docker, &container).await.expect("node container");
            let addrs = st.addresses.unwrap();
            assert_eq!(addrs[0].address, container);
            assert!(addrs.iter().any(|a| Some(&a.address) == info.ipv4.as_ref()));
            assert_eq!(info.labels[labels::OWNER_UID], dm.uid().unwrap());
            assert_eq!(info.labels[TEST_LABEL], env.id);
            // write_files (plain, base64, gzip+base64) and runcmd really ran inside.
            for (script, expected) in [
                ("cat /etc/capd-test/plain.txt", "written by write_files"),
                ("stat -c %a /etc/capd-test/plain.txt", "640"),
                ("cat /etc/capd-test/encoded.txt", "decoded from base64"),
                (
                    "cat /etc/capd-test/compressed.txt",
                    "decompressed from gzip base64",
                ),
                ("cat /etc/capd-test/runcmd.txt", "ran by runcmd"),
            ] {
                assert_eq!(
                    exec(&docker, &container, script).await.1,
                    expected,
                    "{container}: {script}"
                );
            }
        }
        // The write that makes a machine provisioned already says which generation its
        // conditions describe: the one our own providerID write produced (not the one before
        // it, which took a second status write to correct).
        let provisioned: Vec<DockerMachine> = versions
            .lock()
            .unwrap()
            .iter()
            .filter(|dm| fully_provisioned(dm))
            .cloned()
            .collect();
        assert!(provisioned.len() >= 2, "both machines seen provisioned");
        for dm in provisioned {
            for c in dm.status.unwrap().conditions.unwrap() {
                assert_eq!(
                    c.observed_generation,
                    dm.metadata.generation,
                    "{} {} in the version at rv {:?}",
                    dm.metadata.name.as_deref().unwrap(),
                    c.type_,
                    dm.metadata.resource_version
                );
            }
        }
        assert_eq!(
            inspect(&docker, &cp).await.unwrap().labels[labels::KIND_ROLE],
            "control-plane"
        );
        assert_eq!(
            inspect(&docker, &worker).await.unwrap().labels[labels::KIND_ROLE],
            "worker"
        );

        // The control-plane node (only) is an LB backend.
        let cfg = eventually(LONG, "CP backend in haproxy.cfg", || async {
            let cfg = haproxy_cfg(&lb).await;
            cfg.contains(&format!("server {cp} ")).then_some(cfg)
        })
        .await;
        assert!(!cfg.contains(&worker), "workers are not backends:\n{cfg}");
        // The stats page is read-only: haproxy draws its admin form (drain, disable, ...) for
        // a backend with servers when `stats admin` is on.
        let page = reqwest::get(format!("http://127.0.0.1:{stats_port}/stats"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(page.contains(&cp), "the stats page lists the server");
        assert!(!page.contains("Set state to"), "stats admin is on");

        // A reconcile of a provisioned DockerMachine reads its owners from the watch caches: no
        // API GETs. An annotation is a change the machine's predicate lets through.
        const GETS: &str = r#"capd_kube_api_requests_total{verb="get""#;
        const DM_RECONCILES: &str = r#"capd_reconcile_total{controller="DockerMachine"}"#;
        let (gets, reconciles) = (env.metric(GETS).await, env.metric(DM_RECONCILES).await);
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        for dm in [cp.as_str(), "worker-0"] {
            let touch = json!({"metadata": {"annotations": {"capd-rs.test/touch": "1"}}});
            dms.patch(dm, &PatchParams::default(), &Patch::Merge(&touch))
                .await
                .unwrap();
        }
        eventually(LONG, "both machines reconciled again", || async {
            (env.metric(DM_RECONCILES).await >= reconciles + 2).then_some(())
        })
        .await;
        let (gets_after, reconciled) = (
            env.metric(GETS).await,
            env.metric(DM_RECONCILES).await - reconciles,
        );
        println!(
            "API GETs for {reconciled} reconciles of provisioned DockerMachines: {}",
            gets_after - gets
        );
        assert_eq!(
            gets_after, gets,
            "a provisioned machine's reconcile makes no GETs"
        );

        // Delete the machines: containers gone, backend removed, finalizers gone, objects gone.
        env.delete(dms.clone(), &cp).await;
        env.delete(dms.clone(), "worker-0").await;
        eventually(LONG, "DockerMachines gone", || async {
            (env.docker_machine(&ns, &cp).await.is_none()
                && env.docker_machine(&ns, "worker-0").await.is_none())
            .then_some(())
        })
        .await;
        assert!(inspect(&docker, &cp).await.is_none() && inspect(&docker, &worker).await.is_none());
        assert!(
            !haproxy_cfg(&lb).await.contains(&format!("server {cp} ")),
            "backend removed"
        );

        // Delete the cluster: LB gone, object gone.
        env.delete(
            Api::<DockerCluster>::namespaced(env.client.clone(), &ns),
            &name,
        )
        .await;
        eventually(LONG, "DockerCluster gone", || async {
            env.docker_cluster(&ns, &name).await.is_none().then_some(())
        })
        .await;
        assert!(inspect(&docker, &lb).await.is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_objects_are_left_alone_until_resumed() {
    let mut env = TestEnv::new("pause").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let cluster = env.create_cluster(&ns, &name, false).await;
        // Paused by annotation: a Paused condition and no container.
        env.create_docker_cluster(
            &ns,
            &cluster,
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}}),
        )
        .await;
        let dc = eventually(LONG, "Paused condition", || async {
            env.docker_cluster(&ns, &name)
                .await
                .filter(|dc| dc.cond_true("Paused"))
        })
        .await;
        let paused = dc.cond("Paused").unwrap();
        assert_eq!(paused.reason, "Paused");
        assert!(paused.message.contains("annotation"), "{}", paused.message);
        never(Duration::from_secs(3), "no LB while paused", || async {
            inspect(&docker, &format!("{name}-lb")).await.is_some()
        })
        .await;

        // Resume: the LB appears.
        let api: Api<DockerCluster> = Api::namespaced(env.client.clone(), &ns);
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}})),
        )
        .await
        .unwrap();
        eventually(LONG, "LB after resume", || async {
            inspect(&docker, &format!("{name}-lb")).await
        })
        .await;
        env.mark_infrastructure_provisioned(&ns, &name).await;

        // Paused through Cluster.spec.paused: the machine waits with a Paused condition.
        env.set_cluster_paused(&ns, &name, true).await;
        // The Cluster and the DockerMachine arrive by different watches, in no set order: a
        // machine created right after the patch can be reconciled against the cached Cluster
        // from before it (seen in CI: a node container while "paused"). The DockerCluster's
        // Paused condition is written from the same shared Cluster cache, so once it names
        // spec.paused, every reconcile after it sees the pause.
        eventually(LONG, "the manager sees the Cluster paused", || async {
            env.docker_cluster(&ns, &name).await.filter(|dc| {
                dc.cond_true("Paused") && dc.cond("Paused").unwrap().message.contains("spec.paused")
            })
        })
        .await;
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        env.create_machine(
            &ns,
            &name,
            &format!("{name}-w"),
            false,
            Some("boot"),
            node_spec(),
        )
        .await;
        let dm = eventually(LONG, "machine Paused condition", || async {
            env.docker_machine(&ns, &format!("{name}-w"))
                .await
                .filter(|dm| dm.cond_true("Paused"))
        })
        .await;
        assert!(dm.cond("Paused").unwrap().message.contains("spec.paused"));
        never(
            Duration::from_secs(3),
            "no node container while paused",
            || async { inspect(&docker, &format!("{name}-w")).await.is_some() },
        )
        .await;

        // Unpausing the Cluster reaches the DockerMachine through the Cluster watch.
        env.set_cluster_paused(&ns, &name, false).await;
        eventually(LONG, "machine provisioned after resume", || async {
            env.docker_machine(&ns, &format!("{name}-w"))
                .await
                .filter(fully_provisioned)
        })
        .await;
    })
    .await;
}

/// Bootstrap data in the shape CABPK renders from a KubeadmConfig with `users`, `ntp`,
/// `bootCommands` and `mounts` (refused as unsupported keys before), in an `Opaque` Secret
/// (refused for its type before).
const BOOTSTRAP_CABPK_MODULES: &str = r#"#cloud-config
write_files:
- path: /etc/capd-test/plain.txt
  content: written by write_files
bootcmd:
- mkdir -p /etc/capd-test && echo boot >> /etc/capd-test/order
runcmd:
- echo "run $(id -u capi)" >> /etc/capd-test/order
- [sh, -c, 'mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete']
ntp:
  enabled: true
  servers: [time.example.com]
users:
- name: capi
  gecos: Cluster API
  groups: [adm, capd-ops]
  shell: /bin/sh
  sudo: ALL=(ALL) NOPASSWD:ALL
  ssh_authorized_keys:
  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForCapdTests capi@test
mounts:
- [LABEL=data, /var/lib/data]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cabpk_modules_create_the_user_run_bootcmd_first_and_warn_once() {
    let mut env = TestEnv::new("users").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;
        env.create_secret_of_type(&ns, "cabpk", Some(BOOTSTRAP_CABPK_MODULES), None, "Opaque")
            .await;
        env.create_machine(&ns, &name, "m-users", false, Some("cabpk"), node_spec())
            .await;
        eventually(LONG, "m-users provisioned", || async {
            env.docker_machine(&ns, "m-users")
                .await
                .filter(fully_provisioned)
        })
        .await;
        let node = format!("{name}-m-users");
        let sh = |script: &'static str| {
            let (docker, node) = (&docker, &node);
            async move {
                let (code, out) = exec(docker, node, script).await;
                assert_eq!(code, 0, "{script}: {out}");
                out
            }
        };
        // bootcmd ran before everything, runcmd after the user existed.
        let uid = sh("id -u capi").await;
        assert_eq!(
            sh("cat /etc/capd-test/order").await,
            format!("boot\nrun {uid}")
        );
        let groups = sh("id -nG capi").await;
        assert!(
            groups.split(' ').any(|g| g == "adm") && groups.split(' ').any(|g| g == "capd-ops"),
            "{groups}"
        );
        assert_eq!(
            sh("getent passwd capi | cut -d: -f5,6,7").await,
            "Cluster API:/home/capi:/bin/sh"
        );
        assert_eq!(
            sh("cat /home/capi/.ssh/authorized_keys").await,
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForCapdTests capi@test"
        );
        assert_eq!(
            sh("stat -c '%U %a' /home/capi/.ssh /home/capi/.ssh/authorized_keys").await,
            "capi 700\ncapi 600"
        );
        assert_eq!(
            sh("cat /etc/sudoers.d/90-cloud-init-users").await,
            "capi ALL=(ALL) NOPASSWD:ALL"
        );
        assert_eq!(
            sh("stat -c '%a' /etc/sudoers.d/90-cloud-init-users").await,
            "440"
        );
        assert_eq!(
            sh("cat /etc/capd-test/plain.txt").await,
            "written by write_files"
        );

        // One Warning Event naming the skipped modules, however often the machine reconciles.
        let skipped_events = || async {
            let events: Api<k8s_openapi::api::events::v1::Event> =
                Api::namespaced(env.client.clone(), &ns);
            events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("m-users")
                        && e.reason.as_deref() == Some("BootstrapModulesSkipped")
                })
                .collect::<Vec<_>>()
        };
        let first = eventually(LONG, "BootstrapModulesSkipped Event", || async {
            let found = skipped_events().await;
            (!found.is_empty()).then_some(found)
        })
        .await;
        let note = first[0].note.clone().unwrap_or_default();
        assert_eq!(first[0].type_.as_deref(), Some("Warning"));
        assert!(note.ends_with(": ntp, mounts"), "{note}");
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        for i in 0..3 {
            let touch = json!({"metadata": {"annotations": {"capd-rs.test/touch": i.to_string()}}});
            dms.patch("m-users", &PatchParams::default(), &Patch::Merge(&touch))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let again = skipped_events().await;
        let count: i32 = again
            .iter()
            .map(|e| e.deprecated_count.unwrap_or(1).max(1))
            .sum();
        let series: i32 = again
            .iter()
            .filter_map(|e| e.series.as_ref().map(|s| s.count))
            .sum();
        assert_eq!(
            (again.len(), count, series),
            (1, 1, 0),
            "one Event, not one per reconcile: {again:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_invalid_bootstrap_data_give_conditions() {
    let mut env = TestEnv::new("fail").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;

        // Its file content and the token are secrets; the marker is harmless output.
        let failing = "#cloud-config\nwrite_files:\n- path: /etc/capd-test/secret.txt\n  content: file-content-7f3a9\nruncmd:\n- echo before\n- echo 'token abcdef.0123456789abcdef' >&2; printf 'out%s' put-marker-91c; exit 3\n- touch /never\n";
        env.create_secret(&ns, "failing", Some(failing), None).await;
        env.create_secret(&ns, "novalue", None, None).await;
        env.create_secret(&ns, "badformat", Some("x"), Some("cloud-init-v9")).await;
        env.create_secret(&ns, "garbage", Some("#cloud-config\nwrite_files: [unclosed\n"), None).await;
        let cases = [
            ("m-fail", Some("failing"), "BootstrapFailed", vec!["failed: shell script running echo exited with code 3"]),
            ("m-missing", Some("does-not-exist"), "BootstrapDataNotFound", vec!["not found"]),
            ("m-novalue", Some("novalue"), "BootstrapDataInvalid", vec!["has no key \"value\""]),
            ("m-badformat", Some("badformat"), "BootstrapDataInvalid", vec!["cloud-init-v9"]),
            ("m-garbage", Some("garbage"), "BootstrapDataInvalid", vec!["YAML"]),
        ];
        for (m, secret, _, _) in &cases {
            env.create_machine(&ns, &name, m, false, *secret, node_spec()).await;
        }
        for (m, _, reason, fragments) in &cases {
            let dm = eventually(LONG, &format!("{m}: BootstrapCompleted reason {reason}"), || async {
                env.docker_machine(&ns, m).await.filter(|dm| {
                    dm.cond("BootstrapCompleted").is_some_and(|c| c.reason == *reason)
                })
            })
            .await;
            let c = dm.cond("BootstrapCompleted").unwrap().clone();
            assert_eq!(c.status, ConditionStatus::False);
            for f in fragments {
                assert!(c.message.contains(f), "{m}: {:?} should contain {f:?}", c.message);
            }
            assert!(!c.message.contains("0123456789abcdef"), "secrets are redacted: {}", c.message);
            assert!(!c.message.contains("output-marker-91c"), "output stays out of status: {}", c.message);
            assert!(dm.spec.provider_id.is_none(), "{m} must not be provisioned");
            assert!(!dm.cond_true("Ready"));
        }
        // A host path the manager never mounts (the Docker socket's directory): refused with a
        // reason before any container exists.
        let mount = json!({"customImage": NODE_IMAGE, "extraMounts": [{"hostPath": "/var/run/", "containerPath": "/host-run"}]});
        env.create_machine(&ns, &name, "m-mount", false, Some("failing"), mount).await;
        let dm = eventually(LONG, "m-mount refused", || async {
            env.docker_machine(&ns, "m-mount").await.filter(|dm| dm.has_reason("ContainerProvisioned", "InvalidSpec"))
        })
        .await;
        let message = &dm.cond("ContainerProvisioned").unwrap().message;
        assert!(message.contains("spec.extraMounts[0].hostPath \"/var/run/\" is not allowed"), "{message}");
        assert!(message.contains("socket"), "{message}");
        assert!(inspect(&docker, &format!("{name}-m-mount")).await.is_none());
        env.delete(Api::<DockerMachine>::namespaced(env.client.clone(), &ns), "m-mount").await;

        // Each terminal reason published one Warning Event on its DockerMachine, with the
        // condition's message (and so no output either).
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), &ns);
        let warnings = eventually(LONG, "Warning Events", || async {
            let list = events.list(&Default::default()).await.ok()?.items;
            let failed = list.iter().any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("m-fail")
                    && e.reason.as_deref() == Some("BootstrapFailed")
                    && e.type_.as_deref() == Some("Warning")
            });
            failed.then_some(list)
        })
        .await;
        assert!(warnings.iter().all(|e| !e.note.as_deref().unwrap_or_default().contains("output-marker-91c")));

        // The failing command stopped the run: the step after it never ran.
        let container = format!("{name}-m-fail");
        assert_eq!(exec(&docker, &container, "test -e /never; echo $?").await.1, "1");
        // No retry storm: each failed or blocked machine is reconciled a few times at most in
        // 10 s (a loop, even one at 1 s, would show as 10 or more).
        let before: Vec<usize> = cases.iter().map(|(m, ..)| env.reconciles_of(m)).collect();
        assert!(before.iter().all(|n| *n > 0), "the log shows each machine's reconciles: {before:?}");
        tokio::time::sleep(Duration::from_secs(10)).await;
        for ((m, ..), before) in cases.iter().zip(before) {
            let during = env.reconciles_of(m) - before;
            assert!(during <= 3, "{m} reconciled {during} times in 10 s while failed");
        }
        // The failed step's output reached the log, redacted; no Secret's content did.
        let log = env.manager_log();
        assert!(log.contains("output-marker-91c"), "the output tail is logged");
        assert!(log.contains("token [redacted]"), "the tail is redacted in the log");
        for secret in ["0123456789abcdef", "file-content-7f3a9"] {
            assert!(!log.contains(secret), "{secret:?} from a bootstrap Secret reached the log");
        }

        // Deleting the failed machines leaves nothing behind.
        for (m, ..) in &cases {
            env.delete(Api::<DockerMachine>::namespaced(env.client.clone(), &ns), m).await;
        }
        eventually(LONG, "failed machines deleted", || async {
            let mut all_gone = true;
            for (m, ..) in &cases {
                all_gone &= env.docker_machine(&ns, m).await.is_none();
            }
            all_gone.then_some(())
        })
        .await;
        for (m, ..) in &cases {
            assert!(inspect(&docker, &format!("{name}-{m}")).await.is_none());
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_lb_restarts_removed_node_is_reported_and_deletion_survives_a_missing_lb() {
    let mut env = TestEnv::new("heal").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let lb = format!("{name}-lb");
        env.provisioned_cluster(&ns, &name).await;

        // Stopped by hand: started again (a Docker event triggers the reconcile, no resync wait).
        assert!(
            std::process::Command::new("docker")
                .args(["stop", "-t", "1", &lb])
                .status()
                .unwrap()
                .success()
        );
        eventually(Duration::from_secs(30), "LB running again", || async {
            inspect(&docker, &lb).await.filter(|c| c.is_running())
        })
        .await;
        // haproxy starts from the config we wrote (not the image's placeholder) and stays up.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let restarted = inspect(&docker, &lb).await.unwrap();
        assert!(
            restarted.is_running(),
            "the restarted LB must keep running with our haproxy.cfg"
        );
        let stats = reqwest::get(format!(
            "http://127.0.0.1:{}/stats",
            restarted.host_ports["8404/tcp"]
        ))
        .await
        .unwrap();
        assert_eq!(stats.status(), 200);

        // A provisioned node container that stopped (an engine restart stops them all; here by
        // hand) is started again, the same container (its state is the node's), and the
        // machine is Ready again; provisioned and providerID never waver.
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        env.create_machine(&ns, &name, "w0", false, Some("boot"), node_spec())
            .await;
        let provisioned = eventually(LONG, "w0 provisioned", || async {
            env.docker_machine(&ns, "w0")
                .await
                .filter(fully_provisioned)
        })
        .await;
        let node = format!("{name}-w0");
        let id = inspect(&docker, &node).await.unwrap().id;
        assert!(
            std::process::Command::new("docker")
                .args(["stop", "-t", "1", &node])
                .status()
                .unwrap()
                .success()
        );
        eventually(Duration::from_secs(30), "w0 started again", || async {
            inspect(&docker, &node).await.filter(|c| c.is_running())
        })
        .await;
        assert_eq!(
            inspect(&docker, &node).await.unwrap().id,
            id,
            "not recreated"
        );
        let again = eventually(Duration::from_secs(30), "w0 Ready again", || async {
            env.docker_machine(&ns, "w0")
                .await
                .filter(|dm| dm.cond_true("Ready") && dm.cond_true("ContainerProvisioned"))
        })
        .await;
        assert_eq!(again.spec.provider_id, provisioned.spec.provider_id);

        // A paused node container is alive: kept as it is, not recreated or restarted.
        docker_cli(&["pause", &node]);
        let dm_api: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        let touch = json!({"metadata": {"annotations": {"capd-rs.test/touch": "paused"}}});
        dm_api
            .patch("w0", &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
        never(Duration::from_secs(4), "a paused node replaced", || async {
            inspect(&docker, &node).await.is_none_or(|c| c.id != id)
        })
        .await;
        docker_cli(&["unpause", &node]);

        // A provisioned node container removed by hand is reported (and not silently recreated).
        docker.remove(&node).await.unwrap();
        let dm = eventually(
            Duration::from_secs(30),
            "w0 reports its container gone",
            || async {
                env.docker_machine(&ns, "w0").await.filter(|dm| {
                    dm.cond("ContainerProvisioned").is_some_and(|c| {
                        c.reason == "NotProvisioned" && c.message.contains("does not exist anymore")
                    })
                })
            },
        )
        .await;
        let c = dm.cond("ContainerProvisioned").unwrap();
        assert!(
            c.message.contains("does not exist anymore"),
            "{}",
            c.message
        );
        assert!(!dm.cond_true("Ready"));
        assert!(inspect(&docker, &node).await.is_none(), "not recreated");

        // Someone else's container under the node's name is never reported as the node.
        let test_label = format!("{TEST_LABEL}={}", env.id);
        docker_cli(&[
            "run",
            "-d",
            "--name",
            &node,
            "--label",
            &test_label,
            NODE_IMAGE,
        ]);
        let dm = eventually(
            Duration::from_secs(30),
            "w0 reports the name conflict",
            || async {
                let touch = json!({"metadata": {"annotations": {"capd-rs.test/touch": "foreign"}}});
                dm_api
                    .patch("w0", &PatchParams::default(), &Patch::Merge(&touch))
                    .await
                    .unwrap();
                env.docker_machine(&ns, "w0")
                    .await
                    .filter(|dm| dm.has_reason("ContainerProvisioned", "ContainerNameConflict"))
            },
        )
        .await;
        let foreign_ip = inspect(&docker, &node).await.unwrap().ipv4.unwrap();
        let addresses = dm.status.unwrap().addresses.unwrap_or_default();
        assert!(
            addresses.iter().all(|a| a.address != foreign_ip),
            "no address of the foreign container: {addresses:?}"
        );
        docker.remove(&node).await.unwrap();

        // Deletion completes with the LB and the node container already gone.
        docker.remove(&lb).await.unwrap();
        env.delete(
            Api::<DockerMachine>::namespaced(env.client.clone(), &ns),
            "w0",
        )
        .await;
        env.delete(
            Api::<DockerCluster>::namespaced(env.client.clone(), &ns),
            &name,
        )
        .await;
        eventually(LONG, "objects gone", || async {
            (env.docker_machine(&ns, "w0").await.is_none()
                && env.docker_cluster(&ns, &name).await.is_none())
            .then_some(())
        })
        .await;
    })
    .await;
}

/// Bootstrap data shaped like CABPK's: the long command and the sentinel are one runcmd entry
/// (`kubeadm init ... && echo success > sentinel`), so the step in flight when a manager dies
/// still completes inside the node. The step runs until the test lets it finish (`/tmp/go`), so
/// a kill lands while it runs however slow the machine; `/etc/starts` counts its runs.
const SLOW_BOOTSTRAP: &str = "#cloud-config\nruncmd:\n- echo started >> /etc/starts\n- until [ -e /tmp/go ]; do sleep 0.2; done && mkdir -p /run/cluster-api && touch /run/cluster-api/bootstrap-success.complete\n";

/// Until `machine` runs the long step of [`SLOW_BOOTSTRAP`]. The steps run in one exec, so the
/// condition cannot say which one runs; the node can: the first runcmd entry has written
/// /etc/starts.
async fn slow_step_running(r: &TestEnvRef, docker: &BollardRuntime, ns: &str, machine: &str) {
    eventually(LONG, "the slow bootstrap step running", || async {
        r.docker_machine(ns, machine).await.filter(|dm| {
            dm.cond("BootstrapCompleted")
                .is_some_and(|c| c.reason == "Bootstrapping")
        })?;
        (exec(docker, machine, "test -f /etc/starts").await.0 == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_restart_mid_provisioning_creates_no_duplicates() {
    let mut env = TestEnv::new("restart").await;
    env.start_manager(&[], None);
    // Everything inside run_mut: the cleanup runs even when a wait below panics.
    env.run_mut(|env| {
        async move {
            let id = env.id.clone();
            let ns = format!("{id}-a");
            let name = format!("{id}-c");
            let cp = format!("{name}-cp");
            let r = env.handle();
            // The step in flight when the manager dies still completes inside the node, and the
            // new manager must not start it again (see SLOW_BOOTSTRAP).
            r.namespace("a").await;
            r.provisioned_cluster(&ns, &name).await;
            r.create_secret(&ns, "slow", Some(SLOW_BOOTSTRAP), None)
                .await;
            r.create_machine(&ns, &name, &cp, true, Some("slow"), node_spec())
                .await;
            let docker = docker().await;
            slow_step_running(&r, &docker, &ns, &cp).await;
            // Kill -9 in the middle of bootstrap (the step is still running: no sentinel yet),
            // then start a new manager.
            let node_id = inspect(&docker, &cp).await.unwrap().id;
            env.manager.as_mut().unwrap().kill();
            assert_eq!(
                exec(
                    &docker,
                    &cp,
                    "test -e /run/cluster-api/bootstrap-success.complete; echo $?"
                )
                .await
                .1,
                "1",
                "the kill must land mid-step"
            );
            env.start_manager(&[], None);
            // The new manager takes the run it finds for the earlier process's, and waits for it.
            eventually(
                Duration::from_secs(30),
                "waiting for the earlier manager's bootstrap",
                || async {
                    r.docker_machine(&ns, &cp).await.filter(|dm| {
                        dm.cond("BootstrapCompleted").is_some_and(|c| {
                            c.reason == "Bootstrapping"
                                && c.message.contains("by an earlier manager process")
                        })
                    })
                },
            )
            .await;
            exec(&docker, &cp, "touch /tmp/go").await;
            let dm = eventually(LONG, "provisioned after restart", || async {
                r.docker_machine(&ns, &cp)
                    .await
                    .filter(|dm| dm.spec.provider_id.is_some() && dm.cond_true("Ready"))
            })
            .await;
            assert!(dm.cond_true("Ready"));
            // The same node container (not recreated), and nothing else but the LB.
            assert_eq!(inspect(&docker, &cp).await.unwrap().id, node_id);
            let all = docker
                .list(&std::collections::BTreeMap::from([(
                    TEST_LABEL.to_string(),
                    id.clone(),
                )]))
                .await
                .unwrap();
            let names: Vec<_> = all.iter().map(|c| c.name.clone()).collect();
            // The bootstrap started by the killed manager was not started a second time.
            let starts = exec(&docker, &cp, "cat /etc/starts").await.1;
            assert_eq!(
                starts.lines().count(),
                1,
                "bootstrap ran more than once: {starts:?}"
            );
            assert_eq!(all.len(), 2, "{names:?}");
            assert!(
                haproxy_cfg(&format!("{name}-lb"))
                    .await
                    .contains(&format!("server {cp} "))
            );
        }
        .boxed()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_a_killed_manager_recorded_but_never_ran_runs_once_on_the_next() {
    let mut env = TestEnv::new("unrun").await;
    // One bootstrap at a time: the second machine's start is recorded while its run waits for
    // the slot the first one holds (as a manager Pod that a rollout deletes may stop between
    // recording a start and running it).
    env.start_manager(&["--docker-machine-concurrency=1"], None);
    env.run_mut(|env| {
        async move {
            let id = env.id.clone();
            let ns = format!("{id}-a");
            let name = format!("{id}-c");
            let (held, queued) = (format!("{name}-held"), format!("{name}-queued"));
            let r = env.handle();
            let quick = "#cloud-config\nruncmd:\n- echo started >> /etc/starts && mkdir -p /run/cluster-api && touch /run/cluster-api/bootstrap-success.complete\n";
            r.namespace("a").await;
            r.provisioned_cluster(&ns, &name).await;
            r.create_secret(&ns, "slow", Some(SLOW_BOOTSTRAP), None).await;
            r.create_secret(&ns, "quick", Some(quick), None).await;
            let docker = docker().await;
            r.create_machine(&ns, &name, &held, true, Some("slow"), node_spec())
                .await;
            slow_step_running(&r, &docker, &ns, &held).await;
            r.create_machine(&ns, &name, &queued, true, Some("quick"), node_spec())
                .await;
            // Its start is on record on the container its first pass created for it.
            let recorded = eventually(LONG, "the queued machine's start recorded, waiting for the slot", || async {
                let dm = r.docker_machine(&ns, &queued).await?;
                let waiting = dm.cond("CGroupsReady").is_some_and(|c| {
                    c.message.contains("waiting for a free bootstrap slot")
                });
                let node = docker.inspect(&queued).await.ok()??;
                waiting.then(|| node.labels.get(labels::BOOTSTRAP_START).cloned())?
            })
            .await;
            assert!(
                r.docker_machine(&ns, &queued).await.unwrap().annotations().get(capd::api::STARTED_AT).is_none(),
                "a first start costs no write to the object"
            );
            env.manager.as_mut().unwrap().kill();
            let claim = format!("test -e {}", capd::bootstrap::CLAIM_PATH);
            assert_eq!(exec(&docker, &queued, &claim).await.0, 1, "no command of its ran");
            assert_eq!(exec(&docker, &held, &claim).await.0, 0, "the held run claimed its node");
            env.start_manager(&[], None);

            // The queued bootstrap starts again and finishes; the held one is waited for.
            let dm = eventually(LONG, "the queued machine provisioned", || async {
                r.docker_machine(&ns, &queued)
                    .await
                    .filter(|dm| dm.spec.provider_id.is_some() && dm.cond_true("Ready"))
            })
            .await;
            let again = dm.annotations().get(capd::api::STARTED_AT).cloned();
            assert!(again.is_some() && again != Some(recorded), "a new start was recorded");
            eventually(Duration::from_secs(30), "the held machine waited for", || async {
                r.docker_machine(&ns, &held).await.filter(|dm| {
                    dm.cond("BootstrapCompleted").is_some_and(|c| {
                        c.reason == "Bootstrapping" && c.message.contains("by an earlier manager process")
                    })
                })
            })
            .await;
            exec(&docker, &held, "touch /tmp/go").await;
            eventually(LONG, "the held machine provisioned", || async {
                r.docker_machine(&ns, &held)
                    .await
                    .filter(|dm| dm.spec.provider_id.is_some() && dm.cond_true("Ready"))
            })
            .await;
            for node in [&held, &queued] {
                let starts = exec(&docker, node, "cat /etc/starts").await.1;
                assert_eq!(starts.lines().count(), 1, "{node} ran {starts:?}");
            }
            assert!(
                env.manager_logs().contains("never reached its commands"),
                "the new start is logged"
            );
        }
        .boxed()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_outage_is_reported_and_recovered_from() {
    let mut env = TestEnv::new("outage").await;
    let proxy = common::docker_proxy::DockerProxy::start(&env.id);
    env.start_manager(&[], Some(&proxy.host()));
    let r = env.handle();
    let ns = r.namespace("a").await;
    let name = format!("{}-c", env.id);
    // Wait for the manager to be ready (it connected through the proxy), then cut the engine off.
    r.manager_ready().await;
    proxy.down();
    let cluster = r.create_cluster(&ns, &name, false).await;
    r.create_docker_cluster(&ns, &cluster, json!({})).await;
    env.run(|env| async move {
        let dc = eventually(LONG, "DockerUnavailable condition", || async {
            env.docker_cluster(&ns, &name)
                .await
                .filter(|dc| dc.has_reason("LoadBalancerAvailable", "DockerUnavailable"))
        })
        .await;
        assert!(!dc.cond_true("Ready"));
        // An engine that answers 5xx is reported the same way, with its message.
        proxy.overloaded();
        eventually(LONG, "DockerUnavailable naming the 503", || async {
            env.docker_cluster(&ns, &name).await.filter(|dc| {
                dc.cond("LoadBalancerAvailable").is_some_and(|c| {
                    c.reason == "DockerUnavailable" && c.message.contains("engine overloaded")
                })
            })
        })
        .await;
        proxy.up();
        eventually(
            Duration::from_secs(150),
            "recovered without intervention",
            || async {
                env.docker_cluster(&ns, &name)
                    .await
                    .filter(|dc| dc.cond_true("LoadBalancerAvailable"))
            },
        )
        .await;
        drop(proxy);
    })
    .await;
}

/// A DevCluster is served by the same controller as a DockerCluster when its backend is docker;
/// with the in-memory backend turned off (`--in-memory-backend=false`, served by default as
/// upstream), an in-memory DevCluster is reported, not served: a condition and a Warning Event
/// (the second time it happens, the same Event's series, which the recorder patches), no
/// finalizer, and deletion still removes what the docker backend had made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_cluster_is_served_with_the_docker_backend_only() {
    let (env, ns) =
        TestEnv::with_namespaced_manager_args("devc", &["--in-memory-backend=false"]).await;
    env.run(|env| async move {
        let name = format!("{}-c", env.id);
        let cluster = env.create_cluster(&ns, &name, false).await;
        env.create_dev_cluster(&ns, &cluster, json!({"inMemory": {}}))
            .await;
        let api: Api<capd::api::dev::DevCluster> = Api::namespaced(env.client.clone(), &ns);
        let not_served = || async {
            let dc = api.get_opt(&name).await.ok()??;
            let message = dc.cond("LoadBalancerAvailable")?.message.clone();
            dc.has_reason("LoadBalancerAvailable", "BackendNotServed")
                .then_some((dc, message))
        };
        let (dc, message) = eventually(LONG, "BackendNotServed", not_served).await;
        assert!(message.contains("spec.backend.inMemory"), "{message}");
        assert!(
            dc.finalizers().is_empty(),
            "no finalizer for an unserved backend"
        );
        let lb = format!("{name}-lb");
        assert!(inspect(&docker().await, &lb).await.is_none());

        // The docker backend: the DevCluster controller makes the load balancer, labelled with
        // the Dev* kind, and sets the endpoint.
        let set_backend = |backend: serde_json::Value| {
            let api = api.clone();
            let name = name.clone();
            async move {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"backend": backend}})),
                )
                .await
                .unwrap();
            }
        };
        set_backend(json!({"inMemory": null, "docker": {}})).await;
        let dc = eventually(LONG, "DevCluster provisioned", || async {
            api.get_opt(&name)
                .await
                .ok()?
                .filter(|dc| cluster_provisioned(dc.status.as_ref()))
        })
        .await;
        assert!(dc.spec.control_plane_endpoint.is_some_and(|e| e.is_valid()));
        let info = inspect(&docker().await, &lb)
            .await
            .expect("the load balancer");
        assert_eq!(info.labels[labels::OWNER_KIND], "DevCluster");

        // In-memory again: reported again, as the same Warning Event, now a series of two.
        set_backend(json!({"inMemory": {}, "docker": null})).await;
        eventually(LONG, "BackendNotServed again", not_served).await;
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(env.client.clone(), &ns);
        eventually(LONG, "the Warning Event counted twice", || async {
            let list = events.list(&Default::default()).await.ok()?.items;
            list.into_iter().find(|e| {
                e.reason.as_deref() == Some("BackendNotServed")
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("DevCluster")
                    && e.series.as_ref().is_some_and(|s| s.count >= 2)
            })
        })
        .await;

        // Deleting it removes the load balancer the docker backend made, then the finalizer.
        api.delete(&name, &Default::default()).await.unwrap();
        eventually(LONG, "DevCluster and its load balancer gone", || async {
            (api.get_opt(&name).await.ok()?.is_none()
                && inspect(&docker().await, &lb).await.is_none())
            .then_some(())
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_cluster_name_in_two_namespaces_stays_separate() {
    let mut env = TestEnv::new("twins").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let (ns_a, ns_b) = (env.namespace("a").await, env.namespace("b").await);
        let name = format!("{}-c", env.id);
        let lb = format!("{name}-lb");
        let dc_a = env.provisioned_cluster(&ns_a, &name).await;
        let cluster_b = env.create_cluster(&ns_b, &name, false).await;
        env.create_docker_cluster(&ns_b, &cluster_b, json!({}))
            .await;

        // B is told why it cannot have the name; A's container is untouched.
        let dc_b = eventually(LONG, "name conflict reported on B", || async {
            env.docker_cluster(&ns_b, &name)
                .await
                .filter(|dc| dc.has_reason("LoadBalancerAvailable", "ContainerNameConflict"))
        })
        .await;
        let c = dc_b.cond("LoadBalancerAvailable").unwrap();
        assert!(c.message.contains(&ns_a), "{}", c.message);
        let info = inspect(&docker, &lb).await.unwrap();
        assert_eq!(info.labels[labels::CLUSTER_NAMESPACE], ns_a);
        assert_eq!(info.labels[labels::OWNER_UID], dc_a.uid().unwrap());
        // (Admission gives B the default port; the host is what the LB would set.)
        assert!(
            dc_b.spec
                .control_plane_endpoint
                .as_ref()
                .and_then(|e| e.host.as_ref())
                .is_none(),
            "B never takes A's endpoint"
        );

        // Deleting B never removes A's LB.
        env.delete(
            Api::<DockerCluster>::namespaced(env.client.clone(), &ns_b),
            &name,
        )
        .await;
        eventually(LONG, "B gone", || async {
            env.docker_cluster(&ns_b, &name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
        let still = inspect(&docker, &lb).await.expect("A's LB survives");
        assert_eq!(still.id, info.id);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_waits_with_reasons_and_proceeds_on_watch_events() {
    let mut env = TestEnv::new("waits").await;
    env.start_manager(&[], None);
    // Everything inside run_mut: the cleanup runs even when a wait below panics.
    env.run_mut(|env| {
        async move {
            let port = env.manager.as_ref().unwrap().health_port;
            let diagnostics_port = env.manager.as_ref().unwrap().diagnostics_port;
            let r = env.handle();
            let ns = r.namespace("a").await;
            let name = format!("{}-c", env.id);
            let reason_of = |dm: Option<DockerMachine>| {
                dm.and_then(|dm| dm.cond("ContainerProvisioned").map(|c| c.reason.clone()))
            };

            // Cluster infrastructure not provisioned yet (CAPI core has not said so).
            let cluster = r.create_cluster(&ns, &name, false).await;
            r.create_docker_cluster(&ns, &cluster, json!({})).await;
            r.create_machine(&ns, &name, &format!("{name}-cp"), true, None, node_spec())
                .await;
            r.create_machine(&ns, &name, &format!("{name}-w"), false, None, node_spec())
                .await;
            let dm = format!("{name}-cp");
            eventually(LONG, "WaitingForClusterInfrastructureReady", || async {
                (reason_of(r.docker_machine(&ns, &dm).await).as_deref()
                    == Some("WaitingForClusterInfrastructureReady"))
                .then_some(())
            })
            .await;

            // Cluster status change -> the machines move on without a resync (10 min).
            r.mark_infrastructure_provisioned(&ns, &name).await;
            eventually(
                Duration::from_secs(20),
                "WaitingForBootstrapData after the Cluster changed",
                || async {
                    (reason_of(r.docker_machine(&ns, &dm).await).as_deref()
                        == Some("WaitingForBootstrapData"))
                    .then_some(())
                },
            )
            .await;
            eventually(
                Duration::from_secs(20),
                "worker waits for the control plane",
                || async {
                    (reason_of(r.docker_machine(&ns, &format!("{name}-w")).await).as_deref()
                        == Some("WaitingForControlPlaneInitialized"))
                    .then_some(())
                },
            )
            .await;

            // Machine change (bootstrap data appears) -> provisioned promptly.
            r.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None).await;
            r.set_machine_secret(&ns, &dm, "boot").await;
            eventually(
                Duration::from_secs(30),
                "provisioned after dataSecretName appeared",
                || async { r.docker_machine(&ns, &dm).await.filter(fully_provisioned) },
            )
            .await;

            // Health, readiness and metrics are served; SIGTERM ends the manager cleanly.
            for path in ["healthz", "readyz"] {
                let resp = reqwest::get(format!("http://127.0.0.1:{port}/{path}"))
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200, "/{path}");
            }
            let metrics = scrape(diagnostics_port, None)
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            for family in [
                "capd_reconcile_total",
                "capd_reconcile_duration_seconds",
                "capd_docker_api_calls",
            ] {
                assert!(metrics.contains(family), "{family} missing from /metrics");
            }
            let status = env
                .manager
                .as_mut()
                .unwrap()
                .terminate()
                .expect("manager exits within 10s of SIGTERM");
            assert!(
                status.success(),
                "manager exit status after SIGTERM: {status:?}"
            );
        }
        .boxed()
    })
    .await;
}

/// Contract items 8, 11, 12, 14, 21 and 23 (contract.md §6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_edge_cases() {
    let mut env = TestEnv::new("contr").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let dcs: Api<DockerCluster> = Api::namespaced(env.client.clone(), &ns);

        // 8: no owner Cluster -> no finalizer, no container.
        let orphan: DockerCluster = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerCluster",
            "metadata": {"name": format!("{}-orphan", env.id), "labels": {"cluster.x-k8s.io/watch-filter": env.id}},
            "spec": {}
        }))
        .unwrap();
        dcs.create(&Default::default(), &orphan).await.unwrap();

        // 14: externally managed -> untouched (same resourceVersion, no finalizer, no container).
        let managed_name = format!("{}-managed", env.id);
        let managed_cluster = env.create_cluster(&ns, &managed_name, false).await;
        let managed = env
            .create_docker_cluster(&ns, &managed_cluster, json!({"metadata": {"annotations": {"cluster.x-k8s.io/managed-by": "someone-else"}}}))
            .await;

        // 11: failure domains are copied to status.
        let name = format!("{}-c", env.id);
        let cluster = env.create_cluster(&ns, &name, false).await;
        let fds = json!([{"name": "fd1", "controlPlane": true}, {"name": "fd2", "attributes": {"rack": "r2"}}]);
        env.create_docker_cluster(&ns, &cluster, json!({"spec": {"failureDomains": fds}})).await;
        let dc = eventually(LONG, "provisioned with failure domains", || async {
            env.docker_cluster(&ns, &name).await.filter(|dc| dc.status.as_ref().and_then(|s| s.ready) == Some(true))
        })
        .await;
        // As admitted: `controlPlane` defaults to false, as upstream's webhook sets it.
        let mut admitted = fds.clone();
        admitted[1]["controlPlane"] = json!(false);
        assert_eq!(serde_json::to_value(&dc.status.as_ref().unwrap().failure_domains).unwrap(), admitted);
        // The manager has handled a cluster created after the orphan and the externally managed
        // one (events arrive in order), so the window below watches a running manager.
        never(Duration::from_secs(4), "orphan or externally managed DockerCluster touched", || async {
            let o = env.docker_cluster(&ns, &format!("{}-orphan", env.id)).await.unwrap();
            let m = env.docker_cluster(&ns, &managed_name).await.unwrap();
            !o.finalizers().is_empty()
                || !m.finalizers().is_empty()
                || m.resource_version() != managed.resource_version()
                || inspect(&docker, &format!("{}-orphan-lb", env.id)).await.is_some()
                || inspect(&docker, &format!("{managed_name}-lb")).await.is_some()
        })
        .await;

        env.mark_infrastructure_provisioned(&ns, &name).await;

        // 12: Paused condition carries the object's generation.
        dcs.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}})))
            .await
            .unwrap();
        let paused = eventually(LONG, "Paused=True", || async {
            env.docker_cluster(&ns, &name).await.filter(|dc| dc.cond_true("Paused"))
        })
        .await;
        let c = paused.cond("Paused").unwrap();
        assert_eq!((c.reason.as_str(), c.observed_generation), ("Paused", paused.metadata.generation));
        dcs.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}})))
            .await
            .unwrap();

        // 21: the Machine's failure domain labels the container and is reported in status.
        let m = format!("{name}-fd");
        env.create_machine(&ns, &name, &m, false, None, node_spec()).await;
        let machines: Api<kube::api::DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &capi("Machine"));
        machines.patch(&m, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"failureDomain": "fd2"}}))).await.unwrap();
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None).await;
        env.set_machine_secret(&ns, &m, "boot").await;
        let dm = eventually(LONG, "machine provisioned", || async { env.docker_machine(&ns, &m).await.filter(fully_provisioned) }).await;
        assert_eq!(dm.status.as_ref().unwrap().failure_domain.as_deref(), Some("fd2"));
        assert_eq!(inspect(&docker, &m).await.unwrap().labels[labels::FAILURE_DOMAIN], "fd2");

        // 23: a cleared status (what clusterctl move does) is rebuilt without new containers.
        let lb_id = inspect(&docker, &format!("{name}-lb")).await.unwrap().id;
        let node_id = inspect(&docker, &m).await.unwrap().id;
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        dcs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": null}))).await.unwrap();
        dms.patch_status(&m, &PatchParams::default(), &Patch::Merge(&json!({"status": null}))).await.unwrap();
        eventually(LONG, "statuses rebuilt", || async {
            let dc_ok = env.docker_cluster(&ns, &name).await.is_some_and(|dc| dc.status.as_ref().and_then(|s| s.ready) == Some(true));
            let dm = env.docker_machine(&ns, &m).await?;
            let st = dm.status.as_ref()?;
            let dm_ok = st.initialization.as_ref().and_then(|i| i.provisioned) == Some(true)
                && st.addresses.as_ref().is_some_and(|a| !a.is_empty())
                && st.failure_domain.as_deref() == Some("fd2");
            (dc_ok && dm_ok).then_some(())
        })
        .await;
        assert_eq!(inspect(&docker, &format!("{name}-lb")).await.unwrap().id, lb_id, "LB not recreated");
        assert_eq!(inspect(&docker, &m).await.unwrap().id, node_id, "node not recreated");

        // A customHAProxyConfigTemplateRef is read by name: missing, or a Go template that does
        // not parse, it blocks the load balancer with a reason.
        let custom = format!("{}-custom", env.id);
        let custom_cluster = env.create_cluster(&ns, &custom, false).await;
        let lb_ref = json!({"spec": {"loadBalancer": {"customHAProxyConfigTemplateRef": {"name": "lbcfg"}}}});
        env.create_docker_cluster(&ns, &custom_cluster, lb_ref).await;
        let blocked = |reason: &'static str, fragment: &'static str| {
            let (env, ns, custom) = (&env, &ns, &custom);
            async move {
                eventually(LONG, fragment, || async {
                    env.docker_cluster(ns, custom).await.filter(|dc| {
                        dc.cond("LoadBalancerAvailable")
                            .is_some_and(|c| c.reason == reason && c.message.contains(fragment))
                    })
                })
                .await
            }
        };
        blocked("InvalidSpec", "ConfigMap").await;
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(env.client.clone(), &ns);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lbcfg"}, "data": {"value": "frontend x\n  bind *:{{ .FrontendControlPlanePort \n"}});
        cms.create(&Default::default(), &serde_json::from_value(cm).unwrap()).await.unwrap();
        // ConfigMaps are not watched (a blocked cluster looks again within a minute); a change
        // to the DockerCluster is seen at once.
        let touch = json!({"metadata": {"annotations": {"capd-rs.test/touch": "cm"}}});
        dcs.patch(&custom, &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
        blocked("InvalidHAProxyConfigTemplate", "cannot parse the template").await;
        assert!(inspect(&docker, &format!("{custom}-lb")).await.is_none(), "no LB from a config we cannot render");
    })
    .await;
}

/// Every version of the objects of `api` that a watch delivers from now on, collected in the
/// background until the test ends.
fn versions_of<K>(api: Api<K>) -> std::sync::Arc<std::sync::Mutex<Vec<K>>>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    tokio::spawn(
        watcher(api, watcher::Config::default())
            .applied_objects()
            .for_each(move |o| {
                if let Ok(o) = o {
                    sink.lock().unwrap().push(o);
                }
                futures::future::ready(())
            }),
    );
    seen
}

/// Whether a Warning Event with `reason` was published about the object named `name`.
async fn warned(env: &TestEnvRef, ns: &str, name: &str, reason: &str) -> Option<()> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), ns);
    let list = events.list(&Default::default()).await.ok()?.items;
    list.iter()
        .any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some("Warning")
        })
        .then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_that_stops_its_node_is_reported_and_not_recreated() {
    let mut env = TestEnv::new("stopb").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;
        let seen = versions_of(Api::<DockerMachine>::namespaced(env.client.clone(), &ns));
        // What `poweroff` does to a node container: its PID 1 ends (the light image's exits 0
        // on SIGTERM), and the container with it.
        let poweroff = "#cloud-config\nruncmd:\n- echo going down\n- kill -TERM 1\n- sleep 30\n";
        env.create_secret(&ns, "poweroff", Some(poweroff), None)
            .await;
        let node = format!("{name}-m");
        let created = ContainerEvents::record(&format!("container={node}"), "create");
        let since = unix_now();
        env.create_machine(&ns, &name, "m", false, Some("poweroff"), node_spec())
            .await;
        let dm = eventually(LONG, "m: NodeStoppedDuringBootstrap", || async {
            env.docker_machine(&ns, "m")
                .await
                .filter(|dm| dm.has_reason("BootstrapCompleted", "NodeStoppedDuringBootstrap"))
        })
        .await;
        let c = dm.cond("BootstrapCompleted").unwrap();
        assert_eq!(c.status, ConditionStatus::False);
        assert!(
            c.message
                .contains("stopped twice while its bootstrap commands ran"),
            "{}",
            c.message
        );
        assert!(c.message.contains("exit code 0"), "{}", c.message);
        assert!(!dm.cond_true("Ready"));
        assert!(dm.spec.provider_id.is_none());
        eventually(LONG, "a Warning Event", || {
            warned(&env, &ns, "m", "NodeStoppedDuringBootstrap")
        })
        .await;
        // Within a minute of the machine's creation its container was created twice: once, and
        // once again (an engine restart stops a node mid-bootstrap too), never more (a loop
        // recreated it every 10-15 s).
        let creates = created.between(since, since + 60).await.len();
        println!("measured: {creates} container(s) created for m in its first 60 s");
        assert!(creates == 2, "{creates} containers created for m in 60 s");
        assert!(
            inspect(&docker().await, &node)
                .await
                .is_some_and(|c| !c.is_alive()),
            "the stopped container is kept as it is (its logs tell what happened)"
        );
        // No pass said that a bootstrap in the container it had just made was started by an
        // earlier manager process.
        for version in seen.lock().unwrap().iter() {
            for c in version.conditions().into_iter().flatten() {
                assert!(
                    !c.message.contains("earlier manager process"),
                    "{}: {}",
                    c.type_,
                    c.message
                );
            }
        }
        // New bootstrap data on the Machine: tried again, in a new container.
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        env.set_machine_secret(&ns, "m", "boot").await;
        eventually(LONG, "m provisioned from the new data", || async {
            env.docker_machine(&ns, "m").await.filter(fully_provisioned)
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_node_that_keeps_dying_is_restarted_on_a_backoff_and_reported() {
    let mut env = TestEnv::new("crash").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        env.create_machine(&ns, &name, "w0", false, Some("boot"), node_spec())
            .await;
        eventually(LONG, "w0 provisioned", || async {
            env.docker_machine(&ns, "w0")
                .await
                .filter(fully_provisioned)
        })
        .await;
        let node = format!("{name}-w0");
        // For a minute, the node's main process dies as soon as it runs (a PID 1 that fails on
        // start): each `die` event wakes the machine's reconcile at once.
        let started = ContainerEvents::record(&format!("container={node}"), "start");
        let since = unix_now();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut kills = 0;
        while std::time::Instant::now() < deadline {
            if inspect(&docker, &node)
                .await
                .is_some_and(|c| c.is_running())
            {
                let _ = std::process::Command::new("docker")
                    .args(["kill", &node])
                    .output();
                kills += 1;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let starts = started.between(since, unix_now()).await.len();
        println!("measured: {starts} starts of w0 in 60 s while its main process was killed {kills} times");
        // The schedule starts it at 0, 10 and 30 s; the engine's own on-failure retry may add
        // one after each. A start per die event gave dozens.
        assert!(
            (2..=8).contains(&starts),
            "{starts} starts in 60 s ({kills} kills)"
        );
        let dm = eventually(
            Duration::from_secs(30),
            "w0: ContainerRestarting",
            || async {
                env.docker_machine(&ns, "w0")
                    .await
                    .filter(|dm| dm.has_reason("ContainerProvisioned", "ContainerRestarting"))
            },
        )
        .await;
        let c = dm.cond("ContainerProvisioned").unwrap();
        assert!(c.message.contains("last exit code 137"), "{}", c.message);
        assert!(
            c.message.contains("time(s)") && c.message.contains("next start in"),
            "{}",
            c.message
        );
        assert!(!dm.cond_true("Ready"));
        eventually(LONG, "a Warning Event", || {
            warned(&env, &ns, "w0", "ContainerRestarting")
        })
        .await;
        // Left alone, it is started again at the next step of the schedule and is Ready again.
        eventually(Duration::from_secs(120), "w0 Ready again", || async {
            env.docker_machine(&ns, "w0")
                .await
                .filter(|dm| dm.cond_true("Ready") && dm.cond_true("ContainerProvisioned"))
        })
        .await;
        assert!(inspect(&docker, &node).await.unwrap().is_running());
    })
    .await;
}

const VALID_HAPROXY_CFG: &str = "# capd-rs test: custom and valid
global
  maxconn 1000
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend control-plane
  bind *:6443
  default_backend kube-apiservers
backend kube-apiservers
  server none 127.0.0.1:1
frontend stats
  mode http
  bind *:8404
  stats enable
  stats uri /stats
";

/// An upstream-style Go template (upstream's data model and `JoinHostPort`); haproxy accepts
/// a backend without servers, so the `else` branch renders one that never answers.
const GO_TEMPLATE_HAPROXY_CFG: &str = "# rendered from a Go template, ipv6={{ .IPv6 }}
global
  daemon
defaults
  mode tcp
  timeout connect 5000
  timeout client 50000
  timeout server 50000
frontend control-plane
  bind *:{{ .FrontendControlPlanePort }}
  {{ if .IPv6 -}} bind :::{{ .FrontendControlPlanePort }}; {{- end }}
  default_backend kube-apiservers
backend kube-apiservers
{{- range $server, $backend := .BackendServers }}
  server {{ $server }} {{ JoinHostPort $backend.Address $.BackendControlPlanePort }} weight {{ $backend.Weight }}
{{- else }}
  server none {{ JoinHostPort \"127.0.0.1\" \"1\" }}
{{- end }}
frontend stats
  mode http
  bind *:8404
  stats enable
  stats uri /stats
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_template_custom_haproxy_config_is_rendered_into_the_lb() {
    let mut env = TestEnv::new("hatmpl").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let lb = format!("{name}-lb");
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(env.client.clone(), &ns);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lbtmpl"}, "data": {"value": GO_TEMPLATE_HAPROXY_CFG}});
        cms.create(&Default::default(), &serde_json::from_value(cm).unwrap()).await.unwrap();
        let cluster = env.create_cluster(&ns, &name, false).await;
        let spec = json!({"spec": {"loadBalancer": {"customHAProxyConfigTemplateRef": {"name": "lbtmpl"}}}});
        env.create_docker_cluster(&ns, &cluster, spec).await;
        eventually(LONG, "DockerCluster provisioned with the Go template", || async {
            env.docker_cluster(&ns, &name).await.filter(|dc| cluster_provisioned(dc.status.as_ref()))
        })
        .await;
        let cfg = haproxy_cfg(&lb).await;
        println!("rendered haproxy.cfg:\n{cfg}");
        assert!(cfg.starts_with("# rendered from a Go template, ipv6=false\n"), "{cfg}");
        assert!(cfg.contains("\n  bind *:6443\n"), "frontend port from the data: {cfg}");
        assert!(!cfg.contains("bind :::"), "no IPv6 bind for an IPv4 cluster: {cfg}");
        assert!(cfg.contains("\nbackend kube-apiservers\n  server none 127.0.0.1:1\nfrontend stats"), "range else and JoinHostPort: {cfg}");
        assert!(!cfg.contains("{{"), "no template text left: {cfg}");

        // A control-plane node becomes a backend: its name, JoinHostPort(address, "6443"),
        // weight 100, through upstream's data model; the `else` server goes.
        env.mark_infrastructure_provisioned(&ns, &name).await;
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None).await;
        let cp = format!("{name}-cp-0");
        env.create_machine(&ns, &name, &cp, true, Some("boot"), node_spec()).await;
        let cfg = eventually(LONG, "CP backend in the rendered haproxy.cfg", || async {
            let cfg = haproxy_cfg(&lb).await;
            cfg.contains(&format!("server {cp} ")).then_some(cfg)
        })
        .await;
        let ip = inspect(&docker().await, &cp).await.unwrap().ipv4.unwrap();
        assert!(cfg.contains(&format!("\nbackend kube-apiservers\n  server {cp} {ip}:6443 weight 100\nfrontend stats")), "{cfg}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_custom_haproxy_config_is_refused_and_the_lb_keeps_serving() {
    let mut env = TestEnv::new("hacfg").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let lb = format!("{name}-lb");
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(env.client.clone(), &ns);
        let cm = |value: &str| {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lbcfg"}, "data": {"value": value}})).unwrap()
        };
        cms.create(&Default::default(), &cm(VALID_HAPROXY_CFG)).await.unwrap();
        let cluster = env.create_cluster(&ns, &name, false).await;
        let lb_ref = json!({"spec": {"loadBalancer": {"customHAProxyConfigTemplateRef": {"name": "lbcfg"}}}});
        env.create_docker_cluster(&ns, &cluster, lb_ref).await;
        eventually(LONG, "DockerCluster provisioned with the custom config", || async {
            env.docker_cluster(&ns, &name).await.filter(|dc| cluster_provisioned(dc.status.as_ref()))
        })
        .await;
        assert!(haproxy_cfg(&lb).await.contains("custom and valid"));

        // A config haproxy rejects: refused with haproxy's own words; the running one stays.
        let invalid = VALID_HAPROXY_CFG.replace("custom and valid", "custom, invalid").replace("  default_backend", "  bogus-directive 1\n  default_backend");
        cms.replace("lbcfg", &Default::default(), &{
            let mut c: k8s_openapi::api::core::v1::ConfigMap = cm(&invalid);
            c.metadata.resource_version = cms.get("lbcfg").await.unwrap().metadata.resource_version;
            c
        })
        .await
        .unwrap();
        let dcs: Api<DockerCluster> = Api::namespaced(env.client.clone(), &ns);
        let touch = json!({"metadata": {"annotations": {"capd-rs.test/touch": "invalid"}}});
        dcs.patch(&name, &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
        let dc = eventually(LONG, "LoadBalancerAvailable=False InvalidHAProxyConfig", || async {
            env.docker_cluster(&ns, &name)
                .await
                .filter(|dc| dc.has_reason("LoadBalancerAvailable", "InvalidHAProxyConfig"))
        })
        .await;
        let c = dc.cond("LoadBalancerAvailable").unwrap();
        assert_eq!(c.status, ConditionStatus::False);
        assert!(c.message.contains("bogus-directive"), "haproxy's error line: {}", c.message);
        assert!(c.message.len() < 1200, "short: {}", c.message);
        let cfg = haproxy_cfg(&lb).await;
        assert!(cfg.contains("custom and valid") && !cfg.contains("bogus"), "the running config is kept: {cfg}");

        // Restarted, the LB starts from the config it kept, and stays up: no restart loop.
        let started = ContainerEvents::record(&format!("container={lb}"), "start");
        let since = unix_now();
        docker_cli(&["restart", "-t", "1", &lb]);
        tokio::time::sleep(Duration::from_secs(20)).await;
        let restarted = inspect(&docker, &lb).await.unwrap();
        assert!(restarted.is_running(), "haproxy runs after a restart");
        let starts = started.between(since, unix_now()).await.len();
        println!("measured: {starts} LB start(s) in the 20 s after a restart");
        assert!(starts <= 2, "{starts} LB starts in 20 s");
        let stats = reqwest::get(format!("http://127.0.0.1:{}/stats", restarted.host_ports["8404/tcp"])).await.unwrap();
        assert_eq!(stats.status(), 200, "the LB serves");
        // Refused once, not retried in a loop.
        let before = env.reconciles_of(&name);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let during = env.reconciles_of(&name) - before;
        assert!(during <= 3, "{during} reconciles of the DockerCluster in 10 s while refused");
        assert!(env.docker_cluster(&ns, &name).await.unwrap().has_reason("LoadBalancerAvailable", "InvalidHAProxyConfig"));
    })
    .await;
}

/// An ownerRef alone does not make a DockerMachine the Machine's (issue 25): an impostor owned
/// by a real Machine whose infrastructureRef names another DockerMachine gets no container (nor
/// the Machine's bootstrap data) and says why; the real one is provisioned, without a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_owned_by_a_real_machine_gets_nothing() {
    let mut env = TestEnv::new("impostor").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        let real = format!("{name}-w");
        // The Machine names `real`; both DockerMachines carry its ownerRef. The impostor is
        // created first, as an attacker would, before the real one exists.
        let (machine, _) = env
            .create_machine(&ns, &name, &real, false, None, node_spec())
            .await;
        let impostor = format!("{name}-impostor");
        let body: DockerMachine = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
            "metadata": {"name": impostor, "namespace": ns,
                         "labels": {"cluster.x-k8s.io/cluster-name": name,
                                    "cluster.x-k8s.io/watch-filter": env.id},
                         "ownerReferences": [owner_ref(&machine, "Machine")]},
            "spec": node_spec()
        }))
        .unwrap();
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        dms.create(&Default::default(), &body).await.unwrap();
        env.set_machine_secret(&ns, &real, "boot").await;

        let refused = eventually(LONG, "impostor refused", || async {
            env.docker_machine(&ns, &impostor)
                .await
                .filter(|dm| dm.has_reason("ContainerProvisioned", "NotMachineInfrastructure"))
        })
        .await;
        let c = refused.cond("ContainerProvisioned").unwrap();
        assert!(c.message.contains(&real), "{}", c.message);
        eventually(LONG, "real machine provisioned", || async {
            env.docker_machine(&ns, &real)
                .await
                .filter(fully_provisioned)
        })
        .await;
        let real_dm = env.docker_machine(&ns, &real).await.unwrap();
        assert!(!real_dm.has_reason("ContainerProvisioned", "ContainerNameConflict"));
        let container = real_dm
            .spec
            .provider_id
            .as_deref()
            .and_then(|p| p.strip_prefix("docker:////"))
            .unwrap()
            .to_string();
        let info = inspect(&docker, &container).await.unwrap();
        assert_eq!(info.labels[labels::OWNER_UID], real_dm.uid().unwrap());
        let impostor_uid = refused.uid().unwrap();
        let selector =
            std::collections::BTreeMap::from([(labels::OWNER_UID.to_string(), impostor_uid)]);
        assert!(
            docker.list(&selector).await.unwrap().is_empty(),
            "no container for the impostor"
        );
        assert!(
            env.docker_machine(&ns, &impostor)
                .await
                .unwrap()
                .spec
                .provider_id
                .is_none()
        );
    })
    .await;
}

/// Machine templates get `status.capacity` from the engine's host, as upstream CAPD fills it
/// (cluster-autoscaler scales from zero with it): `cpu` is `docker info`'s NCPU, `memory` its
/// MemTotal in binary units. Read here straight from the engine, not through the manager's port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_templates_report_the_engine_hosts_capacity() {
    let (env, ns) = TestEnv::with_namespaced_manager("tmplcap").await;
    env.run(|env| async move {
        let info = bollard::Docker::connect_with_unix(
            "/var/run/docker.sock",
            120,
            bollard::API_DEFAULT_VERSION,
        )
        .expect("Docker Engine")
        .info()
        .await
        .expect("docker info");
        let (ncpu, mem) = (info.ncpu.unwrap(), info.mem_total.unwrap() as u64);
        let name = format!("{}-t", env.id);
        for (kind, spec) in [
            ("DockerMachineTemplate", json!({})),
            ("DevMachineTemplate", json!({"backend": {"docker": {}}})),
        ] {
            let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "infrastructure.cluster.x-k8s.io",
                "v1beta2",
                kind,
            ));
            let api: Api<kube::core::DynamicObject> =
                Api::namespaced_with(env.client.clone(), &ns, &ar);
            let obj = json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": kind,
                "metadata": {"name": name, "namespace": ns,
                    "labels": {"cluster.x-k8s.io/watch-filter": env.id}},
                "spec": {"template": {"spec": spec}}
            });
            api.create(&Default::default(), &serde_json::from_value(obj).unwrap())
                .await
                .expect("create template");
            let capacity = eventually(LONG, "status.capacity", || async {
                let t = api.get(&name).await.ok()?;
                t.data["status"]["capacity"].as_object().cloned()
            })
            .await;
            assert_eq!(
                capacity["cpu"],
                json!(ncpu.to_string()),
                "{kind} {capacity:?}"
            );
            let memory = capacity["memory"].as_str().expect("memory as a string");
            let (digits, shift) = [("Ki", 10), ("Mi", 20), ("Gi", 30)]
                .into_iter()
                .find_map(|(suffix, shift)| Some((memory.strip_suffix(suffix)?, shift)))
                .unwrap_or((memory, 0));
            let bytes = digits.parse::<u64>().expect("a whole number") << shift;
            assert_eq!(bytes, mem, "{kind}: memory {memory} is MemTotal");
            api.delete(&name, &Default::default()).await.unwrap();
        }
    })
    .await;
}
