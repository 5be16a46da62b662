//! DockerMachine: the node container, as far as a fake engine can honestly take it. The
//! bootstrap itself (the commands running in a kind node, the sentinel they leave, the Node's
//! providerID in the workload cluster) needs a real node: tests/controllers.rs and the e2e
//! tests cover it on the plane. Here it is seen to start: the Secret is read and the start is
//! recorded.

use http::Method;

use super::{
    engine::Engine,
    scenario::{self as sc, Scenario, condition, condition_message, finalizers},
};
use crate::{
    api::{DockerCluster, DockerMachine},
    controllers::{docker_cluster, docker_machine, kit::bootstrap_tasks::TaskState},
    docker::{ContainerState, haproxy, labels},
};

/// Cluster `c` with its DockerCluster (and LB, reconciled once), Machine `m` (a control-plane
/// one or not) with its bootstrap Secret, and DockerMachine `m`.
async fn machine_scenario(control_plane: bool, secret: bool) -> (Scenario, DockerMachine) {
    machine_scenario_in(Scenario::docker(), control_plane, secret).await
}

async fn machine_scenario_in(
    s: Scenario,
    control_plane: bool,
    secret: bool,
) -> (Scenario, DockerMachine) {
    s.put(sc::cluster("c", "DockerCluster"));
    let dc = s.put(sc::docker_cluster("c"));
    s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
    // The cache holds the DockerCluster as the reconcile left it (with its endpoint).
    s.sync_cache::<DockerCluster>("c");
    s.put(sc::machine("c", "m", "DockerMachine", control_plane));
    if secret {
        s.put(sc::bootstrap_secret("m"));
    }
    let dm = s.put(sc::docker_machine("c", "m"));
    (s, dm)
}

#[tokio::test]
async fn a_machine_gets_its_node_container_and_starts_bootstrapping_from_its_secret() {
    let (s, dm) = machine_scenario(false, true).await;
    let uid = dm.metadata.uid.clone().unwrap();

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    let node = s.engine.container("c-m").expect("node container c-m");
    assert_eq!(
        s.engine.inspects("c-m"),
        0,
        "a new machine's container is created without a look first"
    );
    for (key, value) in [
        (labels::OWNER_KIND, "DockerMachine"),
        (labels::OWNER_NAME, "m"),
        (labels::OWNER_UID, uid.as_str()),
        (labels::KIND_CLUSTER, "c"),
        (labels::CLUSTER_NAMESPACE, sc::NS),
        (labels::KIND_ROLE, labels::ROLE_WORKER),
        (labels::MANAGED_BY, labels::MANAGED_BY_VALUE),
    ] {
        assert_eq!(
            node.labels.get(key).map(String::as_str),
            Some(value),
            "label {key}"
        );
    }
    let spec = s
        .engine
        .created()
        .into_iter()
        .find(|c| c.name == "c-m")
        .unwrap();
    assert_eq!(
        spec.image, "kindest/node:v1.35.0",
        "the Machine's version picks the image"
    );
    assert_eq!(spec.hostname, "c-m");

    let secret_reads = s.api.requests().into_iter().filter(|r| {
        r.method == Method::GET && r.path == "/api/v1/namespaces/ns/secrets/m-bootstrap"
    });
    assert_eq!(secret_reads.count(), 1, "the bootstrap data is read once");

    let stored = s.json::<DockerMachine>("m");
    assert_eq!(finalizers(&stored), [docker_machine::FINALIZER]);
    let start = node.labels.get(labels::BOOTSTRAP_START);
    assert!(
        start.is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()),
        "the start is on record before the commands run, on the container: {:?}",
        node.labels
    );
    assert!(
        stored["metadata"]["annotations"][crate::api::STARTED_AT].is_null(),
        "and not on the object: {stored}"
    );
    let patches = |path: &str| {
        let requests = s.api.requests();
        requests
            .iter()
            .filter(|r| r.is(&Method::PATCH, path))
            .count()
    };
    // The fake node's bootstrap (its one exec) ends at once, and the pass that started it
    // waited for that end: it provisioned the machine, with one status write.
    assert_eq!(
        patches("/dockermachines/m"),
        2,
        "two writes to the object: its finalizer, then providerID"
    );
    assert_eq!(stored["spec"]["providerID"], "docker:////c-m", "{stored}");
    assert_eq!(patches("/dockermachines/m/status"), 1, "{stored}");
    let provisioned = Some(("True".to_string(), "Provisioned".to_string()));
    assert_eq!(condition(&stored, "ContainerProvisioned"), provisioned);
    assert_eq!(
        condition(&stored, "BootstrapCompleted"),
        Some(("True".to_string(), "Completed".to_string())),
        "{stored}"
    );
}

