//! End to end with real Kubernetes nodes: the default template, unchanged (real CABPK join data,
//! no prepared Secret), rendered by `clusterctl generate cluster`, driven by the real CAPI core,
//! CABPK and KCP, on node containers from the kind-style image `hack/node-image.sh` builds
//! (`kindest/node:v<version>`, picked by the kind mapping: no customImage).
//!
//! Asserted through the workload cluster's own API (its kubeconfig Secret, through our load
//! balancer): every Node Ready with our providerID and every Machine's nodeRef set; a Deployment
//! spread over the two workers Running, pod-to-pod traffic across nodes and a Service answering
//! by address and by name (CoreDNS);
//! KCP 1 → 3 (three LB backends) and back to 1 with the API answering through the load balancer
//! all along; the MachineDeployment 2 → 3 → 1; a MachinePool 1 → 2 → 1 (CAPI's "MachinePool
//! Machines" on our DockerMachinePool); deletion leaving no container, volume or network.
mod common;

use std::{
    collections::BTreeSet,
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use common::{capi_e2e::*, workload::*, *};
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// A small HTTP server from an image every node has preloaded (CoreDNS: its `health` plugin
/// answers `OK` on :8080), two replicas spread over the workers, a Service in front, and a client
/// Pod (the kube-proxy image has bash) pinned to one worker.
const WORKLOAD: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: web}
data:
  Corefile: |
    .:5353 {
      health :8080
      whoami
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: web
        image: registry.k8s.io/coredns/coredns:v1.13.1
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /health, port: 8080}, periodSeconds: 2}
        volumeMounts: [{name: config, mountPath: /etc/coredns}]
      volumes: [{name: config, configMap: {name: web}}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"#;

fn client_pod(node: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "client"}},
        "spec": {{"nodeName": "{node}", "containers": [{{"name": "client",
        "image": "registry.k8s.io/kube-proxy:v{K8S_VERSION}", "imagePullPolicy": "Never",
        "command": ["sleep", "infinity"]}}]}}}}"#
    )
}

/// `GET /health` from the client Pod to `host:port` with bash's /dev/tcp.
fn http_from_client(kubeconfig: &Path, host: &str, port: u16) -> Result<String, String> {
    let script = format!(
        "exec 3<>/dev/tcp/{host}/{port} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 5 cat <&3"
    );
    wl(
        kubeconfig,
        &[
            "exec", "client", "--", "timeout", "10", "bash", "-c", &script,
        ],
        None,
    )
}

