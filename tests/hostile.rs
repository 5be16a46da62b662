//! Hostile and careless inputs, all at once, against one manager process (issue 25's bar): its
//! memory stays within 64 MiB of its baseline, no object is reconciled or restarted faster than
//! its backoff allows, and no secret reaches its log, a condition or an Event.
//!
//! Every Secret below carries [`CANARY`]; the checks at the end look for it everywhere a user or
//! an operator can read. Each case also asserts its own observable outcome (a condition's reason,
//! a container that is or is not there), so a case that stops exercising its path fails.
//! Prerequisite: `hack/plane.sh up` and the local images (the README's test command does both).
mod common;

use std::{
    collections::BTreeMap,
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use base64::Engine as _;
use capd::api::{DockerCluster, DockerMachine, conditions::ConditionStatus};
use common::*;
use k8s_openapi::api::{core::v1::ConfigMap, events::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, PostParams},
};
use serde_json::json;

const LONG: Duration = Duration::from_secs(120);
/// In every Secret of this test: it must never come out anywhere.
const CANARY: &str = "canary-5e1f0c9a77d4";
/// The bound the issue sets: the manager's RSS above its idle baseline.
const RSS_BOUND_KIB: u64 = 64 * 1024;

fn node_spec() -> serde_json::Value {
    json!({"customImage": NODE_IMAGE})
}

/// The light node with a command that is not in it: every start of it fails.
const NOSTART_IMAGE: &str = "capd-rs-test/nostart:1";

/// Make [`NOSTART_IMAGE`] from the light node, once (a commit of an unstarted container).
fn ensure_nostart_image(run_label: &str, id: &str) {
    if !docker_lines(&["images", "-q", NOSTART_IMAGE]).is_empty() {
        return;
    }
    let source = format!("{id}-nostart-source");
    let _ = docker_cli_output(&[
        "create", "--name", &source, "--label", run_label, NODE_IMAGE,
    ]);
    let _ = docker_cli_output(&[
        "commit",
        "--change",
        r#"CMD ["/capd-rs-test/no-such-command"]"#,
        "--change",
        "LABEL capd-rs.test/image=nostart",
        &source,
        NOSTART_IMAGE,
    ]);
    let _ = docker_cli_output(&["rm", &source]);
}

/// The manager's resident set, from /proc (KiB).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn gzip_b64(data: &[u8]) -> String {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    base64::engine::general_purpose::STANDARD.encode(e.finish().unwrap())
}

/// The end of a bootstrap that succeeds in the light node image.
const SENTINEL: &str = "- [sh, -c, 'mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete']\n";

/// Bootstrap data for each machine case: (machine, cloud-config or Ignition, format).
fn bootstrap_cases() -> Vec<(&'static str, String, Option<&'static str>)> {
    // Billion laughs: ten levels of nine aliases, a few hundred bytes of text.
    let mut laughs = format!("#cloud-config\nx0: &a0 [\"{CANARY}\"]\n");
    for i in 1..10 {
        let p = i - 1;
        laughs.push_str(&format!(
            "x{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"
        ));
    }
    laughs.push_str("runcmd: [*a9]\n");
    // Twelve gzip files of 48 MiB of zeros each: each under the old per-file limit, 576 MiB in all.
    let zeros = gzip_b64(&vec![0u8; 48 << 20]);
    let mut bomb = String::from("#cloud-config\nwrite_files:\n");
    for i in 0..12 {
        bomb.push_str(&format!(
            "- path: /tmp/zero{i}\n  encoding: gzip+base64\n  content: {zeros}\n"
        ));
    }
    // Deep nesting: a stack overflow in a parser would kill the manager.
    let deep = format!(
        "#cloud-config\nruncmd: {}{}\n",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    // Ignition whose files decode to far more than the budget.
    let ign_files: Vec<_> = (0..12)
        .map(|i| json!({"path": format!("/tmp/ign{i}"), "contents": {"compression": "gzip", "source": format!("data:;base64,{zeros}")}}))
        .collect();
    let ignition =
        json!({"ignition": {"version": "3.4.0"}, "storage": {"files": ign_files}}).to_string();
    vec![
        ("m-laughs", laughs, None),
        ("m-gzip", bomb, None),
        ("m-deep", deep, None),
        ("m-ignition", ignition, Some("ignition")),
        // 12 MB of short lines, then a failure: the output is bounded, not kept whole.
        (
            "m-noisy",
            format!("#cloud-config\nruncmd:\n- 'yes {CANARY} | head -c 12000000; exit 7'\n"),
            None,
        ),
        // The VM idiom: the bootstrap stops its own machine.
        (
            "m-reboot",
            format!(
                "#cloud-config\nruncmd:\n- 'echo {CANARY} >/dev/null; kill -TERM 1; sleep 30'\n{SENTINEL}"
            ),
            None,
        ),
        // A secret file written where it cannot be: the failure names the path, not the content.
        (
            "m-secretfile",
            format!(
                "#cloud-config\nwrite_files:\n- path: /proc/capd-rs/nope\n  content: {CANARY}\n"
            ),
            None,
        ),
        // A program name of 5000 characters: the Event is cut to the API's limit, not dropped.
        (
            "m-longname",
            format!(
                "#cloud-config\nruncmd:\n- [{}, {CANARY}]\n",
                "p".repeat(5000)
            ),
            None,
        ),
    ]
}

/// A kubeconfig whose user runs a program in whoever loads it.
fn exec_kubeconfig(server: &str, marker: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch {marker}; echo {CANARY}\"]\n      interactiveMode: Never\n"
    )
}

