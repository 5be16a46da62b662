//! The in-memory backend with the real Cluster API (core, CABPK and KCP as local processes,
//! `hack/capi.sh up`): a DevCluster and DevMachines of `spec.backend.inMemory` become a
//! workload cluster served by the manager itself, with no container. CAPI reaches that cluster
//! at the DevCluster's endpoint with the kubeconfig KCP writes, finds each machine's Node by
//! its providerID, CABPK writes its join tokens there, and KCP reads the etcd members through
//! port-forward to the fake etcd: 3 control planes and 10 workers make an Available Cluster.
//! The managers here are started without `--in-memory-backend`: the backend is served by
//! default, as upstream's is.
mod common;

use std::time::Duration;

use common::{capi_e2e::*, workload::*, *};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::json;

const LONG: Duration = Duration::from_secs(300);

/// A cluster of `control_planes` KCP machines and `workers` MachineDeployment workers, every
/// machine in memory with the given provisioning delays.
fn manifest(name: &str, ns: &str, control_planes: u32, workers: u32) -> String {
    let in_memory = json!({
        "vm": {"provisioning": {"startupDuration": "2s", "startupJitter": "0.2"}},
        "node": {"provisioning": {"startupDuration": "1s"}},
        "apiServer": {"provisioning": {"startupDuration": "1s"}},
        "etcd": {"provisioning": {"startupDuration": "1s"}},
    });
    let infra = "infrastructure.cluster.x-k8s.io";
    let docs = [
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                "infrastructureRef": {"apiGroup": infra, "kind": "DevCluster", "name": name},
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                    "kind": "KubeadmControlPlane", "name": format!("{name}-cp")},
            },
        }),
        json!({
            "apiVersion": format!("{infra}/v1beta2"), "kind": "DevCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"backend": {"inMemory": {}}},
        }),
        json!({
            "apiVersion": format!("{infra}/v1beta2"), "kind": "DevMachineTemplate",
            "metadata": {"name": format!("{name}-cp"), "namespace": ns},
            "spec": {"template": {"spec": {"backend": {"inMemory": in_memory}}}},
        }),
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": format!("{name}-cp"), "namespace": ns},
            "spec": {
                "replicas": control_planes,
                "version": format!("v{K8S_VERSION}"),
                "machineTemplate": {"spec": {"infrastructureRef": {
                    "apiGroup": infra, "kind": "DevMachineTemplate", "name": format!("{name}-cp")}}},
                "kubeadmConfigSpec": {"format": "cloud-config"},
            },
        }),
        json!({
            "apiVersion": format!("{infra}/v1beta2"), "kind": "DevMachineTemplate",
            "metadata": {"name": format!("{name}-md"), "namespace": ns},
            "spec": {"template": {"spec": {"backend": {"inMemory": in_memory}}}},
        }),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": format!("{name}-md"), "namespace": ns},
            "spec": {"template": {"spec": {"format": "cloud-config"}}},
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": format!("{name}-md"), "namespace": ns},
            "spec": {
                "clusterName": name,
                "replicas": workers,
                "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": name}},
                "template": {
                    "metadata": {"labels": {"cluster.x-k8s.io/cluster-name": name}},
                    "spec": {
                        "clusterName": name,
                        "version": format!("v{K8S_VERSION}"),
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfigTemplate", "name": format!("{name}-md")}},
                        "infrastructureRef": {"apiGroup": infra, "kind": "DevMachineTemplate",
                            "name": format!("{name}-md")},
                    },
                },
            },
        }),
    ];
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_capi_drives_an_in_memory_cluster_of_3_control_planes_and_10_workers_to_available() {
    let (env, ns) = TestEnv::with_namespaced_manager("inmem").await;
    env.run(|env| async move {
        let name = format!("{}-c", env.id);
        kubectl(&["apply", "-f", "-"], Some(&manifest(&name, &ns, 3, 10)));

        // The DevCluster gets a port of upstream's range on this host, and is provisioned.
        let dev_clusters = capi_api(&env, &ns, "infrastructure.cluster.x-k8s.io", "DevCluster");
        let dc = eventually(LONG, "DevCluster provisioned with an endpoint", || async {
            dev_clusters
                .get(&name)
                .await
                .ok()
                .filter(|dc| dc.data["status"]["initialization"]["provisioned"] == json!(true))
        })
        .await;
        let endpoint = &dc.data["spec"]["controlPlaneEndpoint"];
        assert_eq!(endpoint["host"], "127.0.0.1");
        let port = endpoint["port"].as_u64().unwrap();
        assert!((20000..=30000).contains(&port), "{endpoint}");

        // Every Machine gets a Node, found by CAPI core in the workload cluster by providerID.
        let kubeconfig = workload_kubeconfig(&env, &ns, &name).await;
        let running = eventually(LONG, "13 Machines with a nodeRef", || async {
            let ms = machines(&env, &ns).await;
            (ms.len() == 13 && ms.iter().all(|m| m.2.is_some())).then_some(ms)
        })
        .await;
        for (machine, _, node, provider_id) in &running {
            let node = node.as_deref().unwrap();
            assert_eq!(
                provider_id.as_deref(),
                Some(format!("in-memory://{node}").as_str()),
                "{machine}"
            );
        }
        let ready = ready_nodes(&kubeconfig).expect("the workload cluster answers kubectl");
        assert_eq!(ready.len(), 13, "{ready:?}");
        // CABPK's join tokens for the workers were written to the workload cluster (protobuf
        // bodies from controller-runtime).
        let tokens = wl_json(&kubeconfig, &["get", "secrets", "-n", "kube-system"]).unwrap();
        let tokens = tokens["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["type"] == "bootstrap.kubernetes.io/token")
            .count();
        assert!(tokens >= 1, "no bootstrap token in the workload cluster");
        // KCP scaled to 3 through the fake etcd (members read through port-forward), and the
        // Cluster is Available: control plane, etcd and workers.
        let condition = |obj: &kube::api::DynamicObject, t: &str| {
            obj.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == t)
                .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        };
        let kcps = capi_api(
            &env,
            &ns,
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
        );
        eventually(LONG, "KCP: 3 ready, etcd healthy, Available", || async {
            kcps.get(&format!("{name}-cp")).await.ok().filter(|k| {
                k.data["status"]["readyReplicas"] == 3
                    && condition(k, "EtcdClusterHealthy").as_deref() == Some("True")
                    && condition(k, "Available").as_deref() == Some("True")
            })
        })
        .await;
        let clusters = capi_api(&env, &ns, "cluster.x-k8s.io", "Cluster");
        eventually(LONG, "the Cluster Available", || async {
            clusters
                .get(&name)
                .await
                .ok()
                .filter(|c| condition(c, "Available").as_deref() == Some("True"))
        })
        .await;
        assert!(
            cluster_containers(&name, &ns).await.is_empty(),
            "an in-memory cluster has no container"
        );
        let dev_machines = capi_api(&env, &ns, "infrastructure.cluster.x-k8s.io", "DevMachine");
        for dm in dev_machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            assert_eq!(dm.data["status"]["initialization"]["provisioned"], true);
            let ready = dm.data["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .cloned();
            assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("True")));
        }

        // Deleting the Cluster deletes everything, and the listener goes with the DevCluster.
        capi_api(&env, &ns, "cluster.x-k8s.io", "Cluster")
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        eventually(LONG, "every DevMachine and the DevCluster gone", || async {
            let left = dev_machines
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .len()
                + dev_clusters
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .len();
            (left == 0).then_some(())
        })
        .await;
        eventually(LONG, "the workload listener closed", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port as u16))
                .await
                .is_err()
                .then_some(())
        })
        .await;
    })
    .await;
}