/// Volumes no container uses.
fn dangling_volumes() -> BTreeSet<String> {
    let out = Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", "dangling=true"])
        .output()
        .expect("docker volume ls");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// haproxy backends in the load balancer's config.
async fn lb_backends(cluster: &str) -> usize {
    let docker = docker().await;
    let cfg = lb_config(&docker, &format!("{cluster}-lb")).await;
    cfg.lines()
        .filter(|l| l.trim_start().starts_with("server "))
        .count()
}

/// A MachinePool beside the MachineDeployment, with the workers' kubeadm config: CAPI core
/// gives each of our instances (DockerMachines, or DevMachines for a DevMachinePool) a Machine,
/// each joins as a Ready Node; our providerIDList reaches the MachinePool; 1 -> 2 -> 1 -> 0
/// replicas (down through a Machine, so the node is drained and deleted).
async fn machine_pool_scales(env: &TestEnvRef, ns: &str, name: &str, kc: &Path, kind: &str) {
    let (pool, spec, instance_kind) = match kind {
        "DevMachinePool" => (
            format!("{name}-dmp"),
            json!({"backend": {"docker": {}}}),
            "DevMachine",
        ),
        _ => (
            format!("{name}-mp"),
            json!({"template": {}}),
            "DockerMachine",
        ),
    };
    let kct: serde_json::Value = serde_json::from_str(&kubectl(
        &[
            "get",
            "kubeadmconfigtemplate",
            &format!("{name}-md-0"),
            "-n",
            ns,
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    let manifests = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
         "metadata": {"name": pool, "namespace": ns}, "spec": kct["spec"]["template"]["spec"]},
        {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": kind,
         "metadata": {"name": pool, "namespace": ns}, "spec": spec},
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
         "metadata": {"name": pool, "namespace": ns},
         "spec": {"clusterName": name, "replicas": 1, "template": {"spec": {
            "clusterName": name, "version": format!("v{K8S_VERSION}"),
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                                        "kind": "KubeadmConfig", "name": pool}},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": kind, "name": pool}}}}}
    ]});
    let t0 = Instant::now();
    kubectl(&["apply", "-f", "-"], Some(&manifests.to_string()));
    let pools = capi_api(env, ns, "infrastructure.cluster.x-k8s.io", kind);
    let machine_pools = capi_api(env, ns, "cluster.x-k8s.io", "MachinePool");
    // The pool's Machines and their providerIDs, as CAPI core sees them.
    let listed = |n: usize| {
        let (env, ns, pool, pools, machine_pools) = (
            env.clone(),
            ns.to_string(),
            pool.clone(),
            pools.clone(),
            machine_pools.clone(),
        );
        async move {
            eventually(
                Duration::from_secs(120),
                &format!("{n} pool instances listed by the pool and the MachinePool"),
                || async {
                    let mut ids: Vec<String> = machines(&env, &ns)
                        .await
                        .into_iter()
                        .filter(|m| m.0.starts_with(&pool))
                        .filter_map(|m| m.3)
                        .collect();
                    ids.sort();
                    let dmp = pools.get(&pool).await.ok()?;
                    let mp = machine_pools.get(&pool).await.ok()?;
                    // CAPI drops an empty list: absent reads as empty.
                    let listed = |v: &serde_json::Value| {
                        v.as_array().map_or(0, Vec::len) == n && (n == 0 || *v == json!(ids))
                    };
                    (ids.len() == n
                        && listed(&dmp.data["spec"]["providerIDList"])
                        && dmp.data["status"]["replicas"].as_u64().unwrap_or(0) == n as u64
                        && listed(&mp.data["spec"]["providerIDList"])
                        && mp.data["status"]["replicas"].as_u64().unwrap_or(0) == n as u64)
                        .then_some(dmp)
                },
            )
            .await
        }
    };
    wait_for_nodes(env, ns, kc, 1, 2, "MachinePool: 1 instance joined").await;
    eprintln!(
        "MachinePool ({kind}) 0 -> 1 Node Ready: {:.0}s",
        t0.elapsed().as_secs_f64()
    );
    let dmp = listed(1).await;
    assert_eq!(
        dmp.data["status"]["infrastructureMachineKind"],
        instance_kind
    );
    assert_eq!(dmp.data["status"]["ready"], true);
    let replicas = |n: u32| json!({"spec": {"replicas": n}});
    machine_pools
        .patch(&pool, &PatchParams::default(), &Patch::Merge(&replicas(2)))
        .await
        .unwrap();
    wait_for_nodes(env, ns, kc, 1, 3, "MachinePool: 2 instances joined").await;
    listed(2).await;
    machine_pools
        .patch(&pool, &PatchParams::default(), &Patch::Merge(&replicas(1)))
        .await
        .unwrap();
    wait_for_nodes(env, ns, kc, 1, 2, "MachinePool: back to 1 instance").await;
    listed(1).await;
    let pool_containers = cluster_containers(name, ns)
        .await
        .into_iter()
        .filter(|c| c.name.starts_with(&pool))
        .count();
    assert_eq!(
        pool_containers, 1,
        "the removed instance's container is gone"
    );
    machine_pools
        .patch(&pool, &PatchParams::default(), &Patch::Merge(&replicas(0)))
        .await
        .unwrap();
    wait_for_nodes(env, ns, kc, 1, 1, "MachinePool: scaled to zero").await;
    listed(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_template_gives_a_workload_cluster_whose_nodes_go_ready() {
    workload_cluster(Scope::WithScaling).await;
}

/// The same cluster without the scaling: 1 control plane and 2 workers Ready, the workload's
/// traffic, deletion leaving nothing. The real-node check of `hack/test.sh`'s Engine 20.10 step,
/// where the scaling (six more minutes there) would make no engine call the rest does not make;
/// ignored in the main run, where the test above covers all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a part of the_default_template_gives_a_workload_cluster_whose_nodes_go_ready; hack/test.sh runs it on Engine 20.10"]
async fn a_default_template_cluster_goes_ready_serves_traffic_and_leaves_nothing() {
    workload_cluster(Scope::ReadyAndDelete).await;
}

#[derive(PartialEq)]
enum Scope {
    WithScaling,
    ReadyAndDelete,
}

async fn workload_cluster(scope: Scope) {
    let (env, ns) = TestEnv::with_namespaced_manager("nodes").await;
    env.run(|env| async move {
        let name = format!("{}-w", env.id);
        let volumes_before = dangling_volumes();
        let t0 = Instant::now();
        kubectl(
            &["apply", "-f", "-"],
            Some(&render_cluster(&name, &ns, 2, None, None)),
        );
        let kc = workload_kubeconfig(&env, &ns, &name).await;
        let nodes = wait_for_nodes(&env, &ns, &kc, 1, 2, "1 control plane + 2 workers Ready").await;
        eprintln!("apply -> 3 Nodes Ready: {:.0}s", t0.elapsed().as_secs_f64());
        // Every node container runs the kind-style image the kind mapping picked.
        for c in cluster_containers(&name, &ns).await {
            if c.name != format!("{name}-lb") {
                assert_eq!(
                    c.image,
                    format!("kindest/node:v{K8S_VERSION}"),
                    "{}",
                    c.name
                );
            }
        }

        // A Deployment spread over the two workers, pod-to-pod traffic and a Service.
        wl(&kc, &["apply", "-f", "-"], Some(WORKLOAD)).unwrap();
        let pods = eventually(
            Duration::from_secs(180),
            "2 web pods Ready on 2 nodes",
            || async {
                let pods = wl_json(&kc, &["get", "pods", "-l", "app=web"])?;
                let ready: Vec<(String, String)> = pods["items"]
                    .as_array()?
                    .iter()
                    .filter(|p| {
                        p["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                    .map(|p| {
                        (
                            p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                            p["status"]["podIP"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect();
                let on: BTreeSet<&String> = ready.iter().map(|(n, _)| n).collect();
                (ready.len() == 2 && on.len() == 2).then_some(ready)
            },
        )
        .await;
        let client_node = &pods[0].0;
        wl(&kc, &["apply", "-f", "-"], Some(&client_pod(client_node))).unwrap();
        eventually(Duration::from_secs(120), "client pod running", || async {
            let p = wl_json(&kc, &["get", "pod", "client"])?;
            (p["status"]["phase"] == "Running").then_some(())
        })
        .await;
        for (node, ip) in &pods {
            let reply = http_from_client(&kc, ip, 8080)
                .unwrap_or_else(|e| panic!("pod {ip} on {node} from {client_node}: {e}"));
            assert!(reply.contains("200 OK"), "pod {ip} on {node}: {reply}");
        }
        let svc = wl_json(&kc, &["get", "service", "web"]).unwrap();
        let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
        eventually(Duration::from_secs(60), "the Service answers", || async {
            http_from_client(&kc, &cluster_ip, 80)
                .ok()
                .filter(|r| r.contains("200 OK"))
        })
        .await;
        // And by name: the pod's resolver is CoreDNS, which forwards what it does not serve
        // to the node's resolv.conf (the node image's DNS setup; CoreDNS stopped on "Loop
        // detected" before it).
        eventually(
            Duration::from_secs(120),
            "the Service answers by name",
            || async {
                http_from_client(&kc, "web", 80)
                    .ok()
                    .filter(|r| r.contains("200 OK"))
            },
        )
        .await;

        assert_eq!(nodes.len(), 3);
        if scope == Scope::WithScaling {
            scale_control_plane_workers_and_pools(&env, &ns, &name, &kc).await;
        }

        // Deletion leaves no container, volume or network of the cluster.
        kubectl(
            &["delete", "cluster", &name, "-n", &ns, "--wait=false"],
            None,
        );
        eventually(Duration::from_secs(300), "every container gone", || async {
            cluster_containers(&name, &ns)
                .await
                .is_empty()
                .then_some(())
        })
        .await;
        let left_behind: Vec<String> = dangling_volumes()
            .difference(&volumes_before)
            .cloned()
            .collect();
        assert!(
            left_behind.is_empty(),
            "anonymous /var volumes left behind: {left_behind:?}"
        );
        let _ = std::fs::remove_file(&kc);
    })
    .await;
}

/// KCP 1 -> 3 -> 1 with the API answering through the load balancer all along, the
/// MachineDeployment 2 -> 3 -> 1, and both kinds of MachinePool.
async fn scale_control_plane_workers_and_pools(env: &TestEnvRef, ns: &str, name: &str, kc: &Path) {
    // KCP 1 -> 3: three Ready control-plane Nodes, three LB backends.
    let kcps = capi_api(
        env,
        ns,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    );
    let kcp = format!("{name}-control-plane");
    let scale = |replicas: u32| json!({"spec": {"replicas": replicas}});
    let t1 = Instant::now();
    kcps.patch(&kcp, &PatchParams::default(), &Patch::Merge(&scale(3)))
        .await
        .unwrap();
    wait_for_nodes(env, ns, kc, 3, 2, "3 control-plane Nodes Ready").await;
    eprintln!("KCP 1 -> 3: {:.0}s", t1.elapsed().as_secs_f64());
    eventually(Duration::from_secs(60), "3 LB backends", || async {
        (lb_backends(name).await == 3).then_some(())
    })
    .await;

    // KCP 3 -> 1 while the API is polled through the load balancer.
    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let poller = {
        let (stop, ok, failed, kc) = (stop.clone(), ok.clone(), failed.clone(), kc.to_path_buf());
        std::thread::spawn(move || {
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match wl(&kc, &["get", "--raw", "/readyz"], None) {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        errors.push(e);
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
                std::thread::sleep(Duration::from_millis(200));
            }
            errors
        })
    };
    kcps.patch(&kcp, &PatchParams::default(), &Patch::Merge(&scale(1)))
        .await
        .unwrap();
    wait_for_nodes(env, ns, kc, 1, 2, "back to 1 control-plane Node").await;
    eventually(Duration::from_secs(60), "1 LB backend", || async {
        (lb_backends(name).await == 1).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let errors = poller.join().unwrap();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("API through the LB during KCP 3 -> 1: {ok} answered, {failed} failed");
    assert!(ok > 10, "the poller ran");
    assert_eq!(
        failed, 0,
        "the API stopped answering through the LB: {errors:?}"
    );

    // MachineDeployment 2 -> 3 -> 1.
    let mds = capi_api(env, ns, "cluster.x-k8s.io", "MachineDeployment");
    let md = format!("{name}-md-0");
    mds.patch(&md, &PatchParams::default(), &Patch::Merge(&scale(3)))
        .await
        .unwrap();
    wait_for_nodes(env, ns, kc, 1, 3, "3 worker Nodes Ready").await;
    mds.patch(&md, &PatchParams::default(), &Patch::Merge(&scale(1)))
        .await
        .unwrap();
    let left = wait_for_nodes(env, ns, kc, 1, 1, "1 worker Node left").await;
    assert_eq!(left.len(), 2);

    machine_pool_scales(env, ns, name, kc, "DockerMachinePool").await;
    machine_pool_scales(env, ns, name, kc, "DevMachinePool").await;
}
