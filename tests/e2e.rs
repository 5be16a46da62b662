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
                .find(|dm| is_cp(dm) && dm.has_reason("BootstrapExecSucceeded", "BootstrapFailed"))
        })
        .await;
        assert!(
            cp.owner_references().iter().any(|o| o.kind == "Machine"),
            "core owns the DockerMachine"
        );
        let msg = &cp.cond("BootstrapExecSucceeded").unwrap().message;
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
        let cfg = exec(
            &docker,
            &format!("{name}-lb"),
            "cat /usr/local/etc/haproxy/haproxy.cfg",
        )
        .await
        .1;
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
