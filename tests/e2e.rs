//! End to end with the real Cluster API: core, kubeadm bootstrap (CABPK) and kubeadm control
//! plane (KCP) controllers run as local processes (`hack/capi.sh up`) and drive capd-rs through a
//! cluster rendered by `clusterctl generate cluster` from `templates/cluster-template.yaml`.
//!
//! Where it stops, and why: the light node image has no kubeadm/kubelet. CABPK's real
//! cloud-config for the control-plane machine is executed by capd-rs up to its `kubeadm init`
//! command, which exits 127 ("not found"); the machine then reports BootstrapFailed with that
//! command and code, and KCP never sees an initialized control plane. So the MachineDeployment
//! names a prepared bootstrap Secret (`bootstrap.dataSecretName`, a legal CAPI shape) instead of
//! a KubeadmConfigTemplate, whose join data would never come.
mod common;

use std::time::Duration;

use capd::docker::labels;
use common::{capi_e2e::*, *};
use kube::{
    ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

const LONG: Duration = Duration::from_secs(180);
const WORKER_BOOTSTRAP: &str = include_str!("fixtures/bootstrap-ok.yaml");

async fn worker_containers(name: &str, ns: &str) -> usize {
    cluster_containers(name, ns)
        .await
        .iter()
        .filter(|c| c.labels.get(labels::KIND_ROLE).map(String::as_str) == Some("worker"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_capi_drives_a_cluster_from_the_default_template() {
    let (env, ns) = TestEnv::with_namespaced_manager("e2e").await;
    env.run(|env| async move {
        let docker = docker().await;
        let name = format!("{}-c", env.id);
        env.create_secret(&ns, "worker-bootstrap", Some(WORKER_BOOTSTRAP), None)
            .await;
        kubectl(
            &["apply", "-f", "-"],
            Some(&render_cluster(
                &name,
                &ns,
                2,
                Some(NODE_IMAGE),
                Some("worker-bootstrap"),
            )),
        );

        // Core sets the owner reference and the cluster label on our DockerCluster, copies the
        // endpoint and marks the infrastructure provisioned.
        let dc = eventually(
            LONG,
            "DockerCluster owned by its Cluster and provisioned",
            || async {
                env.docker_cluster(&ns, &name).await.filter(|dc| {
                    dc.owner_references()
                        .iter()
                        .any(|o| o.kind == "Cluster" && o.name == name)
                        && dc.labels().get("cluster.x-k8s.io/cluster-name") == Some(&name)
                        && dc.status.as_ref().and_then(|s| s.ready) == Some(true)
                })
            },
        )
        .await;
        let clusters = capi_api(&env, &ns, "cluster.x-k8s.io", "Cluster");
        let cluster = eventually(LONG, "Cluster infrastructure provisioned", || async {
            clusters.get(&name).await.ok().filter(|c| {
                c.data["status"]["initialization"]["infrastructureProvisioned"] == json!(true)
            })
        })
        .await;
        let endpoint = dc.spec.control_plane_endpoint.clone().unwrap();
        assert_eq!(
            cluster.data["spec"]["controlPlaneEndpoint"]["host"],
            json!(endpoint.host.unwrap())
        );
        assert_eq!(
            cluster.data["spec"]["controlPlaneEndpoint"]["port"],
            json!(endpoint.port.unwrap())
        );

        // KCP's Machine gets a node container; CABPK's real bootstrap data runs until kubeadm.
        let cp = eventually(LONG, "control-plane bootstrap stops at kubeadm", || async {
            docker_machines(&env, &ns)
                .await
                .into_iter()
                .find(|dm| is_cp(dm) && dm.has_reason("BootstrapCompleted", "BootstrapFailed"))
        })
        .await;
        assert!(
            cp.owner_references().iter().any(|o| o.kind == "Machine"),
            "core owns the DockerMachine"
        );
        let msg = &cp.cond("BootstrapCompleted").unwrap().message;
        assert!(msg.contains("kubeadm") && msg.contains("code 127"), "{msg}");
        let cp_container = cp.name_any();
        assert!(cp_container.starts_with(&name));
        let (code, _) = exec(
            &docker,
            &cp_container,
            "test -s /run/kubeadm/kubeadm.yaml && test -s /etc/kubernetes/pki/ca.crt",
        )
        .await;
        assert_eq!(code, 0, "CABPK's write_files ran before kubeadm");
        // The control-plane node is an LB backend.
        let cfg = lb_config(&docker, &format!("{name}-lb")).await;
        assert!(cfg.contains(&format!("server {cp_container} ")), "{cfg}");

        // The MachineDeployment's Machines are provisioned; core copies our providerID.
        let machines = capi_api(&env, &ns, "cluster.x-k8s.io", "Machine");
        eventually(
            LONG,
            "2 workers provisioned with providerIDs on their Machines",
            || async {
                let workers: Vec<_> = docker_machines(&env, &ns)
                    .await
                    .into_iter()
                    .filter(|dm| !is_cp(dm) && dm.spec.provider_id.is_some())
                    .collect();
                let mut matched = 0;
                for dm in &workers {
                    let owner = dm
                        .owner_references()
                        .iter()
                        .find(|o| o.kind == "Machine")?
                        .name
                        .clone();
                    let m = machines.get(&owner).await.ok()?;
                    if m.data["spec"]["providerID"].as_str() == dm.spec.provider_id.as_deref() {
                        matched += 1;
                    }
                }
                (matched == 2).then_some(())
            },
        )
        .await;
        assert_eq!(worker_containers(&name, &ns).await, 2);

        // Contract item 20: core copies our addresses to the Machines.
        eventually(LONG, "Machine.status.addresses equal ours", || async {
            for dm in docker_machines(&env, &ns)
                .await
                .into_iter()
                .filter(|dm| !is_cp(dm) && dm.spec.provider_id.is_some())
            {
                let owner = dm
                    .owner_references()
                    .iter()
                    .find(|o| o.kind == "Machine")?
                    .name
                    .clone();
                let m = machines.get(&owner).await.ok()?;
                let ours = serde_json::to_value(dm.status.as_ref()?.addresses.as_ref()?).ok()?;
                if m.data["status"]["addresses"] != ours {
                    return None;
                }
            }
            Some(())
        })
        .await;
        // Contract item 10: the Cluster's InfrastructureReady mirrors our Ready.
        eventually(
            LONG,
            "Cluster InfrastructureReady mirrors DockerCluster Ready",
            || async {
                let c = clusters.get(&name).await.ok()?;
                let infra = c.data["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "InfrastructureReady")?
                    .clone();
                let dc = env.docker_cluster(&ns, &name).await?;
                let ready = condition(dc.status.as_ref()?.conditions.as_ref(), "Ready")?;
                (infra["status"] == json!(format!("{:?}", ready.status))).then_some(())
            },
        )
        .await;

        // Pausing the Cluster pauses us.
        clusters
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"paused": true}})),
            )
            .await
            .unwrap();
        eventually(LONG, "Paused conditions", || async {
            let dc_paused = env
                .docker_cluster(&ns, &name)
                .await
                .is_some_and(|dc| dc.cond_true("Paused"));
            let dms = docker_machines(&env, &ns).await;
            let all_paused = dms.iter().all(|dm| dm.cond_true("Paused"));
            (dc_paused && all_paused && !dms.is_empty()).then_some(())
        })
        .await;
        clusters
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"paused": false}})),
            )
            .await
            .unwrap();

        // Scaling the MachineDeployment adds and removes node containers.
        let mds = capi_api(&env, &ns, "cluster.x-k8s.io", "MachineDeployment");
        let md = format!("{name}-md-0");
        mds.patch(
            &md,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
        eventually(LONG, "3 worker containers", || async {
            (worker_containers(&name, &ns).await == 3).then_some(())
        })
        .await;
        mds.patch(
            &md,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
        eventually(LONG, "1 worker container", || async {
            (worker_containers(&name, &ns).await == 1).then_some(())
        })
        .await;

        // Deleting the Cluster removes every object and every container of the cluster.
        kubectl(
            &["delete", "cluster", &name, "-n", &ns, "--wait=false"],
            None,
        );
        eventually(Duration::from_secs(300), "everything deleted", || async {
            let gone = clusters.get_opt(&name).await.unwrap().is_none()
                && env.docker_cluster(&ns, &name).await.is_none()
                && docker_machines(&env, &ns).await.is_empty()
                && machines
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty()
                && cluster_containers(&name, &ns).await.is_empty();
            gone.then_some(())
        })
        .await;
    })
    .await;
}

