//! Deletion paths, each asserting what a user sees and, where it matters, the order of things
//! (contract.md §6 items 9 and 25): the finalizer comes before any container; a control-plane
//! node leaves the load balancer before its container goes; with Docker down a deleting object
//! keeps its finalizer and says why; deletion during a bootstrap, and after the owner Machine
//! is gone, still removes the container.
mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capd::{
    api::{DockerCluster, DockerMachine},
    docker::ContainerRuntime,
};
use common::{docker_proxy::DockerProxy, *};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

const LONG: Duration = Duration::from_secs(90);
const BOOTSTRAP_OK: &str = include_str!("fixtures/bootstrap-ok.yaml");
const DC_FINALIZER: &str = "dockercluster.infrastructure.cluster.x-k8s.io";
const DM_FINALIZER: &str = "dockermachine.infrastructure.cluster.x-k8s.io";

fn node() -> serde_json::Value {
    json!({"customImage": NODE_IMAGE})
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `(time in ns, container name, action)` of the engine's events for `containers` since `since`.
fn docker_events(since: f64, containers: &[&str]) -> Vec<(u128, String, String)> {
    let mut args = vec![
        "events".to_string(),
        "--since".into(),
        format!("{since:.3}"),
        "--until".into(),
        format!("{:.3}", unix_now()),
        "--format".into(),
        "{{.TimeNano}} {{.Actor.Attributes.name}} {{.Action}}".into(),
    ];
    for c in containers {
        args.extend(["--filter".into(), format!("container={c}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    docker_cli_output(&args)
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            Some((
                parts.next()?.parse().ok()?,
                parts.next()?.to_string(),
                parts.next()?.to_string(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_first_and_kept_while_docker_is_down() {
    let mut env = TestEnv::new("delq").await;
    let proxy = DockerProxy::start(&env.id);
    env.start_manager(&[], Some(&proxy.host()));
    // Everything inside run: the cleanup runs even when a wait below panics.
    env.run(|env| async move {
        env.manager_ready().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        let lb = format!("{name}-lb");
        let cp = format!("{name}-cp");

        // Item 9: with the engine cut off, the finalizer still comes (it needs only the API
        // server), and no container exists: it is there before any Docker object could be.
        proxy.down();
        let cluster = env.create_cluster(&ns, &name, false).await;
        env.create_docker_cluster(&ns, &cluster, json!({})).await;
        let dc = eventually(LONG, "finalizer while Docker is down", || async {
            env.docker_cluster(&ns, &name)
                .await
                .filter(|dc| dc.finalizers().iter().any(|f| f == DC_FINALIZER))
        })
        .await;
        assert!(!dc.cond_true("Ready"));
        assert!(inspect(&docker().await, &lb).await.is_none());
        proxy.up();

        let docker = docker().await;
        eventually(LONG, "DockerCluster Ready", || async {
            env.docker_cluster(&ns, &name)
                .await
                .filter(|dc| dc.cond_true("Ready"))
        })
        .await;
        env.mark_infrastructure_provisioned(&ns, &name).await;
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        let machine_created = unix_now();
        env.create_machine(&ns, &name, &cp, true, Some("boot"), node())
            .await;
        let dm = eventually(LONG, "control-plane machine provisioned", || async {
            env.docker_machine(&ns, &cp).await.filter(fully_provisioned)
        })
        .await;
        assert!(dm.finalizers().iter().any(|f| f == DM_FINALIZER));
        eventually(LONG, "CP backend in haproxy.cfg", || async {
            lb_config(&docker, &lb)
                .await
                .contains(&format!("server {cp} "))
                .then_some(())
        })
        .await;

        // The reload that added the node is over (its event is seen), so any LB reload after
        // this point belongs to the deletion.
        eventually(LONG, "the LB reload that added the node", || async {
            docker_events(machine_created, &[&lb])
                .iter()
                .any(|(_, _, a)| a == "kill")
                .then_some(())
        })
        .await;

        // Item 25 with Docker down: deleting, the machine keeps its finalizer and container and
        // says so with Ready=False, reason Deleting, for as long as the engine is away.
        proxy.down();
        let deleting_since = unix_now();
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        dms.delete(&cp, &DeleteParams::default()).await.unwrap();
        let dm = eventually(LONG, "Ready=False, Deleting", || async {
            env.docker_machine(&ns, &cp)
                .await
                .filter(|dm| dm.has_reason("Ready", "Deleting"))
        })
        .await;
        assert!(dm.metadata.deletion_timestamp.is_some());
        never(
            Duration::from_secs(5),
            "the DockerMachine let go while Docker is down",
            || async {
                env.docker_machine(&ns, &cp)
                    .await
                    .is_none_or(|dm| !dm.finalizers().iter().any(|f| f == DM_FINALIZER))
            },
        )
        .await;
        assert!(
            inspect(&docker, &cp).await.is_some(),
            "the container waits too"
        );

        // Back: the node leaves the load balancer (a reload of the LB) before its container is
        // destroyed, then the object goes.
        proxy.up();
        eventually(LONG, "DockerMachine gone", || async {
            env.docker_machine(&ns, &cp).await.is_none().then_some(())
        })
        .await;
        assert!(inspect(&docker, &cp).await.is_none());
        let events = docker_events(deleting_since, &[&lb, &cp]);
        let destroyed = events
            .iter()
            .find(|(_, n, a)| *n == cp && a == "destroy")
            .unwrap_or_else(|| panic!("no destroy event for {cp}: {events:?}"))
            .0;
        assert!(
            events
                .iter()
                .any(|(t, n, a)| *n == lb && a == "kill" && *t < destroyed),
            "the LB was reloaded without {cp} before {cp} was destroyed: {events:?}"
        );
        assert!(
            !lb_config(&docker, &lb)
                .await
                .contains(&format!("server {cp} "))
        );

        // The same for the cluster: Docker down, the DockerCluster waits with its finalizer.
        proxy.down();
        let dcs: Api<DockerCluster> = Api::namespaced(env.client.clone(), &ns);
        dcs.delete(&name, &DeleteParams::default()).await.unwrap();
        eventually(LONG, "DockerCluster Ready=False, Deleting", || async {
            env.docker_cluster(&ns, &name)
                .await
                .filter(|dc| dc.has_reason("Ready", "Deleting"))
        })
        .await;
        never(
            Duration::from_secs(5),
            "the DockerCluster let go while Docker is down",
            || async {
                env.docker_cluster(&ns, &name)
                    .await
                    .is_none_or(|dc| !dc.finalizers().iter().any(|f| f == DC_FINALIZER))
            },
        )
        .await;
        assert!(inspect(&docker, &lb).await.is_some());
        proxy.up();
        eventually(LONG, "DockerCluster gone with its LB", || async {
            (env.docker_cluster(&ns, &name).await.is_none()
                && inspect(&docker, &lb).await.is_none())
            .then_some(())
        })
        .await;
        drop(proxy);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_mid_bootstrap_and_after_the_machine_is_gone() {
    let mut env = TestEnv::new("delb").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);

        // A bootstrap that would run for 10 minutes: deletion does not wait for it.
        let slow = "#cloud-config\nruncmd:\n- sleep 600\n";
        env.create_secret(&ns, "slow", Some(slow), None).await;
        let slow_dm = format!("{name}-slow");
        env.create_machine(&ns, &name, &slow_dm, false, Some("slow"), node())
            .await;
        eventually(LONG, "bootstrap running", || async {
            env.docker_machine(&ns, &slow_dm).await.filter(|dm| {
                dm.cond("BootstrapCompleted")
                    .is_some_and(|c| c.reason == "Bootstrapping" && c.message.contains("sleep"))
            })
        })
        .await;
        let started = std::time::Instant::now();
        dms.delete(&slow_dm, &DeleteParams::default())
            .await
            .unwrap();
        eventually(Duration::from_secs(30), "deleted mid-bootstrap", || async {
            (env.docker_machine(&ns, &slow_dm).await.is_none()
                && inspect(&docker, &slow_dm).await.is_none())
            .then_some(())
        })
        .await;
        println!("deleted mid-bootstrap in {:?}", started.elapsed());

        // The owner Machine is gone first (an owner deleted by hand, or by a garbage collector
        // that raced): deleting the DockerMachine still removes its container.
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        let w = format!("{name}-w");
        env.create_machine(&ns, &name, &w, false, Some("boot"), node())
            .await;
        eventually(LONG, "worker provisioned", || async {
            env.docker_machine(&ns, &w).await.filter(fully_provisioned)
        })
        .await;
        let machines: Api<kube::api::DynamicObject> =
            Api::namespaced_with(env.client.clone(), &ns, &capi("Machine"));
        machines.delete(&w, &DeleteParams::default()).await.unwrap();
        eventually(LONG, "Machine gone", || async {
            machines.get_opt(&w).await.unwrap().is_none().then_some(())
        })
        .await;
        // The garbage collector may have deleted it already (the Machine was its owner): the
        // outcome to check is the same either way.
        match dms.delete(&w, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("deleting the DockerMachine: {e}"),
        }
        eventually(
            LONG,
            "ownerless DockerMachine deleted with its container",
            || async {
                (env.docker_machine(&ns, &w).await.is_none()
                    && inspect(&docker, &w).await.is_none())
                .then_some(())
            },
        )
        .await;

        // Never owned (contract item 8): no finalizer, so deletion is immediate, and nothing
        // was created for it.
        let orphan: DockerMachine = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
            "metadata": {"name": "orphan", "labels": {"cluster.x-k8s.io/watch-filter": env.id}},
            "spec": node()
        }))
        .unwrap();
        dms.create(&Default::default(), &orphan).await.unwrap();
        never(
            Duration::from_secs(3),
            "a finalizer on an ownerless DockerMachine",
            || async {
                env.docker_machine(&ns, "orphan")
                    .await
                    .is_some_and(|dm| !dm.finalizers().is_empty())
            },
        )
        .await;
        dms.delete("orphan", &DeleteParams::default())
            .await
            .unwrap();
        eventually(Duration::from_secs(10), "orphan gone", || async {
            env.docker_machine(&ns, "orphan")
                .await
                .is_none()
                .then_some(())
        })
        .await;

        // Deleted by `clusterctl move` from the source management cluster: the container now
        // belongs to the target's copy of the object, so it stays, even with the Cluster not
        // (or no longer) paused. clusterctl annotates, deletes, then strips the finalizers.
        let moved = format!("{name}-moved");
        env.create_machine(&ns, &name, &moved, false, Some("boot"), node())
            .await;
        eventually(LONG, "to-be-moved worker provisioned", || async {
            env.docker_machine(&ns, &moved).await.filter(fully_provisioned)
        })
        .await;
        let annotate = json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}});
        dms.patch(&moved, &PatchParams::default(), &Patch::Merge(&annotate))
            .await
            .unwrap();
        dms.delete(&moved, &DeleteParams::default()).await.unwrap();
        never(
            Duration::from_secs(5),
            "the moved machine's container removed",
            || async { inspect(&docker, &moved).await.is_none() },
        )
        .await;
        let unfinalize = json!({"metadata": {"finalizers": []}});
        dms.patch(&moved, &PatchParams::default(), &Patch::Merge(&unfinalize))
            .await
            .unwrap();
        eventually(Duration::from_secs(10), "moved DockerMachine gone", || async {
            env.docker_machine(&ns, &moved).await.is_none().then_some(())
        })
        .await;
        assert!(
            inspect(&docker, &moved).await.is_some(),
            "the moved machine's container stays"
        );
        docker.remove(&moved).await.unwrap();
    })
    .await;
}

/// The container is found by the owner-UID label, not by a name recomputed from inputs a user
/// can change: after the ownerRef is swapped to another Machine and the cluster-name label is
/// changed, deleting the DockerMachine still removes its container and lets the object go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_owner_or_cluster_label_does_not_leak_the_container() {
    let mut env = TestEnv::new("delc").await;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let docker = docker().await;
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;
        let dms: Api<DockerMachine> = Api::namespaced(env.client.clone(), &ns);
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None)
            .await;
        let w = format!("{name}-w");
        env.create_machine(&ns, &name, &w, false, Some("boot"), node())
            .await;
        let provisioned = eventually(LONG, "worker provisioned", || async {
            env.docker_machine(&ns, &w).await.filter(fully_provisioned)
        })
        .await;
        let container = provisioned
            .spec
            .provider_id
            .as_deref()
            .and_then(|p| p.strip_prefix("docker:////"))
            .unwrap()
            .to_string();
        assert!(inspect(&docker, &container).await.is_some());

        // Another Machine (with no data yet, so nothing is provisioned for it) takes the
        // ownerRef; the cluster-name label points elsewhere.
        let other = format!("{name}-o");
        let (other_machine, _) = env
            .create_machine(&ns, &name, &other, false, None, node())
            .await;
        let swap = json!({"metadata": {
            "ownerReferences": [owner_ref(&other_machine, "Machine")],
            "labels": {"cluster.x-k8s.io/cluster-name": "elsewhere"}
        }});
        dms.patch(&w, &PatchParams::default(), &Patch::Merge(&swap))
            .await
            .unwrap();
        dms.delete(&w, &DeleteParams::default()).await.unwrap();
        eventually(LONG, "DockerMachine and its container gone", || async {
            (env.docker_machine(&ns, &w).await.is_none()
                && inspect(&docker, &container).await.is_none())
            .then_some(())
        })
        .await;
    })
    .await;
}