/// One decision from the Machine's version, upstream's kind mode, reaches both the container
/// and the bootstrap: an image built by kind v0.19 or older (the table's v1.27.1) runs in the
/// host's cgroup namespace and its kubelet keeps its own cgroup args; a current one gets a
/// private namespace and pods under `/kubelet`.
#[tokio::test]
async fn an_old_kind_image_runs_in_the_hosts_cgroup_namespace_with_the_kubelets_own_cgroups() {
    use k8s_openapi::ByteString;
    for (version, current) in [("v1.27.1", false), ("v1.35.0", true)] {
        let s = Scenario::docker();
        s.put(sc::cluster("c", "DockerCluster"));
        let dc = s.put(sc::docker_cluster("c"));
        s.reconcile::<docker_cluster::Clusters>(dc).await.unwrap();
        s.sync_cache::<DockerCluster>("c");
        let mut machine = sc::machine("c", "m", "DockerMachine", false);
        machine.spec.version = Some(version.into());
        s.put(machine);
        let mut secret = sc::bootstrap_secret("m");
        let join = include_bytes!("../../bootstrap/testdata/cabpk-join.yaml");
        secret
            .data
            .get_or_insert_default()
            .insert("value".into(), ByteString(join.to_vec()));
        s.put(secret);
        let dm = s.put(sc::docker_machine("c", "m"));
        s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

        let created = s.engine.created();
        let spec = created.iter().find(|c| c.name == "c-m").unwrap();
        assert_eq!(spec.cgroupns_private, current, "{version}");
        let calls = s.engine.execs.calls();
        let fed: String = calls
            .iter()
            .filter(|c| c.0 == "c-m")
            .filter_map(|c| c.2.as_deref())
            .map(decoded_blocks)
            .collect();
        assert!(fed.contains("kind: JoinConfiguration"), "{version}: {fed}");
        for arg in ["cgroup-root", "runtime-cgroups"] {
            assert_eq!(fed.contains(arg), current, "{version}, {arg}: {fed}");
        }
    }
}

/// What a bootstrap exec fed the node on stdin: its base64 blocks (each ended by a `.` line),
/// decoded.
fn decoded_blocks(stdin: &[u8]) -> String {
    use base64::Engine as _;
    let mut out = String::new();
    let mut block = String::new();
    for line in String::from_utf8_lossy(stdin).lines() {
        if line != "." {
            block.push_str(line);
            continue;
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&block)
            .expect("a base64 block");
        out.push_str(&String::from_utf8_lossy(&bytes));
        block.clear();
    }
    out
}