/// API parity with upstream: a ClusterClass change of the machine image goes through on real
/// CAPI. The class is upstream v1.14's shape, with Dev* kinds: the DevCluster and the control
/// plane's DevMachine are provisioned by the Dev* family of controllers. The topology controller
/// tells whether a template changed by server-side-applying the new DevMachineTemplate in
/// dry-run mode, annotated `topology.cluster.x-k8s.io/dry-run`,
/// and then rotates to a new template. A CRD rule keeping `customImage` immutable refused that
/// dry run, and the topology stalled; the admission policy of `config/admission` lets it pass
/// (`tests/crds.rs` checks the policy itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterclass_image_change_rotates_the_machine_template() {
    let (env, ns) = TestEnv::with_namespaced_manager("cc").await;
    env.run(|env| async move {
        let class = include_str!("../templates/clusterclass-quick-start.yaml");
        kubectl(&["apply", "-n", &ns, "-f", "-"], Some(class));
        let name = format!("{}-cc", env.id);
        let cluster = |image: &str| {
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]},
                                       "services": {"cidrBlocks": ["10.128.0.0/12"]}},
                    "topology": {
                        "classRef": {"name": "quick-start"},
                        "version": format!("v{K8S_VERSION}"),
                        "controlPlane": {"replicas": 1},
                        "variables": [{"name": "customImage", "value": image}]
                    }
                }
            })
            .to_string()
        };
        kubectl(&["apply", "-f", "-"], Some(&cluster(NODE_IMAGE)));
        let kcps = capi_api(
            &env,
            &ns,
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
        );
        let templates = capi_api(
            &env,
            &ns,
            "infrastructure.cluster.x-k8s.io",
            "DevMachineTemplate",
        );
        // The control plane's machine template, and its image.
        let current = || async {
            let kcp = kcps.list(&ListParams::default()).await.ok()?.items.pop()?;
            let template = kcp.data["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"]
                .as_str()?
                .to_string();
            let dmt = templates.get_opt(&template).await.ok()??;
            let image = dmt.data["spec"]["template"]["spec"]["backend"]["docker"]["customImage"]
                .as_str()?
                .to_string();
            Some((template, image))
        };
        let (first, image) = eventually(LONG, "the control plane's DevMachineTemplate", || async {
            current().await.filter(|(_, image)| image == NODE_IMAGE)
        })
        .await;
        assert_eq!(image, NODE_IMAGE);
        // The Dev* family serves the class's objects: the DevCluster's load balancer is up and
        // the control plane's DevMachine has its node container, both labelled with their kind.
        let dev_clusters = capi_api(&env, &ns, "infrastructure.cluster.x-k8s.io", "DevCluster");
        eventually(LONG, "the DevCluster provisioned", || async {
            let dc = dev_clusters
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .pop()?;
            (dc.data["status"]["initialization"]["provisioned"] == json!(true)
                && dc.data["spec"]["controlPlaneEndpoint"]["host"].is_string())
            .then_some(())
        })
        .await;
        let owners = eventually(LONG, "LB and control-plane containers", || async {
            let kinds: Vec<String> = cluster_containers(&name, &ns)
                .await
                .iter()
                .filter_map(|c| c.labels.get(labels::OWNER_KIND).cloned())
                .collect();
            (kinds.len() >= 2).then_some(kinds)
        })
        .await;
        assert!(owners.contains(&"DevCluster".to_string()), "{owners:?}");
        assert!(owners.contains(&"DevMachine".to_string()), "{owners:?}");

        let new_image = "capd-rs/node:light-next";
        kubectl(&["apply", "-f", "-"], Some(&cluster(new_image)));
        let (second, _) = eventually(
            LONG,
            "a new DevMachineTemplate with the new image",
            || async { current().await.filter(|(_, image)| image == new_image) },
        )
        .await;
        assert_ne!(first, second, "a new template, not a changed one");
        let clusters = capi_api(&env, &ns, "cluster.x-k8s.io", "Cluster");
        let topology = clusters.get(&name).await.unwrap();
        let reconciled = topology.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "TopologyReconciled"))
            .cloned();
        assert!(
            !reconciled
                .as_ref()
                .and_then(|c| c["message"].as_str())
                .is_some_and(|m| m.contains("immutable")),
            "the topology met the immutability rule: {reconciled:?}"
        );
    })
    .await;
}