/// A kubeconfig that sends the manager's own ServiceAccount token to a server of its choice.
fn token_file_kubeconfig() -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token, username: {CANARY}}}\n"
    )
}

/// A workload-kubeconfig Secret as CAPI names it.
async fn kubeconfig_secret(env: &TestEnvRef, ns: &str, cluster: &str, value: &str) {
    let obj = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{cluster}-kubeconfig"), "namespace": ns,
                     "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "type": "cluster.x-k8s.io/secret", "stringData": {"value": value}});
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .expect("create kubeconfig Secret");
}

/// Bootstrap data that passes, marks the container as a Kubernetes node (so the manager goes on
/// to the workload cluster), and holds the canary.
fn kind_marker_bootstrap() -> String {
    format!(
        "#cloud-config\nwrite_files:\n- path: /kind/version\n  content: v1.35.0\n- path: /etc/capd-test/token\n  content: {CANARY}\nruncmd:\n{SENTINEL}"
    )
}

/// Bootstrap data that passes and leaves a node whose PID 1 dies at every later start (its idle
/// loop's `sleep` now stops PID 1; the running one is renamed, not overwritten: "text file busy").
fn dies_on_restart_bootstrap() -> String {
    format!(
        "#cloud-config\nwrite_files:\n- path: /etc/capd-test/token\n  content: {CANARY}\nruncmd:\n- 'mv /bin/sleep /bin/sleep.real && printf \"#!/bin/sh\\nkill -TERM 1\\n\" > /bin/sleep && chmod +x /bin/sleep'\n{SENTINEL}"
    )
}

async fn reason_of(env: &TestEnvRef, ns: &str, m: &str, type_: &str) -> Option<(String, String)> {
    let dm = env.docker_machine(ns, m).await?;
    let c = dm.cond(type_)?;
    (c.status == ConditionStatus::False).then(|| (c.reason.clone(), c.message.clone()))
}

async fn wait_reason(env: &TestEnvRef, ns: &str, m: &str, type_: &str, reasons: &[&str]) -> String {
    let (_, message) = eventually(
        LONG,
        &format!("{m}: {type_} reason one of {reasons:?}"),
        || async {
            reason_of(env, ns, m, type_)
                .await
                .filter(|(r, _)| reasons.contains(&r.as_str()))
        },
    )
    .await;
    message
}