/// The pass that starts a bootstrap waits for its end, FIRST_WORD at most, running nothing
/// else in the node (at a burst of new machines each exec is a process started in a node), and
/// then says it started; the pass after it reads the node's progress and says it.
#[tokio::test]
async fn the_pass_that_starts_a_bootstrap_waits_for_it_then_says_bootstrapping() {
    let engine = Engine::with_exec_delay(std::time::Duration::from_secs(8));
    let (s, dm) = machine_scenario_in(Scenario::docker_on(engine), false, true).await;
    let uid = dm.metadata.uid.clone().unwrap();
    let in_node = || {
        let calls = s.engine.execs.calls();
        calls
            .into_iter()
            .filter(|c| c.0 == "c-m")
            .collect::<Vec<_>>()
    };
    let t0 = std::time::Instant::now();
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    assert!(
        t0.elapsed() >= docker_machine::bootstrap::FIRST_WORD,
        "it waited for the bootstrap: {:?}",
        t0.elapsed()
    );
    assert!(s.ctx.bootstraps.is_running(&uid));
    assert_eq!(in_node().len(), 1, "the bootstrap's one exec, nothing else");
    let stored = s.json::<DockerMachine>("m");
    let message = condition_message(&stored, "CGroupsReady").unwrap_or_default();
    assert!(
        message.starts_with("Bootstrap running") && !message.contains("at step"),
        "what the task knows, without a look in the node: {stored}"
    );

    let dm = s.get::<DockerMachine>("m").unwrap();
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    let calls = in_node();
    assert_eq!(calls.len(), 2, "the progress file, read by the pass after");
    assert_eq!(
        calls[1].1.first().map(String::as_str),
        Some("cat"),
        "{:?}",
        calls[1].1
    );
    let stored = s.json::<DockerMachine>("m");
    assert_eq!(
        condition(&stored, "CGroupsReady").map(|c| c.1),
        Some("Bootstrapping".to_string()),
        "{stored}"
    );
    s.ctx.bootstraps.cancel(&uid);
}

/// A node container removed behind the manager's back after its bootstrap ended, before any
/// pass wrote that end (a run longer than the wait of the pass that started it): the new
/// container gets a bootstrap of its own; the ended one does not pass for it.
#[tokio::test]
async fn a_container_made_again_is_not_reported_bootstrapped_by_the_run_of_the_one_before() {
    use crate::docker::ContainerRuntime;
    let engine = Engine::with_exec_delay(std::time::Duration::from_secs(8));
    let (s, dm) = machine_scenario_in(Scenario::docker_on(engine), false, true).await;
    let uid = dm.metadata.uid.clone().unwrap();
    let bootstraps = || {
        let calls = s.engine.execs.calls();
        let runs = calls.iter().filter(|c| c.0 == "c-m" && c.1[0] == "/bin/sh");
        runs.count()
    };
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    let ended = || matches!(s.ctx.bootstraps.poll(&uid), TaskState::Finished(_));
    assert!(!ended(), "the pass stopped waiting before the run ended");
    settle_for(std::time::Duration::from_secs(8), ended).await;
    assert!(ended(), "the fake node's bootstrap ended");
    assert_eq!(bootstraps(), 1);
    let first = start_label(&s);
    s.engine.remove("c-m").await.unwrap();

    let dm = s.get::<DockerMachine>("m").unwrap();
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    assert!(s.engine.container("c-m").is_some(), "made again");
    assert_ne!(start_label(&s), first, "for a start of its own");
    settle(|| bootstraps() == 2).await;
    assert_eq!(bootstraps(), 2, "one bootstrap run per container");
    let stored = s.json::<DockerMachine>("m");
    assert!(
        stored["spec"]["providerID"].is_null(),
        "not provisioned: {stored}"
    );
    assert_ne!(
        condition(&stored, "BootstrapCompleted").map(|c| c.0),
        Some("True".to_string()),
        "{stored}"
    );
    s.ctx.bootstraps.cancel(&uid);
}