/// A DevCluster provisioned by a manager on another address (a Pod rescheduled with a new IP):
/// this manager writes its own host into the kubeconfig CAPI wrote, then into the endpoint, on
/// the real API server with the shipped RBAC (patch on Secrets is what the move needs). The old
/// address is never dialled: only its text is rewritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_manager_rewrites_the_kubeconfig_server_then_the_endpoint() {
    let (env, ns) = TestEnv::with_namespaced_manager("inmove").await;
    env.run(|env| async move {
        let name = format!("{}-c", env.id);
        let port = free_port();
        // Paused while the previous manager's state is laid down, so nothing races it.
        let cluster = env.create_cluster_of(&ns, &name, true, "DevCluster").await;
        env.create_dev_cluster(&ns, &cluster, json!({"inMemory": {}}))
            .await;
        let dev_clusters: Api<capd::api::dev::DevCluster> = Api::namespaced(env.client.clone(), &ns);
        let old = json!({"host": "10.0.0.9", "port": port});
        dev_clusters
            .patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"controlPlaneEndpoint": old}})))
            .await
            .unwrap();
        dev_clusters
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"initialization": {"provisioned": true}}})),
            )
            .await
            .unwrap();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: https://10.0.0.9:{port}\n    certificate-authority-data: Q0E=\ncontexts:\n- name: admin@{name}\n  context: {{cluster: {name}, user: admin}}\ncurrent-context: admin@{name}\nusers:\n- name: admin\n  user: {{client-key-data: S0VZ}}\n"
        );
        env.create_secret_of_type(&ns, &format!("{name}-kubeconfig"), Some(&kubeconfig), None, "cluster.x-k8s.io/secret")
            .await;
        // Seen paused first: only the unpause itself can then start the move, which is the
        // Cluster watch's job (a Cluster naming another kind would leave the DevCluster waiting).
        eventually(LONG, "the DevCluster reports Paused", || async {
            dev_clusters.get(&name).await.ok().filter(|dc| dc.cond_true("Paused"))
        })
        .await;
        env.set_cluster_paused(&ns, &name, false).await;

        let moved = eventually(LONG, "the DevCluster's host moved to 127.0.0.1", || async {
            dev_clusters.get(&name).await.ok().filter(|dc| {
                dc.spec.control_plane_endpoint.as_ref().and_then(|e| e.host.as_deref())
                    == Some("127.0.0.1")
            })
        })
        .await;
        assert_eq!(
            moved.spec.control_plane_endpoint.and_then(|e| e.port),
            Some(i32::from(port)),
            "the port is kept"
        );
        let secret = Api::<Secret>::namespaced(env.client.clone(), &ns)
            .get(&format!("{name}-kubeconfig"))
            .await
            .unwrap();
        let value: serde_json::Value =
            serde_yaml_ng::from_slice(&secret.data.unwrap()["value"].0).unwrap();
        assert_eq!(
            value["clusters"][0]["cluster"]["server"],
            format!("https://127.0.0.1:{port}"),
            "the kubeconfig follows the move before the endpoint does"
        );
        assert_eq!(value["users"][0]["user"]["client-key-data"], "S0VZ");
        assert!(
            env.manager_log().contains("kubeconfig server moved"),
            "the move is logged"
        );
        assert!(
            !env.manager_log().contains("S0VZ"),
            "the kubeconfig's key never reaches the log"
        );
    })
    .await;
}