/// Container starts (Docker `start` events) per container name since `since`.
async fn starts_since(starts: &ContainerEvents, since: i64) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for name in starts.between(since, unix_now()).await {
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_are_bounded_reported_and_kept_secret() {
    let mut env = TestEnv::new("hostil").await;
    env.start_manager(&[], None);
    let pid = env.manager.as_ref().unwrap().child.id();
    env.run(move |env| async move {
        env.manager_ready().await;
        let docker = docker().await;
        let ns = env.namespace("a").await;
        // The idle baseline: caches synced, nothing to do.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let baseline = rss_kib(pid);
        assert!(baseline > 0, "manager RSS readable");
        let peak = Arc::new(AtomicU64::new(baseline));
        let sampler = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let label = format!("{TEST_LABEL}={}", env.id);
        let starts_seen = ContainerEvents::record(&format!("label={label}"), "start");
        // A failed start leaves no `start` event: its container is created and removed.
        let creates_seen = ContainerEvents::record(&format!("label={label}"), "create");
        ensure_nostart_image(&label, &env.id);
        let started = unix_now();

        // Cluster a: the machines with bootstrap data of every hostile shape, and a kubeconfig
        // Secret whose user is a program.
        let a = format!("{}-a", env.id);
        let dc_a = env.provisioned_cluster(&ns, &a).await;
        let endpoint = dc_a.spec.control_plane_endpoint.clone().unwrap();
        let server = format!("https://{}:{}", endpoint.host.unwrap(), endpoint.port.unwrap());
        let pwned = std::env::temp_dir().join(format!("capd-rs-pwned-{}", env.id));
        let _ = std::fs::remove_file(&pwned);
        kubeconfig_secret(&env, &ns, &a, &exec_kubeconfig(&server, &pwned.display().to_string())).await;
        let cases = bootstrap_cases();
        for (m, data, format) in &cases {
            env.create_secret(&ns, m, Some(data), *format).await;
            env.create_machine(&ns, &a, m, false, Some(m), node_spec()).await;
        }
        env.create_secret(&ns, "kind-marker", Some(&kind_marker_bootstrap()), None).await;
        env.create_machine(&ns, &a, "m-exec", false, Some("kind-marker"), node_spec()).await;
        env.create_secret(&ns, "dies", Some(&dies_on_restart_bootstrap()), None).await;
        env.create_machine(&ns, &a, "m-dies", false, Some("dies"), node_spec()).await;
        // preLoadImages of a large local image, listed twice: streamed, imported once (the light
        // node has no containerd: the import fails, after the stream was offered).
        env.create_secret(&ns, "ok", Some(&kind_marker_bootstrap().replace("/kind/version", "/etc/capd-test/v")), None).await;
        let preload = json!({"customImage": NODE_IMAGE, "preLoadImages": [capd::docker::specs::DEFAULT_LB_IMAGE, capd::docker::specs::DEFAULT_LB_IMAGE]});
        env.create_machine(&ns, &a, "m-preload", false, Some("ok"), preload).await;
        // A bootstrap Secret of another type (accepted, as upstream does) whose value is not
        // bootstrap data: refused, and its value shows nowhere.
        env.create_secret_of_type(&ns, "opaque", Some(CANARY), None, "Opaque").await;
        env.create_machine(&ns, &a, "m-opaque", false, Some("opaque"), node_spec()).await;
        // A node whose every start fails: retried on its backoff, never at engine speed (each
        // failed start's container is removed, and that removal must not wake the machine).
        env.create_machine(&ns, &a, "m-nostart", false, Some("ok"), json!({"customImage": NOSTART_IMAGE})).await;

        // The impostor: owned by a real Machine whose infrastructureRef names another object.
        let (real, _) = env.create_machine(&ns, &a, "m-real", false, Some("ok"), node_spec()).await;
        let impostor = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
            "metadata": {"name": "m-impostor", "namespace": ns,
                "labels": {"cluster.x-k8s.io/watch-filter": env.id, "cluster.x-k8s.io/cluster-name": a},
                "ownerReferences": [owner_ref(&real, "Machine")]},
            "spec": {"customImage": NODE_IMAGE}
        });
        Api::<DockerMachine>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &serde_json::from_value(impostor).unwrap())
            .await
            .expect("create the impostor");

        // v1beta1 is no way around validation.
        let v1beta1 = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachine",
            "metadata": {"name": "m-badtag", "namespace": ns},
            "spec": {"customImage": "bad tag!!"}
        });
        let ar = kube::api::ApiResource {
            group: "infrastructure.cluster.x-k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
            kind: "DockerMachine".into(),
            plural: "dockermachines".into(),
        };
        let refused = Api::<DynamicObject>::namespaced_with(env.client.clone(), &ns, &ar)
            .create(&PostParams::default(), &serde_json::from_value(v1beta1).unwrap())
            .await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422),
            "v1beta1 customImage \"bad tag!!\" must be refused: {refused:?}"
        );

        // Cluster b: a kubeconfig that would send the manager's token elsewhere.
        let b = format!("{}-b", env.id);
        env.provisioned_cluster(&ns, &b).await;
        kubeconfig_secret(&env, &ns, &b, &token_file_kubeconfig()).await;
        env.create_machine(&ns, &b, "m-tokenfile", false, Some("kind-marker"), node_spec()).await;

        // Cluster c: a custom HAProxy config haproxy refuses.
        let c = format!("{}-c", env.id);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "broken-haproxy", "namespace": ns},
            "data": {"value": "global\n  this-is-not-a-keyword 1\nfrontend x\n  bind *:6443\n"}});
        Api::<ConfigMap>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
            .await
            .unwrap();
        let cluster_c = env.create_cluster(&ns, &c, false).await;
        env.create_docker_cluster(
            &ns,
            &cluster_c,
            json!({"spec": {"loadBalancer": {"customHAProxyConfigTemplateRef": {"name": "broken-haproxy"}}}}),
        )
        .await;

        // Each case ends where it should.
        let outcomes: &[(&str, &str, &[&str])] = &[
            ("m-laughs", "BootstrapCompleted", &["BootstrapDataInvalid"]),
            ("m-gzip", "BootstrapCompleted", &["BootstrapDataInvalid"]),
            ("m-deep", "BootstrapCompleted", &["BootstrapDataInvalid"]),
            ("m-ignition", "BootstrapCompleted", &["BootstrapDataInvalid"]),
            ("m-noisy", "BootstrapCompleted", &["BootstrapFailed"]),
            ("m-reboot", "BootstrapCompleted", &["NodeStoppedDuringBootstrap"]),
            ("m-secretfile", "BootstrapCompleted", &["BootstrapFailed"]),
            ("m-longname", "BootstrapCompleted", &["BootstrapFailed"]),
            ("m-opaque", "BootstrapCompleted", &["BootstrapDataInvalid"]),
            ("m-exec", "ContainerProvisioned", &["WorkloadKubeconfigRefused"]),
            ("m-tokenfile", "ContainerProvisioned", &["WorkloadKubeconfigRefused"]),
            ("m-impostor", "ContainerProvisioned", &["NotMachineInfrastructure"]),
            ("m-nostart", "ContainerProvisioned", &["InvalidSpec"]),
        ];
        let mut messages = BTreeMap::new();
        for (m, type_, reasons) in outcomes {
            messages.insert(*m, wait_reason(&env, &ns, m, type_, reasons).await);
        }
        assert!(messages["m-exec"].contains("user.exec"), "{}", messages["m-exec"]);
        assert!(!pwned.exists(), "the exec plugin of a kubeconfig Secret ran in the manager");
        assert!(messages["m-tokenfile"].contains("not"), "{}", messages["m-tokenfile"]);
        assert!(messages["m-secretfile"].contains("/proc/capd-rs"), "{}", messages["m-secretfile"]);
        assert!(inspect(&docker, &format!("{a}-m-impostor")).await.is_none(), "the impostor got no container");
        eventually(LONG, "the real machine is provisioned", || async {
            env.docker_machine(&ns, "m-real").await.filter(fully_provisioned)
        })
        .await;
        let preload = wait_reason(&env, &ns, "m-preload", "PreLoadedImagesReady", &["PreLoadFailed", "BootstrapFailed"]).await;
        assert!(preload.contains(capd::docker::specs::DEFAULT_LB_IMAGE), "{preload}");
        eventually(LONG, "LoadBalancerAvailable=False for a config haproxy refuses", || async {
            let dc: DockerCluster = env.docker_cluster(&ns, &c).await?;
            dc.cond("LoadBalancerAvailable")
                .filter(|c| c.status == ConditionStatus::False && c.reason == "InvalidHAProxyConfig")
                .map(|_| ())
        })
        .await;

        // A provisioned node whose PID 1 dies at every start: restarted with backoff, reported.
        eventually(LONG, "m-dies provisioned", || async {
            env.docker_machine(&ns, "m-dies").await.filter(fully_provisioned)
        })
        .await;
        let dies = format!("{a}-m-dies");
        let dies_since = unix_now();
        docker_cli(&["kill", "--signal", "TERM", &dies]);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let restarts = starts_since(&starts_seen, dies_since).await.get(&dies).copied().unwrap_or(0);
        assert!(restarts <= 7, "a node that dies at every start was started {restarts} times in 60 s");
        let dm = env.docker_machine(&ns, "m-dies").await.unwrap();
        assert!(!dm.cond_true("Ready"), "a node that keeps dying is not Ready");

        // No loops: over 30 s at rest, nothing is reconciled or restarted more than its backoff
        // allows (a 1 s loop would show 30 reconciles).
        let names: Vec<&str> = outcomes.iter().map(|(m, ..)| *m).collect();
        let before: Vec<usize> = names.iter().map(|m| env.reconciles_of(m)).collect();
        let rest_since = unix_now();
        tokio::time::sleep(Duration::from_secs(30)).await;
        for (m, before) in names.iter().zip(before) {
            let during = env.reconciles_of(m) - before;
            assert!(during <= 4, "{m} reconciled {during} times in 30 s at rest");
        }
        let creates = starts_since(&creates_seen, rest_since).await;
        let nostart = creates.get(&format!("{a}-m-nostart")).copied().unwrap_or(0);
        assert!(nostart <= 4, "a node whose start always fails was created {nostart} times in 30 s at rest");
        let starts = starts_since(&starts_seen, rest_since).await;
        for (container, n) in &starts {
            assert!(
                *n <= 2 || container.ends_with("m-dies"),
                "{container} started {n} times in 30 s at rest"
            );
        }
        let reboot = starts_since(&starts_seen, started).await.get(&format!("{a}-m-reboot")).copied().unwrap_or(0);
        assert!(reboot <= 2, "a bootstrap that stops its node was started {reboot} times");

        // Memory: within the bound above the idle baseline, the whole time.
        sampler.abort();
        let peak = peak.load(Ordering::Relaxed);
        eprintln!("manager RSS: baseline {baseline} KiB, peak {peak} KiB, +{} KiB", peak - baseline);
        assert!(
            peak - baseline <= RSS_BOUND_KIB,
            "the manager's RSS rose by {} KiB over its baseline {baseline} KiB (bound {RSS_BOUND_KIB} KiB)",
            peak - baseline
        );

        // Secrets: not in the log, not in any status, not in any Event.
        assert!(!env.manager_log().contains(CANARY), "a Secret's content reached the manager's log");
        let machines = Api::<DockerMachine>::namespaced(env.client.clone(), &ns).list(&Default::default()).await.unwrap();
        for dm in &machines.items {
            let status = serde_json::to_string(&dm.status).unwrap();
            assert!(!status.contains(CANARY), "{} status holds a secret: {status}", dm.name_any());
        }
        let events = Api::<Event>::namespaced(env.client.clone(), &ns).list(&Default::default()).await.unwrap();
        for e in &events.items {
            let note = e.note.as_deref().unwrap_or_default();
            assert!(!note.contains(CANARY), "an Event holds a secret: {note}");
            assert!(note.len() <= 1024, "an Event note over the API's limit: {} bytes", note.len());
        }
        assert!(
            events.items.iter().any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("m-longname")),
            "the long message was truncated, not dropped"
        );

        // Deleting everything leaves nothing behind, whatever state each case ended in.
        let dms = Api::<DockerMachine>::namespaced(env.client.clone(), &ns);
        for dm in &machines.items {
            env.delete(dms.clone(), &dm.name_any()).await;
        }
        eventually(LONG, "every machine deleted", || async {
            dms.list(&Default::default()).await.ok().filter(|l| l.items.is_empty())
        })
        .await;
        let left = docker_lines(&["ps", "-aq", "--filter", &format!("label={label}"), "--filter", "label=cluster.x-k8s.io/cluster-name"]);
        assert!(left.len() <= 3, "only the three load balancers are left: {left:?}");
    })
    .await;
}