/// A bootstrap failed (its result written), then the node container went (removed by hand to
/// retry, or by whatever broke it): the container made again is a new node, where nothing has
/// run, and gets one run of its own; the machine is provisioned when that run succeeds.
#[tokio::test]
async fn a_node_made_again_after_a_failed_bootstrap_is_bootstrapped() {
    use crate::docker::ContainerRuntime;
    let engine = Engine::with_exec_delay(std::time::Duration::from_millis(300));
    let (s, dm) = machine_scenario_in(Scenario::docker_on(engine), false, true).await;
    let uid = dm.metadata.uid.clone().unwrap();
    let reason = |ty: &str| condition(&s.json::<DockerMachine>("m"), ty).map(|c| c.1);
    let finished = || matches!(s.ctx.bootstraps.poll(&uid), TaskState::Finished(_));
    let pass = || async {
        let dm = s.get::<DockerMachine>("m").unwrap();
        s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    };
    let runs = || {
        let calls = s.engine.execs.calls();
        let runs = calls.iter().filter(|c| c.0 == "c-m" && c.1[0] == "/bin/sh");
        runs.count()
    };
    // The first node stops under its run (and comes back, as the restart policy brings it):
    // the run fails, and the failure is written.
    let stop = async {
        settle(|| runs() == 1).await;
        s.engine.set_state("c-m", ContainerState::Exited);
        settle_for(std::time::Duration::from_secs(3), finished).await;
        s.engine.set_state("c-m", ContainerState::Running);
    };
    tokio::join!(pass(), stop);
    pass().await;
    assert_eq!(
        reason("CGroupsReady").as_deref(),
        Some("BootstrapFailed"),
        "{}",
        s.json::<DockerMachine>("m")
    );

    s.engine.remove("c-m").await.unwrap();
    // The new node's run leaves the sentinel, as a real one's script would.
    let sentinel = async {
        settle(|| s.engine.container("c-m").is_some()).await;
        s.engine
            .put_file("c-m", crate::bootstrap::SENTINEL_PATH, "success\n");
    };
    tokio::join!(pass(), sentinel);
    assert!(s.engine.container("c-m").is_some(), "made again");
    settle_for(std::time::Duration::from_secs(3), finished).await;
    assert_eq!(runs(), 2, "a run of its own for the new node");
    pass().await;
    let stored = s.json::<DockerMachine>("m");
    assert_eq!(
        condition(&stored, "BootstrapCompleted")
            .map(|c| c.0)
            .as_deref(),
        Some("True"),
        "{stored}"
    );
    assert_eq!(stored["spec"]["providerID"], "docker:////c-m", "{stored}");
}

