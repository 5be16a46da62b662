//! A Kubernetes upgrade of a workload cluster, as the CAPI developer guide's machine upgrade does
//! it: the control plane (KCP `spec.version`) first, then the MachineDeployment
//! (`spec.template.spec.version`); CAPI replaces every Machine, capd-rs creates the new node
//! containers from the kind mapping's image for the new version and removes the old ones.
//!
//! Not part of `.ci/run`: it needs a second node image (another Kubernetes version, ~20 minutes
//! of Go builds cold). `hack/upgrade.sh` builds it and runs this test:
//!   UPGRADE_FROM=1.34.4 (default) → UPGRADE_TO=K8S_VERSION (default, the plane's version).
mod common;

use std::time::Instant;

use common::{capi_e2e::*, workload::*, *};
use kube::api::{Patch, PatchParams};
use serde_json::json;

fn version(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

/// Node names and kubelet versions.
fn kubelet_versions(kubeconfig: &std::path::Path) -> Option<Vec<(String, String)>> {
    let nodes = wl_json(kubeconfig, &["get", "nodes"])?;
    Some(
        nodes["items"]
            .as_array()?
            .iter()
            .map(|n| {
                (
                    n["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    n["status"]["nodeInfo"]["kubeletVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a second node image: run hack/upgrade.sh"]
async fn control_plane_then_workers_roll_to_a_new_kubernetes_version() {
    let (from, to) = (
        version("UPGRADE_FROM", "1.34.4"),
        version("UPGRADE_TO", K8S_VERSION),
    );
    let (env, ns) = TestEnv::with_namespaced_manager("upgr").await;
    env.run(|env| async move {
        let name = format!("{}-u", env.id);
        let t0 = Instant::now();
        kubectl(
            &["apply", "-f", "-"],
            Some(&render_cluster_at(&name, &ns, 1, &from)),
        );
        let kc = workload_kubeconfig(&env, &ns, &name).await;
        let before = wait_for_nodes(&env, &ns, &kc, 1, 1, &format!("v{from}: 1 + 1 Ready")).await;
        eprintln!(
            "apply -> Ready at v{from}: {:.0}s",
            t0.elapsed().as_secs_f64()
        );

        // The control plane first.
        let t1 = Instant::now();
        let version_patch = |v: &str| json!({"spec": {"version": format!("v{v}")}});
        capi_api(
            &env,
            &ns,
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
        )
        .patch(
            &format!("{name}-control-plane"),
            &PatchParams::default(),
            &Patch::Merge(&version_patch(&to)),
        )
        .await
        .unwrap();
        // One Machine of the kind, Ready, replaced (a new node, not an upgrade in place), its
        // kubelet at the new version; and the other Machine Ready.
        let upgraded = |wanted_cp: bool| {
            let (kc, to, env, ns, before) = (&kc, &to, &env, &ns, &before);
            async move {
                let ms = machines(env, ns).await;
                if ms.iter().filter(|m| m.1).count() != 1 || ms.iter().filter(|m| !m.1).count() != 1
                {
                    return None;
                }
                let (ready, versions) = (ready_nodes(kc)?, kubelet_versions(kc)?);
                for (_, cp, node, _) in &ms {
                    let node = node.as_ref()?;
                    if !ready.contains(node) {
                        return None;
                    }
                    if *cp == wanted_cp {
                        let (_, v) = versions.iter().find(|(n, _)| n == node)?;
                        if before.contains(node) || *v != format!("v{to}") {
                            return None;
                        }
                    }
                }
                Some(())
            }
        };
        eventually(NODES_READY, "the control plane at the new version", || {
            upgraded(true)
        })
        .await;
        eprintln!("KCP v{from} -> v{to}: {:.0}s", t1.elapsed().as_secs_f64());

        // Then the workers.
        let t2 = Instant::now();
        capi_api(&env, &ns, "cluster.x-k8s.io", "MachineDeployment")
            .patch(
                &format!("{name}-md-0"),
                &PatchParams::default(),
                &Patch::Merge(
                    &json!({"spec": {"template": {"spec": {"version": format!("v{to}")}}}}),
                ),
            )
            .await
            .unwrap();
        eventually(NODES_READY, "the workers at the new version", || {
            upgraded(false)
        })
        .await;
        eprintln!(
            "MachineDeployment v{from} -> v{to}: {:.0}s",
            t2.elapsed().as_secs_f64()
        );
        // Every node container now runs the new version's image; the old ones are gone.
        for c in cluster_containers(&name, &ns).await {
            if c.name != format!("{name}-lb") {
                assert_eq!(c.image, format!("kindest/node:v{to}"), "{}", c.name);
            }
        }
        kubectl(
            &["delete", "cluster", &name, "-n", &ns, "--wait=false"],
            None,
        );
        eventually(NODES_READY, "the cluster's containers gone", || async {
            cluster_containers(&name, &ns)
                .await
                .is_empty()
                .then_some(())
        })
        .await;
        eprintln!("whole run: {:.0}s", t0.elapsed().as_secs_f64());
    })
    .await;
}
