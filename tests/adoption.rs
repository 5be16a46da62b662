//! Adopting what upstream CAPD created, against the Docker Engine and the plane (CAPI core
//! played by the test, as in tests/controllers.rs).
//!
//! The containers are made by hand the way upstream CAPD v1.14 makes them: names `<cluster>-lb`
//! and `<cluster>-<machine>`, only kind's labels (`io.x-k8s.kind.cluster`, `io.x-k8s.kind.role`;
//! plus this test's run label, for cleanup), on the cluster's network; the DockerCluster's
//! endpoint and the DockerMachines' providerIDs point at them, as upstream leaves them. capd-rs
//! must use those very containers (same IDs), record the adoption in an annotation, write its
//! haproxy.cfg into the LB with upstream's control-plane node as backend, and remove them on
//! deletion; a container with the right name but another cluster's labels, or no labels, stays a
//! `ContainerNameConflict` and is never removed.
mod common;

use std::time::Duration;

use capd::{api::DockerMachine, docker::adoption::ADOPTED_CONTAINER};
use common::*;
use kube::{Api, ResourceExt, api::DeleteParams};
use serde_json::json;

const LONG: Duration = Duration::from_secs(90);
const LB_IMAGE: &str = "kindest/haproxy:v20230606-42a2262b";

/// `docker run -d` of a container labelled as upstream CAPD labels it (kind labels only; the
/// test's run label for cleanup), on `network`; returns its ID.
fn upstream_container(
    id: &str,
    name: &str,
    network: &str,
    image: &str,
    kind_labels: &[(&str, &str)],
) -> String {
    let mut args: Vec<String> = ["run", "-d", "--name", name, "--network", network]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--label".into(), format!("{TEST_LABEL}={id}")]);
    for (k, v) in kind_labels {
        args.extend(["--label".into(), format!("{k}={v}")]);
    }
    args.push(image.into());
    if image == NODE_IMAGE {
        // The light node image as a plain long-running container (no init needed here: the
        // node is provisioned already, nothing runs in it).
        args.extend(["sleep".into(), "infinity".into()]);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    docker_cli_output(&argv).trim().to_string()
}

fn container_id(name: &str) -> Option<String> {
    docker_lines(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("name=^{name}$"),
    ])
    .into_iter()
    .next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_capd_containers_are_adopted_with_their_ids_and_others_stay_foreign() {
    let mut env = TestEnv::new("adopt").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        env.manager_ready().await;
        docker_cli(&[
            "network",
            "create",
            "--label",
            &format!("{TEST_LABEL}={}", env.id),
            &env.network,
        ]);
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let kind = |role: &str| {
            vec![
                ("io.x-k8s.kind.cluster", name.clone()),
                ("io.x-k8s.kind.role", role.to_string()),
            ]
        };
        let run = |cname: &str, image: &str, labels: Vec<(&'static str, String)>| {
            let l: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            upstream_container(&env.id, cname, &env.network, image, &l)
        };
        let lb = format!("{name}-lb");
        let cp = format!("{name}-cp-0");
        let worker = format!("{name}-worker-0");
        let stranger = format!("{name}-stranger");
        let bare = format!("{name}-bare");
        let lb_id = run(&lb, LB_IMAGE, kind("external-load-balancer"));
        let cp_id = run(&cp, NODE_IMAGE, kind("control-plane"));
        let worker_id = run(&worker, NODE_IMAGE, kind("worker"));
        // Right name, another cluster's labels; right name, no labels at all.
        let stranger_id = run(
            &stranger,
            NODE_IMAGE,
            vec![
                ("io.x-k8s.kind.cluster", "someone-else".to_string()),
                ("io.x-k8s.kind.role", "worker".to_string()),
            ],
        );
        let bare_id = run(&bare, NODE_IMAGE, vec![]);
        let docker = docker().await;
        let lb_ip = inspect(&docker, &lb)
            .await
            .and_then(|c| c.ipv4)
            .expect("the LB has an address");

        // The objects as upstream leaves them: the endpoint is the LB's address, each machine's
        // providerID names its container.
        let cluster = env.create_cluster(&ns, &name, false).await;
        env.create_docker_cluster(
            &ns,
            &cluster,
            json!({"spec": {"controlPlaneEndpoint": {"host": lb_ip, "port": 6443}}}),
        )
        .await;
        env.mark_infrastructure_provisioned(&ns, &name).await;
        for (machine, container, control_plane) in [
            ("cp-0", &cp, true),
            ("worker-0", &worker, false),
            ("stranger", &stranger, false),
            ("bare", &bare, false),
        ] {
            env.create_machine(
                &ns,
                &name,
                machine,
                control_plane,
                Some("unused"),
                json!({"providerID": format!("docker:////{container}")}),
            )
            .await;
        }

        // The DockerCluster adopts the LB: same container, recorded, our config in it with
        // upstream's control-plane node as its backend.
        let dc = eventually(
            LONG,
            "DockerCluster provisioned on the adopted LB",
            || async {
                env.docker_cluster(&ns, &name)
                    .await
                    .filter(|dc| cluster_provisioned(dc.status.as_ref()))
            },
        )
        .await;
        assert_eq!(
            dc.annotations().get(ADOPTED_CONTAINER),
            Some(&lb_id),
            "the adoption is recorded"
        );
        let cfg = eventually(LONG, "our haproxy.cfg with the upstream CP", || async {
            let cfg = lb_config(&docker, &lb).await;
            (cfg.contains("# generated by capd-rs") && cfg.contains(&format!("server {cp} ")))
                .then_some(cfg)
        })
        .await;
        assert!(!cfg.contains(&worker), "workers are not backends:\n{cfg}");

        // Both upstream nodes are adopted: provisioned, same containers, recorded.
        for (machine, id) in [("cp-0", &cp_id), ("worker-0", &worker_id)] {
            let dm = eventually(LONG, "adopted machine provisioned", || async {
                env.docker_machine(&ns, machine).await.filter(|dm| {
                    is_true(
                        dm.status.as_ref().and_then(|s| s.conditions.as_ref()),
                        "ContainerProvisioned",
                    ) && dm.annotations().get(ADOPTED_CONTAINER).is_some()
                })
            })
            .await;
            assert_eq!(
                dm.annotations().get(ADOPTED_CONTAINER),
                Some(id),
                "{machine}"
            );
            assert_eq!(dm.status.as_ref().unwrap().ready, Some(true), "{machine}");
        }
        // The wrongly labelled ones stay foreign, untouched and unrecorded.
        for machine in ["stranger", "bare"] {
            let dm = eventually(LONG, "ContainerNameConflict", || async {
                env.docker_machine(&ns, machine).await.filter(|dm| {
                    condition(
                        dm.status.as_ref().and_then(|s| s.conditions.as_ref()),
                        "ContainerProvisioned",
                    )
                    .is_some_and(|c| c.reason == "ContainerNameConflict")
                })
            })
            .await;
            assert!(
                dm.annotations().get(ADOPTED_CONTAINER).is_none(),
                "{machine}"
            );
        }
        // Nothing was recreated.
        for (c, id) in [
            (&lb, &lb_id),
            (&cp, &cp_id),
            (&worker, &worker_id),
            (&stranger, &stranger_id),
            (&bare, &bare_id),
        ] {
            assert_eq!(container_id(c).as_ref(), Some(id), "{c} kept its container");
        }

        // Deleting an adopted machine removes its container; deleting a conflicting one leaves
        // the stranger's alone.
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        for machine in ["worker-0", "stranger"] {
            dms.delete(machine, &DeleteParams::default()).await.unwrap();
        }
        eventually(LONG, "both DockerMachines gone", || async {
            let a = env.docker_machine(&ns, "worker-0").await;
            let b = env.docker_machine(&ns, "stranger").await;
            (a.is_none() && b.is_none()).then_some(())
        })
        .await;
        assert_eq!(container_id(&worker), None, "the adopted worker is removed");
        assert_eq!(container_id(&stranger).as_ref(), Some(&stranger_id));

        // Deleting the DockerCluster removes the adopted LB.
        env.delete_capi(&ns, "Cluster", &name).await;
        let dcs: Api<capd::api::DockerCluster> = Api::namespaced(env.client.clone(), &ns);
        let _ = dcs.delete(&name, &DeleteParams::default()).await;
        eventually(LONG, "adopted LB removed", || async {
            container_id(&lb).is_none().then_some(())
        })
        .await;
    })
    .await;
}