/// Waits (at most `limit`) until `done`.
async fn settle_for(limit: std::time::Duration, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() && start.elapsed() < limit {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Waits (at most a second) until `done`: a task the reconcile spawned gets to its exec.
async fn settle(done: impl Fn() -> bool) {
    settle_for(std::time::Duration::from_secs(1), done).await;
}

/// A machine whose bootstrap an earlier manager process started (its start and claim token on
/// record, on the container it created) and that no task of this process runs: the first
/// reconcile started it, then the process "stopped". `claimed`: its run got as far as claiming
/// the node's commands. `old`: the start was made by a manager that did not claim (a start on
/// the object, with no claim token, and none on the container).
async fn started_by_a_stopped_process(claimed: bool, old: bool) -> (Scenario, DockerMachine) {
    let (s, dm) = machine_scenario(false, true).await;
    let uid = dm.metadata.uid.clone().unwrap();
    // The process stops while the run is in its one exec (the pass said "Bootstrapping" once
    // its wait was over): the task is gone, and the node never answered.
    s.engine.hold_bootstrap_runs(true);
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    s.ctx.bootstraps.cancel(&uid);
    s.engine.hold_bootstrap_runs(false);
    if claimed {
        s.engine
            .put_file("c-m", crate::bootstrap::CLAIM_PATH, "the earlier run\n");
    }
    let mut dm = s.get::<DockerMachine>("m").unwrap();
    if old {
        s.engine.remove_label("c-m", labels::BOOTSTRAP_START);
        dm.metadata.annotations.get_or_insert_default().insert(
            crate::api::STARTED_AT.into(),
            chrono::Utc::now().to_rfc3339(),
        );
        dm = s.update(dm);
    }
    (s, dm)
}

fn start_label(s: &Scenario) -> Option<String> {
    s.engine
        .container("c-m")?
        .labels
        .get(labels::BOOTSTRAP_START)
        .cloned()
}

fn annotation(dm: &DockerMachine, key: &str) -> Option<String> {
    dm.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn a_recorded_start_whose_run_never_claimed_the_node_is_made_again() {
    let (s, dm) = started_by_a_stopped_process(false, false).await;
    let uid = dm.metadata.uid.clone().unwrap();
    let first = start_label(&s).expect("a start on record, on the container");

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    let stored = s.get::<DockerMachine>("m").unwrap();
    let again = annotation(&stored, crate::api::STARTED_AT).expect("a new start, on the object");
    assert!(again > first, "{again} is later than {first}");
    assert_eq!(
        annotation(&stored, crate::api::BOOTSTRAP_CLAIM),
        Some(again)
    );
    assert_ne!(
        s.ctx.bootstraps.poll(&uid),
        TaskState::NotStarted,
        "the bootstrap ran again: none of its commands had run"
    );
    let looked = s
        .engine
        .execs
        .calls()
        .into_iter()
        .any(|(c, argv, _)| c == "c-m" && argv == ["test", "-f", crate::bootstrap::CLAIM_PATH]);
    assert!(looked, "the node's claim was looked at first");
    s.ctx.bootstraps.cancel(&uid);
}

#[tokio::test]
async fn a_recorded_start_whose_run_claimed_the_node_is_waited_for_never_run_again() {
    for (claimed, old) in [(true, false), (false, true)] {
        let (s, dm) = started_by_a_stopped_process(claimed, old).await;
        let uid = dm.metadata.uid.clone().unwrap();
        let first = (annotation(&dm, crate::api::STARTED_AT), start_label(&s));

        s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

        let stored = s.get::<DockerMachine>("m").unwrap();
        let now = (annotation(&stored, crate::api::STARTED_AT), start_label(&s));
        assert_eq!(now, first, "no new start on record");
        assert_eq!(
            s.ctx.bootstraps.poll(&uid),
            TaskState::NotStarted,
            "claimed {claimed}, by an older manager {old}: not started again"
        );
        let json = s.json::<DockerMachine>("m");
        assert_eq!(
            condition(&json, "CGroupsReady").map(|c| c.1),
            Some("Bootstrapping".into())
        );
        let message = condition_message(&json, "CGroupsReady").unwrap();
        assert!(message.contains("it is not re-run"), "{message}");
    }
}

#[tokio::test]
async fn a_start_on_the_object_older_than_the_container_concerns_an_earlier_container() {
    // An older manager's unclaimed start on the object, from before the container: were it the
    // current one, this bootstrap would be waited for; the container's own (claimed, with no
    // claim in the node) says that none of its commands ran.
    let (s, dm) = started_by_a_stopped_process(false, false).await;
    let uid = dm.metadata.uid.clone().unwrap();
    let mut dm = dm;
    dm.metadata
        .annotations
        .get_or_insert_default()
        .insert(crate::api::STARTED_AT.into(), "2026-01-01T00:00:00Z".into());
    let dm = s.update(dm);

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    assert_ne!(
        s.ctx.bootstraps.poll(&uid),
        TaskState::NotStarted,
        "started again"
    );
    s.ctx.bootstraps.cancel(&uid);
}

#[tokio::test]
async fn a_missing_bootstrap_secret_blocks_with_a_reason() {
    let (s, dm) = machine_scenario(false, false).await;

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    let stored = s.json::<DockerMachine>("m");
    assert_eq!(
        condition(&stored, "BootstrapCompleted"),
        Some(("False".into(), "BootstrapDataNotFound".into()))
    );
    assert!(stored["metadata"]["annotations"][crate::api::STARTED_AT].is_null());
}

#[tokio::test]
async fn a_control_plane_machine_becomes_a_load_balancer_backend_and_leaves_it_on_delete() {
    let (s, dm) = machine_scenario(true, true).await;
    let uid = dm.metadata.uid.clone().unwrap();

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    s.ctx.bootstraps.cancel(&uid);

    let ip = s.engine.container("c-m").unwrap().ipv4.unwrap();
    let cfg = s.engine.file("c-lb", haproxy::CONFIG_PATH).unwrap();
    assert!(cfg.contains(&format!("server c-m {ip}:6443")), "{cfg}");
    let stored = s.json::<DockerMachine>("m");
    assert_eq!(stored["status"]["loadBalancerConfigured"], true);
    assert_eq!(
        s.engine.container("c-m").unwrap().labels[labels::KIND_ROLE],
        labels::ROLE_CONTROL_PLANE
    );

    let dm = s.delete::<DockerMachine>("m");
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    assert!(
        s.engine.container("c-m").is_none(),
        "node container removed"
    );
    let cfg = s.engine.file("c-lb", haproxy::CONFIG_PATH).unwrap();
    assert!(!cfg.contains("c-m"), "no longer a backend: {cfg}");
    assert!(
        s.get::<DockerMachine>("m").is_none(),
        "finalizer removed: the object is gone"
    );
}

#[tokio::test]
async fn deleting_a_worker_machine_removes_its_container_then_its_finalizer() {
    let (s, dm) = machine_scenario(false, true).await;
    let uid = dm.metadata.uid.clone().unwrap();
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    assert!(s.engine.container("c-m").is_some());

    let dm = s.delete::<DockerMachine>("m");
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    assert_eq!(s.engine.removed(), ["c-m"]);
    assert!(s.get::<DockerMachine>("m").is_none());
    assert!(
        !s.ctx.bootstraps.is_running(&uid),
        "its bootstrap is cancelled"
    );
}

#[tokio::test]
async fn a_machine_waits_for_its_clusters_infrastructure_without_a_container() {
    let s = Scenario::docker();
    let mut cluster = sc::cluster("c", "DockerCluster");
    cluster.status = None;
    s.put(cluster);
    s.put(sc::machine("c", "m", "DockerMachine", false));
    s.put(sc::bootstrap_secret("m"));
    let dm = s.put(sc::docker_machine("c", "m"));

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    let stored = s.json::<DockerMachine>("m");
    assert_eq!(
        condition(&stored, "ContainerProvisioned"),
        Some((
            "False".into(),
            "WaitingForClusterInfrastructureReady".into()
        ))
    );
    assert_eq!(finalizers(&stored), [docker_machine::FINALIZER]);
    assert!(s.engine.created().is_empty());
}

#[tokio::test]
async fn a_node_name_taken_by_someone_else_blocks_as_a_name_conflict() {
    let (s, dm) = machine_scenario(false, true).await;
    let theirs = std::collections::BTreeMap::from([("app".to_string(), "other".to_string())]);
    s.engine.add("c-m", theirs);

    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    let stored = s.json::<DockerMachine>("m");
    assert_eq!(
        condition(&stored, "ContainerProvisioned"),
        Some(("False".into(), "ContainerNameConflict".into()))
    );
    assert!(
        s.engine.removed().is_empty(),
        "someone else's container is left alone"
    );
    let secret_reads = s
        .api
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/secrets/m-bootstrap"));
    assert_eq!(
        secret_reads.count(),
        0,
        "no bootstrap data read for a container it cannot use"
    );
}

#[tokio::test]
async fn a_provisioned_machine_whose_container_stopped_gets_it_started_not_recreated() {
    let (s, dm) = machine_scenario(false, true).await;
    let uid = dm.metadata.uid.clone().unwrap();
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();
    s.ctx.bootstraps.cancel(&uid);
    // Provisioned (what the plane tests reach through a real bootstrap): the providerID is set.
    let mut dm = s.get::<DockerMachine>("m").unwrap();
    dm.spec.provider_id = Some("docker:////c-m".into());
    s.update(dm);
    s.engine
        .set_state("c-m", crate::docker::ContainerState::Exited);
    let id = s.engine.container("c-m").unwrap().id;

    let dm = s.get::<DockerMachine>("m").unwrap();
    s.reconcile::<docker_machine::Machines>(dm).await.unwrap();

    let node = s.engine.container("c-m").unwrap();
    assert!(
        node.is_running() && node.id == id,
        "the same container, running again"
    );
    let stored = s.json::<DockerMachine>("m");
    let provisioned = Some(("True".to_string(), "Provisioned".to_string()));
    assert_eq!(condition(&stored, "ContainerProvisioned"), provisioned);
    assert_eq!(stored["status"]["initialization"]["provisioned"], true);
    let addresses = stored["status"]["addresses"].to_string();
    assert!(addresses.contains(&node.ipv4.unwrap()), "{addresses}");
}