/// The spec "KCP infra adoption" of upstream's e2e, on the plane: a Cluster's infrastructure
/// object is force-deleted (finalizer removed, so its LB stays) and a new one, of another name
/// and UID, becomes the Cluster's `spec.infrastructureRef`. The new one uses the very LB
/// container (same ID), and deleting it removes that container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_balancer_passes_to_the_infrastructure_object_the_cluster_names() {
    let mut env = TestEnv::new("lbpass").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        env.manager_ready().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let lb = format!("{name}-lb");
        // A, named as the Cluster, gets its LB.
        let a = env.provisioned_cluster(&ns, &name).await;
        let lb_id = container_id(&lb).expect("A's LB exists");

        // Orphan A the way the spec does: no reconcile may clean up (the Cluster is paused
        // meanwhile, as clusterctl move and the spec's force-delete leave nothing to run), its
        // finalizer is removed and it is deleted.
        env.set_cluster_paused(&ns, &name, true).await;
        eventually(LONG, "A paused", || async {
            env.docker_cluster(&ns, &name).await.filter(|dc| {
                is_true(
                    dc.status.as_ref().and_then(|s| s.conditions.as_ref()),
                    "Paused",
                )
            })
        })
        .await;
        let dcs: Api<capd::api::DockerCluster> = Api::namespaced(env.client.clone(), &ns);
        let no_finalizers = json!({"metadata": {"finalizers": null}});
        dcs.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&no_finalizers),
        )
        .await
        .expect("remove A's finalizer");
        dcs.delete(&name, &DeleteParams::default()).await.unwrap();
        eventually(LONG, "A gone", || async {
            env.docker_cluster(&ns, &name).await.is_none().then_some(())
        })
        .await;
        assert_eq!(container_id(&lb).as_ref(), Some(&lb_id), "A's LB stays");

        // B: another name, another UID; the Cluster names it.
        let b_name = format!("{name}-infra-b");
        let clusters: Api<kube::api::DynamicObject> =
            Api::namespaced_with(env.client.clone(), &ns, &capi("Cluster"));
        let cluster = clusters
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&json!({"spec": {
                    "paused": false,
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "DockerCluster", "name": b_name}
                }})),
            )
            .await
            .expect("point the Cluster at B");
        let b = env
            .create_docker_cluster(&ns, &cluster, json!({"metadata": {"name": b_name}}))
            .await;
        assert_ne!(b.uid(), a.uid());

        // B's LB is A's container, available.
        let dc = eventually(LONG, "B's LoadBalancerAvailable True", || async {
            env.docker_cluster(&ns, &b_name).await.filter(|dc| {
                is_true(
                    dc.status.as_ref().and_then(|s| s.conditions.as_ref()),
                    "LoadBalancerAvailable",
                )
            })
        })
        .await;
        assert_eq!(
            container_id(&lb).as_ref(),
            Some(&lb_id),
            "the same container"
        );
        let docker = docker().await;
        let ip = inspect(&docker, &lb).await.and_then(|c| c.ipv4);
        let endpoint = dc.spec.control_plane_endpoint.as_ref();
        assert_eq!(
            endpoint.and_then(|e| e.host.clone()),
            ip,
            "B's endpoint is the LB"
        );
        assert!(
            env.manager_log()
                .contains("the load balancer passes to the infrastructure object"),
            "the take-over is logged"
        );

        // Deleting B removes the container (it was leaked before: "belongs to someone else").
        dcs.delete(&b_name, &DeleteParams::default()).await.unwrap();
        eventually(LONG, "B gone", || async {
            env.docker_cluster(&ns, &b_name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
        assert_eq!(container_id(&lb), None, "deleting B removed the LB");
    })
    .await;
}
