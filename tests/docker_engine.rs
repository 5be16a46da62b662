//! Integration tests of `BollardRuntime` against the real Docker Engine at /var/run/docker.sock,
//! or at the unix socket `DOCKER_HOST` names (how the same tests run against Podman's Docker API).
//!
//! They fail (never skip) when the engine is unavailable. Every container and network they create
//! carries `capd-rs.test/run=<run id>`, unique per test and process, and only objects with that
//! label are ever removed (swept at the start and at the end of each test, even when it fails).
//! No registry is reachable, so a tiny image is imported from files of the host (see
//! [`ensure_test_image`]).
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListContainersOptionsBuilder, ListNetworksOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use capd::docker::engine::BollardRuntime;
use capd::docker::labels::{self, Owner};
use capd::docker::specs::{NodeParams, node_container_spec};
use capd::docker::{
    AddressUse, BindMount, ContainerRuntime, ContainerSpec, ContainerState, NetworkSpec,
    NodePrivilege, PortPublish, RuntimeError,
};
use futures::StreamExt;

const RUN_LABEL: &str = "capd-rs.test/run";
const TEST_IMAGE: &str = "capd-rs-test/mini:1";
/// Files copied from the host into the test image, with the shared libraries they need.
const TEST_BINARIES: &[&str] = &[
    "/bin/sh",
    "/bin/sleep",
    "/bin/cat",
    "/bin/mkdir",
    "/bin/test",
];
/// This host refuses `--privileged` (CAP_SYS_RESOURCE is outside its bounding set).
const HOST_LACKS: &str = "SYS_RESOURCE";

fn run_id(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{nanos:x}-{test}", std::process::id())
}

fn run_labels(id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(RUN_LABEL.to_string(), id.to_string())])
}

/// The engine's unix socket: `DOCKER_HOST` when it names one, else the default.
fn socket() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .map(|h| h.trim_start_matches("unix://").to_string())
        .filter(|h| h.starts_with('/'))
        .unwrap_or_else(|| "/var/run/docker.sock".to_string())
}

fn raw_docker() -> Docker {
    Docker::connect_with_unix(&socket(), 120, bollard::API_DEFAULT_VERSION)
        .expect("the engine's socket must exist for these tests")
}

async fn runtime() -> BollardRuntime {
    BollardRuntime::connect(Some(&socket()))
        .await
        .expect("the Docker Engine must be reachable for these tests")
}

/// Remove every container and network carrying this run's label, and nothing else.
async fn sweep(id: &str) {
    let docker = raw_docker()
        .negotiate_version()
        .await
        .expect("negotiate the API version");
    let selector = format!("{RUN_LABEL}={id}");
    let filters = HashMap::from([("label", vec![selector.as_str()])]);
    let containers = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .expect("list test containers");
    for c in containers {
        assert_eq!(
            c.labels
                .as_ref()
                .and_then(|l| l.get(RUN_LABEL))
                .map(String::as_str),
            Some(id)
        );
        let Some(cid) = c.id else { continue };
        let _ = docker
            .remove_container(
                &cid,
                Some(
                    RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await;
    }
    let networks = docker
        .list_networks(Some(
            ListNetworksOptionsBuilder::default()
                .filters(&filters)
                .build(),
        ))
        .await
        .expect("list test networks");
    for n in networks {
        assert_eq!(
            n.labels
                .as_ref()
                .and_then(|l| l.get(RUN_LABEL))
                .map(String::as_str),
            Some(id)
        );
        if let Some(nid) = n.id {
            let _ = docker.remove_network(&nid).await;
        }
    }
}

/// Run `body` with sweeps before and after; the after-sweep happens even if the body panics.
async fn with_run<F, Fut>(test: &str, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let id = run_id(test);
    sweep(&id).await;
    let outcome = tokio::spawn(body(id.clone())).await;
    sweep(&id).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The regular file behind `path` (symlinks resolved) and the shared libraries `ldd` lists for it.
fn files_for(binary: &str) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from(binary)];
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .expect("run ldd");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let candidate = line
            .split("=>")
            .last()
            .unwrap_or("")
            .split_whitespace()
            .next()
            .unwrap_or("");
        if candidate.starts_with('/') {
            files.push(PathBuf::from(candidate));
        }
    }
    files
}

fn mini_rootfs_tar() -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for dir in [
        "bin", "etc", "tmp", "var", "run", "proc", "sys", "dev", "lib", "lib64",
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(if dir == "tmp" { 0o1777 } else { 0o755 });
        h.set_size(0);
        h.set_cksum();
        builder
            .append_data(&mut h, format!("{dir}/"), std::io::empty())
            .expect("tar dir");
    }
    let mut seen = std::collections::BTreeSet::new();
    for binary in TEST_BINARIES {
        for file in files_for(binary) {
            if !seen.insert(file.clone()) {
                continue;
            }
            let data =
                std::fs::read(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o755);
            h.set_cksum();
            let inside = file.strip_prefix("/").unwrap_or(Path::new(""));
            builder
                .append_data(&mut h, inside, data.as_slice())
                .expect("tar file");
        }
    }
    builder.into_inner().expect("finish tar")
}

static TEST_IMAGE_READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Import `capd-rs-test/mini:1` (a shell, sleep, cat, mkdir and test with their libraries, run as
/// `sleep infinity`) unless it is already present.
async fn ensure_test_image() {
    TEST_IMAGE_READY
        .get_or_init(|| async {
            let docker = raw_docker()
                .negotiate_version()
                .await
                .expect("negotiate the API version");
            if docker.inspect_image(TEST_IMAGE).await.is_ok() {
                return;
            }
            let options = CreateImageOptionsBuilder::default()
                .from_src("-")
                .repo("capd-rs-test/mini")
                .tag("1")
                .changes(vec![
                    r#"CMD ["/bin/sleep","infinity"]"#.to_string(),
                    "LABEL capd-rs.test/image=mini".to_string(),
                ])
                .build();
            let body = bollard::body_full(mini_rootfs_tar().into());
            let mut progress = docker.create_image(Some(options), Some(body), None);
            while let Some(item) = progress.next().await {
                item.expect("import the test image");
            }
            docker
                .inspect_image(TEST_IMAGE)
                .await
                .expect("the imported test image");
        })
        .await;
}

fn network_name(id: &str) -> String {
    format!("capd-rs-test-{id}")
}

async fn ensure_test_network(rt: &BollardRuntime, id: &str) -> String {
    let name = network_name(id);
    rt.ensure_network(&NetworkSpec {
        name: name.clone(),
        labels: run_labels(id),
    })
    .await
    .expect("ensure the test network");
    name
}

/// A plain container of the test image: no extra privileges, no restart policy.
fn plain_spec(id: &str, suffix: &str, network: &str, cmd: Option<Vec<String>>) -> ContainerSpec {
    let name = format!("capd-rs-test-{id}-{suffix}");
    ContainerSpec {
        hostname: name.clone(),
        name,
        image: TEST_IMAGE.to_string(),
        labels: run_labels(id),
        env: vec![],
        entrypoint: None,
        cmd,
        network: network.to_string(),
        ports: vec![],
        tmpfs: vec![],
        volumes: vec![],
        mounts: vec![],
        privilege: NodePrivilege::None,
        security_opt: vec![],
        sysctls: BTreeMap::new(),
        cgroupns_private: false,
        tty: false,
        restart_on_failure: None,
    }
}

/// The networks the engine's name filter matches (a substring of their names).
async fn networks_matching(name: &str) -> Vec<bollard::models::Network> {
    let docker = raw_docker().negotiate_version().await.unwrap();
    let filters = HashMap::from([("name", vec![name])]);
    let options = ListNetworksOptionsBuilder::default()
        .filters(&filters)
        .build();
    docker.list_networks(Some(options)).await.unwrap()
}

/// `1.45` -> 45.
fn api_minor(v: &str) -> u32 {
    v.split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("API version {v}"))
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn engine_is_reachable_and_version_negotiated() {
    let rt = runtime().await;
    rt.ping().await.expect("ping");
    let version = rt.api_version();
    assert!(version.starts_with("1."), "negotiated version {version}");
    // What the engine says of itself, as `docker version` shows it.
    let engine = rt.engine();
    let cli = std::process::Command::new("docker")
        .args([
            "version",
            "-f",
            "{{.Server.Version}} {{.Server.APIVersion}}",
        ])
        .output()
        .expect("docker version");
    let shown = String::from_utf8_lossy(&cli.stdout).trim().to_string();
    assert_eq!(shown, format!("{} {}", engine.version, engine.api_version));
    // bollard speaks the engine's newest API unless its own is older.
    assert_eq!(engine.negotiated, version);
    let (engine_api, spoken) = (api_minor(&engine.api_version), api_minor(&version));
    assert!(
        spoken <= engine_api,
        "spoke {version} to an engine of {}",
        engine.api_version
    );
    // Negotiating, then reading the engine's version: two requests, once per connect.
    let counts = rt.call_counts();
    assert_eq!(counts.get("version"), Some(&2));
    assert_eq!(counts.get("ping"), Some(&1));
}

#[tokio::test]
async fn ensure_network_creates_exactly_one_network() {
    with_run("net", |id| async move {
        let rt = runtime().await;
        let spec = NetworkSpec {
            name: network_name(&id),
            labels: run_labels(&id),
        };
        // Concurrent and repeated calls: still one network (Engine 20.10 itself would make two).
        let (a, b) = tokio::join!(rt.ensure_network(&spec), rt.ensure_network(&spec));
        a.expect("first ensure_network");
        b.expect("second ensure_network");
        rt.ensure_network(&spec)
            .await
            .expect("third ensure_network");

        let found = networks_matching(&spec.name).await;
        let exact: Vec<_> = found
            .iter()
            .filter(|n| n.name.as_deref() == Some(spec.name.as_str()))
            .collect();
        assert_eq!(exact.len(), 1, "networks named {}: {found:?}", spec.name);
        assert_eq!(exact[0].driver.as_deref(), Some("bridge"));
        assert_eq!(
            exact[0].labels.as_ref().and_then(|l| l.get(RUN_LABEL)),
            Some(&id)
        );

        // A network whose name merely contains ours is not taken for ours.
        let longer = NetworkSpec {
            name: format!("{}-x", spec.name),
            labels: run_labels(&id),
        };
        rt.ensure_network(&longer)
            .await
            .expect("ensure the longer-named network");
        let short = NetworkSpec {
            name: spec.name[..spec.name.len() - 1].to_string(),
            labels: run_labels(&id),
        };
        rt.ensure_network(&short)
            .await
            .expect("ensure a network whose name is a prefix");
        // Listing by the short name (a substring of the others) finds all three, once each.
        let found = networks_matching(&short.name).await;
        for wanted in [&spec.name, &longer.name, &short.name] {
            let n = found
                .iter()
                .filter(|n| n.name.as_deref() == Some(wanted.as_str()))
                .count();
            assert_eq!(n, 1, "network {wanted}: {found:?}");
        }
        assert_eq!(rt.call_counts().get("network_create"), Some(&3));
    })
    .await;
}

/// Managers (runtimes, each with its own lock) making one network at once: an engine from API
/// 1.44 on makes one and refuses the others (409), which join it. Engine 20.10 makes several of
/// one name, as it always did; every call succeeds there too.
#[tokio::test]
async fn managers_racing_for_one_network_all_join_it() {
    with_run("netrace", |id| async move {
        let mut managers = Vec::new();
        for _ in 0..4 {
            managers.push(runtime().await);
        }
        let spec = NetworkSpec {
            name: network_name(&id),
            labels: run_labels(&id),
        };
        // Each lists, finds nothing, and creates: all but the first create meet the name.
        let joined =
            futures::future::join_all(managers.iter().map(|rt| rt.ensure_network(&spec))).await;
        for (i, r) in joined.into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("manager {i}'s ensure_network: {e}"));
        }
        let found = networks_matching(&spec.name).await;
        let named = found
            .iter()
            .filter(|n| n.name.as_deref() == Some(spec.name.as_str()))
            .count();
        if api_minor(&managers[0].engine().api_version) >= 44 {
            assert_eq!(named, 1, "{found:?}");
        } else {
            assert!(named >= 1, "{found:?}");
        }
        let creates = managers
            .iter()
            .map(|rt| rt.call_counts().get("network_create").copied().unwrap_or(0))
            .sum::<u64>();
        assert!(creates >= 1, "one of them created it");
    })
    .await;
}

#[tokio::test]
async fn node_container_lifecycle() {
    ensure_test_image().await;
    with_run("node", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        let owner = Owner {
            cluster_name: "c1",
            cluster_namespace: "ns",
            kind: "DockerMachine",
            name: "m1",
            uid: "uid-1",
        };
        let name = format!("capd-rs-test-{id}-cp");
        let mut spec = node_container_spec(&NodeParams {
            name: &name,
            image: TEST_IMAGE,
            role: labels::ROLE_CONTROL_PLANE,
            labels: labels::container_labels(&owner, labels::ROLE_CONTROL_PLANE, &run_labels(&id)),
            network: &network,
            extra_mounts: &[],
            privilege: NodePrivilege::AllCapabilities {
                drop: vec![HOST_LACKS.to_string()],
            },
            ipv6: false,
            proxy_env: vec![],
            kind_mode: capd::docker::kind_images::KindMode::Mode0_20,
        });
        // A host path holding a `:` is one path, not options (a string bind would read
        // `ro,z` after it as options, or fail).
        let host_dir = std::env::temp_dir().join(format!("capd-rs-test-{id}:ro,z"));
        std::fs::create_dir_all(&host_dir).unwrap();
        std::fs::write(host_dir.join("f"), "from the host").unwrap();
        spec.mounts.push(BindMount {
            host_path: host_dir.display().to_string(),
            container_path: "/mnt/host".into(),
            read_only: false,
            create_host_path: false,
        });

        rt.ensure_image(TEST_IMAGE)
            .await
            .expect("the local test image is present");
        let info = rt
            .create_and_start(&spec)
            .await
            .expect("create and start the node container");
        assert_eq!(info.name, name);
        assert!(info.is_running(), "state {:?}", info.state);
        assert_eq!(info.labels.get(RUN_LABEL), Some(&id));
        assert_eq!(
            info.labels.get(labels::KIND_ROLE).map(String::as_str),
            Some("control-plane")
        );
        assert!(
            info.ipv4
                .as_deref()
                .is_some_and(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok()),
            "ipv4 {:?}",
            info.ipv4
        );
        let port = *info
            .host_ports
            .get("6443/tcp")
            .expect("6443/tcp is published");
        assert!(port > 0);
        assert_eq!(info.image, TEST_IMAGE);

        let again = rt
            .inspect(&name)
            .await
            .expect("inspect")
            .expect("the container exists");
        assert_eq!(again, info);
        let listed = rt.list(&run_labels(&id)).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, name);
        assert_eq!(listed[0].ipv4, info.ipv4);
        assert_eq!(listed[0].host_ports.get("6443/tcp"), Some(&port));
        assert_eq!(listed[0].state, Some(ContainerState::Running));
        let selector = labels::cluster_role_selector("c1", "ns", labels::ROLE_CONTROL_PLANE);
        let mut selector_and_run = selector.clone();
        selector_and_run.extend(run_labels(&id));
        assert_eq!(
            rt.list(&selector_and_run)
                .await
                .expect("list by role")
                .len(),
            1
        );
        let mut wrong = selector_and_run.clone();
        wrong.insert(labels::KIND_ROLE.into(), labels::ROLE_WORKER.into());
        assert!(
            rt.list(&wrong)
                .await
                .expect("list by other role")
                .is_empty()
        );

        // The node options reached the engine.
        let docker = raw_docker().negotiate_version().await.unwrap();
        let raw = docker.inspect_container(&name, None).await.unwrap();
        let host = raw.host_config.unwrap();
        assert_eq!(host.cap_add, Some(vec!["ALL".to_string()]));
        // Engine 20.10 adds every capability the kernel knows for "ALL", so the one the host
        // lacks is dropped; a newer engine adds only those the host offers and refuses to drop
        // one it does not know, so the node is created again without the drop.
        let api = api_minor(&rt.engine().api_version);
        let dropped = host.cap_drop.unwrap_or_default();
        let refused_drop = dropped.is_empty();
        if api <= 41 {
            assert_eq!(dropped, [HOST_LACKS.to_string()]);
        } else {
            assert!(
                dropped.is_empty() || dropped == [HOST_LACKS.to_string()],
                "{dropped:?}"
            );
        }
        assert_eq!(
            host.device_cgroup_rules,
            Some(vec!["a *:* rwm".to_string()])
        );
        assert_eq!(
            host.tmpfs
                .as_ref()
                .map(|t| t.contains_key("/run") && t.contains_key("/tmp")),
            Some(true)
        );
        assert_eq!(
            host.restart_policy.and_then(|r| r.maximum_retry_count),
            Some(1)
        );
        assert!(
            host.security_opt
                .unwrap_or_default()
                .contains(&"seccomp=unconfined".to_string())
        );
        assert_eq!(
            raw.config
                .and_then(|c| c.env)
                .unwrap_or_default()
                .iter()
                .filter(|e| e.starts_with("KUBECONFIG="))
                .count(),
            1
        );
        assert!(
            raw.mounts
                .unwrap_or_default()
                .iter()
                .any(|m| m.destination.as_deref() == Some("/var")),
            "anonymous /var volume"
        );

        // The bind with a `:` in its host path: writable (no `ro` option leaked in), the host's file.
        let read = rt
            .exec(
                &name,
                &argv(&["sh", "-c", "cat /mnt/host/f && echo w > /mnt/host/w"]),
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            (read.exit_code, read.stdout.as_slice()),
            (0, b"from the host".as_slice())
        );
        assert_eq!(std::fs::read_to_string(host_dir.join("w")).unwrap(), "w\n");

        // Same name again: Conflict.
        match rt.create_and_start(&spec).await {
            Err(RuntimeError::Conflict(m)) => assert!(m.contains("already in use"), "{m}"),
            other => panic!("expected Conflict, got {other:?}"),
        }

        // Exec: exit code, stdout and stderr kept apart.
        let out = rt
            .exec(
                &name,
                &argv(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
                None,
            )
            .await
            .expect("exec");
        assert_eq!(out.exit_code, 3);
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");

        // Exec with stdin: write a file (on the /tmp tmpfs), read it back. Big enough to be split.
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let put = rt
            .exec(&name, &argv(&["sh", "-c", "cat > /tmp/x"]), Some(&payload))
            .await
            .expect("exec with stdin");
        assert!(put.success(), "write through stdin: {put:?}");
        // Reading it back keeps only the tail of the output: memory is bounded whatever a
        // command prints.
        let got = rt
            .exec(&name, &argv(&["cat", "/tmp/x"]), None)
            .await
            .expect("read back");
        assert_eq!(got.exit_code, 0);
        assert_eq!(got.stdout.len(), capd::docker::tail::EXEC_OUTPUT_TAIL);
        assert!(
            payload.ends_with(&got.stdout),
            "the tail read back differs from the content's end"
        );
        let empty = rt
            .exec(
                &name,
                &argv(&["sh", "-c", "cat > /tmp/empty && test ! -s /tmp/empty"]),
                Some(b""),
            )
            .await
            .unwrap();
        assert_eq!(empty.exit_code, 0, "empty stdin: {empty:?}");

        // A command that ignores a large input returns at once, with its own exit code (a
        // pending stdin write must not hold the call until the engine drops the connection).
        let big = vec![b'x'; 2_000_000];
        let started = std::time::Instant::now();
        let ignored = rt
            .exec(&name, &argv(&["sh", "-c", "exit 4"]), Some(&big))
            .await
            .expect("exec ignoring stdin");
        assert_eq!(ignored.exit_code, 4);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "took {:?}",
            started.elapsed()
        );

        // Exec of a missing program: the engine reports it as a failed exec (exit code 126/127).
        let missing = rt.exec(&name, &argv(&["/no/such/program"]), None).await;
        match missing {
            Ok(o) => assert_ne!(o.exit_code, 0),
            Err(e) => assert!(!matches!(e, RuntimeError::Unavailable(_)), "{e}"),
        }

        // Remove twice; then it is gone.
        rt.remove(&name).await.expect("remove");
        let _ = std::fs::remove_dir_all(&host_dir);
        rt.remove(&name).await.expect("remove again");
        assert_eq!(rt.inspect(&name).await.expect("inspect after remove"), None);

        let counts = rt.call_counts();
        assert_eq!(
            counts.get("image_pull"),
            None,
            "a present image is never pulled: {counts:?}"
        );
        // Two nodes; an engine that refused the drop was asked once more, for the first only.
        let creates = if refused_drop { 3 } else { 2 };
        assert_eq!(counts.get("container_create"), Some(&creates), "{counts:?}");
        assert!(counts.get("exec_create").copied().unwrap_or(0) >= 5);
    })
    .await;
}

/// Polls `probe` every 100 ms for up to 5 s; true as soon as `done` holds for what it saw.
async fn within_5s<T, F, Fut>(mut probe: F, done: impl Fn(&T) -> bool) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    for _ in 0..50 {
        if done(&probe().await) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn kill_delivers_signals() {
    ensure_test_image().await;
    with_run("kill", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        // The shell is PID 1, and PID 1 ignores a signal it has no handler for: a SIGHUP
        // that arrives before `trap` has run is lost for good. So the script marks when its
        // trap is in place, and the test sends nothing before it sees that mark.
        let script = "trap 'echo reloaded > /tmp/hup' HUP; : > /tmp/trapped; \
                      while true; do sleep 0.2; done";
        let spec = plain_spec(&id, "sig", &network, Some(argv(&["/bin/sh", "-c", script])));
        let info = rt.create_and_start(&spec).await.expect("create and start");
        assert!(info.is_running());
        let in_container = |cmd: &'static [&'static str]| {
            let (rt, name) = (&rt, &spec.name);
            move || async move { rt.exec(name, &argv(cmd), None).await.expect("exec") }
        };
        let trapped = within_5s(in_container(&["test", "-e", "/tmp/trapped"]), |o| {
            o.success()
        });
        assert!(trapped.await, "the shell installed its SIGHUP trap");

        rt.kill(&spec.name, "SIGHUP").await.expect("send SIGHUP");
        let seen = within_5s(in_container(&["cat", "/tmp/hup"]), |o| {
            o.success() && o.stdout == b"reloaded\n"
        });
        assert!(seen.await, "the trap for SIGHUP ran");

        rt.kill(&spec.name, "SIGKILL").await.expect("send SIGKILL");
        let state = || async {
            rt.inspect(&spec.name)
                .await
                .expect("inspect")
                .and_then(|i| i.state)
        };
        let exited = within_5s(state, |s| *s == Some(ContainerState::Exited));
        assert!(exited.await, "SIGKILL stopped the container");

        // A stopped container starts again.
        rt.start(&spec.name).await.expect("start again");
        assert!(rt.inspect(&spec.name).await.unwrap().unwrap().is_running());

        match rt
            .kill(&format!("capd-rs-test-{id}-missing"), "SIGHUP")
            .await
        {
            Err(RuntimeError::NotFound(_)) => {}
            other => panic!("expected NotFound, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn start_failure_removes_the_container() {
    ensure_test_image().await;
    with_run("fail", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        let spec = plain_spec(&id, "bad", &network, Some(argv(&["/no/such/entrypoint"])));
        let err = rt
            .create_and_start(&spec)
            .await
            .expect_err("a missing executable cannot start");
        assert!(
            err.to_string().contains("no such file") || err.to_string().contains("not found"),
            "{err}"
        );
        assert_eq!(
            rt.inspect(&spec.name).await.expect("inspect"),
            None,
            "the failed container was removed"
        );
        assert_eq!(rt.call_counts().get("container_remove"), Some(&1));
    })
    .await;
}

/// What the engine's network says of an address: held by a container's endpoint, free in the
/// network's subnet, or off it; and held no more once the container is removed.
#[tokio::test]
async fn the_network_says_who_holds_an_address() {
    ensure_test_image().await;
    with_run("addr", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        let spec = plain_spec(&id, "holder", &network, Some(argv(&["/bin/sleep", "600"])));
        let c = rt.create_and_start(&spec).await.expect("create");
        let ip: std::net::IpAddr = c.ipv4.as_deref().expect("an IPv4").parse().unwrap();
        assert_eq!(
            rt.address_use(&network, ip).await.expect("address_use"),
            AddressUse::HeldBy(spec.name.clone())
        );
        let std::net::IpAddr::V4(v4) = ip else {
            panic!("{ip}")
        };
        let next = std::net::IpAddr::from(std::net::Ipv4Addr::from(u32::from(v4) + 1));
        assert_eq!(
            rt.address_use(&network, next).await.unwrap(),
            AddressUse::Free
        );
        let loopback = "127.0.0.1".parse().unwrap();
        assert_eq!(
            rt.address_use(&network, loopback).await.unwrap(),
            AddressUse::OffNetwork
        );
        assert_eq!(
            rt.address_use(&format!("{network}-none"), ip)
                .await
                .unwrap(),
            AddressUse::OffNetwork
        );

        rt.remove(&spec.name).await.expect("remove");
        // A second remove of a container that is gone (or going) is success too.
        rt.remove(&spec.name).await.expect("remove again");
        let released = within_5s(
            || async { rt.address_use(&network, ip).await.unwrap() },
            |u| *u == AddressUse::Free,
        )
        .await;
        assert!(released, "{ip} still held after the removal");
    })
    .await;
}

#[tokio::test]
async fn a_network_removed_behind_the_adapters_back_is_made_again() {
    ensure_test_image().await;
    with_run("netgone", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        raw_docker()
            .remove_network(&network)
            .await
            .expect("remove the network by hand");
        let spec = plain_spec(&id, "n", &network, None);
        let err = rt
            .create_and_start(&spec)
            .await
            .expect_err("its network is gone");
        // Docker creates the container and fails its start (404); Podman refuses the create
        // with a 500 that names the missing network. Either way: not found, not an engine down.
        assert!(matches!(err, RuntimeError::NotFound(_)), "{err:?}");

        // The next attempt, as a reconcile makes it: the network first, then the container.
        ensure_test_network(&rt, &id).await;
        assert_eq!(networks_matching(&network).await.len(), 1, "made again");
        let info = rt
            .create_and_start(&spec)
            .await
            .expect("starts on the new network");
        assert!(info.is_running());
    })
    .await;
}

#[tokio::test]
async fn missing_objects() {
    let rt = runtime().await;
    let id = run_id("missing");
    assert_eq!(
        rt.inspect(&format!("capd-rs-test-{id}-none"))
            .await
            .expect("inspect"),
        None
    );
    rt.remove(&format!("capd-rs-test-{id}-none"))
        .await
        .expect("removing a missing container is success");
    // An all-hex name must not resolve to another container by ID prefix.
    assert_eq!(rt.inspect("0").await.expect("inspect a hex name"), None);
    rt.remove("0")
        .await
        .expect("remove a hex name that no container has");
    // Nor may a signal, an exec or a start reach another container through an ID prefix.
    assert!(matches!(
        rt.kill("0", "SIGHUP").await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(matches!(
        rt.start("0").await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(matches!(
        rt.exec("0", &argv(&["true"]), None).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(rt.list(&run_labels(&id)).await.expect("list").is_empty());
    assert!(matches!(
        rt.exec(&format!("capd-rs-test-{id}-none"), &argv(&["true"]), None)
            .await,
        Err(RuntimeError::NotFound(_))
    ));
}

/// Files in and out through the engine's archive: no exec, so no tool in the image is needed (a
/// distroless load balancer image has no shell and no `cat`), and a stopped container serves as
/// well as a running one.
#[tokio::test]
async fn files_go_in_and_out_through_the_engines_archive() {
    ensure_test_image().await;
    with_run("archive", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        let spec = plain_spec(&id, "files", &network, None);
        let name = spec.name.clone();
        rt.create_and_start(&spec).await.expect("create");
        let content = b"global\n  log stdout format raw local0\n".repeat(1000);
        rt.write_file(&name, "/etc/haproxy.cfg", &content)
            .await
            .expect("write through the archive");
        let inside = rt
            .exec(&name, &argv(&["cat", "/etc/haproxy.cfg"]), None)
            .await
            .expect("look from inside");
        assert!(
            content.ends_with(&inside.stdout) && inside.stdout.len() >= 1024,
            "as written, seen from inside"
        );
        let stat = path_stat(&name, "/etc/haproxy.cfg").await;
        assert_eq!(stat.size as usize, content.len());
        assert_eq!(stat.file_mode & 0o777, 0o644, "mode {:o}", stat.file_mode);
        let limit = content.len() as u64;
        assert_eq!(rt.read_file(&name, "/etc/haproxy.cfg", limit).await.expect("read"), Some(content.clone()));
        assert!(
            matches!(rt.read_file(&name, "/etc/haproxy.cfg", limit - 1).await, Err(RuntimeError::Rejected(m)) if m.contains("larger than")),
            "a file beyond the limit is refused, not read"
        );
        assert_eq!(rt.read_file(&name, "/etc/none", limit).await.expect("read a missing file"), None);
        assert!(
            matches!(rt.read_file(&name, "/etc", limit).await, Err(RuntimeError::Rejected(m)) if m.contains("not a regular file")),
            "a directory is not a file"
        );
        // Replaced, also while the container is stopped (no exec could run then).
        docker_stop(&name).await;
        rt.write_file(&name, "/etc/haproxy.cfg", b"second\n").await.expect("write while stopped");
        assert_eq!(rt.read_file(&name, "/etc/haproxy.cfg", limit).await.expect("read while stopped"), Some(b"second\n".to_vec()));
        assert!(matches!(
            rt.read_file(&format!("capd-rs-test-{id}-none"), "/etc/x", 1).await,
            Err(RuntimeError::NotFound(_))
        ), "a missing container is not a missing file");
    })
    .await;
}

/// What the engine says of `path` in container `name` (its size and mode), without an exec.
async fn path_stat(name: &str, path: &str) -> bollard::container::PathStatResponse {
    let options = bollard::query_parameters::ContainerArchiveInfoOptionsBuilder::default()
        .path(path)
        .build();
    raw_docker()
        .negotiate_version()
        .await
        .unwrap()
        .get_container_archive_info(name, Some(options))
        .await
        .unwrap_or_else(|e| panic!("stat {path} in {name}: {e}"))
}

/// `docker stop` of a test container, at once.
async fn docker_stop(name: &str) {
    let docker = raw_docker().negotiate_version().await.unwrap();
    let options = bollard::query_parameters::StopContainerOptionsBuilder::default()
        .t(0)
        .build();
    docker
        .stop_container(name, Some(options))
        .await
        .expect("stop");
}

#[tokio::test]
async fn missing_image_reports_the_engines_pull_error() {
    let rt = runtime().await;
    // A registry on a closed loopback port: the engine's pull fails without leaving the machine.
    let image = format!("127.0.0.1:9/capd-rs-test/absent:{}", run_id("img"));
    let result = tokio::time::timeout(Duration::from_secs(300), rt.ensure_image(&image))
        .await
        .expect("pull gives up in time");
    match result {
        Err(RuntimeError::Image { image: i, message }) => {
            assert_eq!(i, image);
            assert!(!message.is_empty());
            // Verbatim: the engine's words, not ours.
            assert!(!message.starts_with("pull image"), "{message}");
            eprintln!("engine pull error: {message}");
        }
        other => panic!("expected RuntimeError::Image, got {other:?}"),
    }
    assert_eq!(rt.call_counts().get("image_pull"), Some(&1));
}

#[tokio::test]
async fn connect_to_a_missing_socket_is_unavailable() {
    match BollardRuntime::connect(Some("unix:///nonexistent/docker.sock")).await {
        Err(RuntimeError::Unavailable(m)) => assert!(m.contains("/nonexistent/docker.sock"), "{m}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(matches!(
        BollardRuntime::connect(Some("ftp://x")).await,
        Err(RuntimeError::Rejected(_))
    ));
}

#[tokio::test]
async fn lb_style_container_publishes_both_ports() {
    ensure_test_image().await;
    with_run("lb", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        let cluster = format!("capd-rs-test-{id}");
        let spec = capd::docker::specs::lb_container_spec(&capd::docker::specs::LbParams {
            cluster_name: &cluster,
            image: TEST_IMAGE,
            network: &network,
            labels: run_labels(&id),
            ipv6_only: false,
        });
        assert_eq!(spec.name, format!("{cluster}-lb"));
        let info = rt
            .create_and_start(&spec)
            .await
            .expect("create and start the LB-shaped container");
        assert!(
            info.host_ports.get("6443/tcp").is_some_and(|p| *p > 0),
            "{:?}",
            info.host_ports
        );
        assert!(
            info.host_ports.get("8404/tcp").is_some_and(|p| *p > 0),
            "{:?}",
            info.host_ports
        );
        // A fixed host port is honoured too.
        let mut fixed = plain_spec(&id, "fixed", &network, None);
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        fixed.ports = vec![PortPublish {
            container_port: "80/tcp".into(),
            host_ip: "127.0.0.1".into(),
            host_port: Some(free),
        }];
        let info = rt.create_and_start(&fixed).await.expect("fixed port");
        assert_eq!(info.host_ports.get("80/tcp"), Some(&free));
    })
    .await;
}

/// A TLS-terminating proxy in front of the local engine that demands a client certificate from
/// its CA, like an engine run with `--tlsverify`. Returns its port and the PKI directory.
mod tls_engine {
    use std::{path::Path, sync::Arc};

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
        KeyPair,
    };
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::net::{TcpListener, UnixStream};

    fn ca() -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    fn leaf(
        ca: &CertifiedIssuer<'static, KeyPair>,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> (String, KeyPair) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        (params.signed_by(&key, ca).unwrap().pem(), key)
    }

    /// Write a client's `ca.pem`, `cert.pem` and `key.pem` (as DOCKER_CERT_PATH holds them).
    fn write_client(dir: &Path, ca: &CertifiedIssuer<'static, KeyPair>) {
        std::fs::create_dir_all(dir).unwrap();
        let (cert, key) = leaf(ca, &[], ExtendedKeyUsagePurpose::ClientAuth);
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("cert.pem"), cert).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    }

    /// Start the proxy. `dir/good` holds a client signed by the engine's CA, `dir/foreign` one
    /// signed by another CA (that also trusts the engine).
    pub async fn start(dir: &Path) -> (u16, tokio::task::JoinHandle<()>) {
        let engine_ca = ca();
        write_client(&dir.join("good"), &engine_ca);
        let other_ca = ca();
        write_client(&dir.join("foreign"), &other_ca);
        std::fs::write(dir.join("foreign/ca.pem"), engine_ca.pem()).unwrap();

        let (server_pem, server_key) = leaf(
            &engine_ca,
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(engine_ca.der().to_vec()))
            .unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let server_der =
            rustls::pki_types::pem::PemObject::from_pem_slice(server_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![server_der],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client without a certificate of our CA fails the handshake here.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if let Ok(mut engine) = UnixStream::connect(super::socket()).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut engine).await;
                    }
                });
            }
        });
        (port, task)
    }
}

#[tokio::test]
async fn remote_engine_over_tls_with_client_certificates() {
    use capd::docker::engine::EngineOptions;
    let dir = std::env::temp_dir().join(format!("capd-rs-tls-{}", run_id("tls")));
    let (port, proxy) = tls_engine::start(&dir).await;
    let tls = |client: &str| EngineOptions {
        host: Some(format!("tcp://127.0.0.1:{port}")),
        tls_verify: true,
        cert_path: Some(dir.join(client)),
        allow_plain_tcp: false,
    };

    // The engine's CA and a client certificate it trusts: a working runtime.
    let rt = BollardRuntime::connect_with(&tls("good"))
        .await
        .expect("TLS with a trusted client certificate");
    assert!(!rt.api_version().is_empty());
    assert!(
        rt.list(&run_labels(&run_id("tls")))
            .await
            .unwrap()
            .is_empty()
    );

    // A client certificate from another CA: the handshake is refused, reported as unavailable.
    match BollardRuntime::connect_with(&tls("foreign")).await {
        Err(RuntimeError::Unavailable(m)) => eprintln!("foreign client refused: {m}"),
        other => panic!("expected the foreign client to be refused, got {other:?}"),
    }
    // No certificates where DOCKER_CERT_PATH points: a clear configuration error.
    match BollardRuntime::connect_with(&tls("missing")).await {
        Err(RuntimeError::Rejected(m)) => assert!(m.contains("ca.pem"), "{m}"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    // Garbage where the certificates should be: no connection (bollard reads such files as
    // holding no certificate, so the handshake fails: retried, with the error in the log).
    let garbage = dir.join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    for file in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::write(garbage.join(file), "not a PEM file").unwrap();
    }
    assert!(BollardRuntime::connect_with(&tls("garbage")).await.is_err());
    // Plain HTTP to the TLS port is not what TLS-verify users get.
    let plain = EngineOptions {
        tls_verify: false,
        ..tls("good")
    };
    assert!(BollardRuntime::connect_with(&plain).await.is_err());
    proxy.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A user's host path that does not exist is refused by the engine (a structured mount), not
/// created as a root-owned directory as a `Binds` string would be.
#[tokio::test]
async fn a_missing_host_path_is_refused_not_created() {
    ensure_test_image().await;
    with_run("nomnt", |id| async move {
        let rt = runtime().await;
        let network = ensure_test_network(&rt, &id).await;
        let missing = std::env::temp_dir().join(format!("capd-rs-test-{id}-absent"));
        let mut spec = plain_spec(&id, "m", &network, None);
        spec.mounts = vec![BindMount {
            host_path: missing.display().to_string(),
            container_path: "/mnt/x".into(),
            read_only: true,
            create_host_path: false,
        }];
        match rt.create_and_start(&spec).await {
            Err(RuntimeError::Rejected(m)) => assert!(m.contains("does not exist"), "{m}"),
            other => panic!("expected Rejected, got {other:?}"),
        }
        assert!(
            !missing.exists(),
            "the engine created {}",
            missing.display()
        );
    })
    .await;
}

/// The test process's resident set, in KiB.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// An image of 120 MiB that does not compress (one file of pseudo-random bytes), imported once.
const BIG: &str = "capd-rs-test/big:1";

async fn ensure_big_image() {
    let docker = raw_docker().negotiate_version().await.unwrap();
    if docker.inspect_image(BIG).await.is_ok() {
        return;
    }
    let mut data = vec![0u8; 120 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in data.chunks_mut(8) {
        // xorshift64: fast, and nothing in it for a compressor.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let mut builder = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    builder
        .append_data(&mut h, "blob", data.as_slice())
        .expect("tar the blob");
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo("capd-rs-test/big")
        .tag("1")
        .changes(vec!["LABEL capd-rs.test/image=big".to_string()])
        .build();
    let body = bollard::body_full(builder.into_inner().expect("finish tar").into());
    let mut progress = docker.create_image(Some(options), Some(body), None);
    while let Some(item) = progress.next().await {
        item.expect("import the big test image");
    }
}

/// `preLoadImages`: an image goes from the engine's export into a command's stdin in the
/// container byte for byte, without the manager holding it: an image of 120 MiB moves while the
/// test process's RSS grows by less than 32 MiB. A missing image is `RuntimeError::Image` and
/// runs nothing.
#[tokio::test]
async fn image_import_streams_the_tarball_into_the_container() {
    ensure_test_image().await;
    ensure_big_image().await;
    with_run("import", |id| async move {
        let rt = runtime().await;
        assert!(rt.image_present(BIG).await.expect("inspect"));
        // What `docker save` gives, counted as it streams.
        let docker = raw_docker().negotiate_version().await.unwrap();
        let mut expected = 0u64;
        let mut export = docker.export_image(BIG);
        while let Some(chunk) = export.next().await {
            expected += chunk.expect("export").len() as u64;
        }
        assert!(expected > 100 << 20, "a large image: {expected} bytes");

        let network = ensure_test_network(&rt, &id).await;
        let spec = plain_spec(&id, "imp", &network, Some(argv(&["sleep", "300"])));
        rt.create_and_start(&spec).await.expect("create and start");
        let before = vm_rss_kib();
        let out = rt
            .import_image(
                &spec.name,
                BIG,
                &argv(&["/bin/sh", "-c", "cat > /tmp/image.tar"]),
            )
            .await
            .expect("import");
        let grown = vm_rss_kib().saturating_sub(before);
        assert!(out.success(), "{out:?}");
        let stat = path_stat(&spec.name, "/tmp/image.tar").await;
        assert_eq!(stat.size as u64, expected, "every byte arrived");
        eprintln!("imported {expected} bytes; RSS grew by {grown} KiB");
        assert!(grown < 32 << 10, "RSS grew by {grown} KiB");

        let missing = "capd-rs-test/absent:never";
        match rt
            .import_image(
                &spec.name,
                missing,
                &argv(&["/bin/sh", "-c", "cat > /tmp/m"]),
            )
            .await
        {
            Err(RuntimeError::Image { image, .. }) => assert_eq!(image, missing),
            other => panic!("expected RuntimeError::Image, got {other:?}"),
        }
        assert!(
            !rt.file_exists(&spec.name, "/tmp/m").await.unwrap(),
            "nothing ran"
        );
        assert!(!rt.image_present(missing).await.unwrap());
    })
    .await;
}

/// The images hack/ builds (hack/images.sh, hack/node-image.sh) carry a label of their own, never
/// the run label: the engine copies an image's labels onto its containers, and `hack/plane.sh
/// down` removes every container with the run label's key, so a kind node or a workload node made
/// from our node image would be removed with the plane (an e2e run's, a demo's).
#[tokio::test]
async fn the_images_hack_builds_lend_their_containers_no_run_label() {
    let docker = raw_docker()
        .negotiate_version()
        .await
        .expect("negotiate the API version");
    // hack/lib.sh's K8S_VERSION, as the suite's node image was built with it.
    let k8s = std::env::var("K8S_VERSION").unwrap_or_else(|_| {
        let lib = include_str!("../hack/lib.sh");
        let line = lib
            .lines()
            .find_map(|l| l.strip_prefix("K8S_VERSION=${K8S_VERSION:-"))
            .expect("hack/lib.sh sets K8S_VERSION");
        line.trim_end_matches('}').to_string()
    });
    let node_image = format!("kindest/node:v{k8s}");
    for image in [
        "kindest/haproxy:v20230606-42a2262b",
        "capd-rs/node:light",
        node_image.as_str(),
    ] {
        let labels = docker
            .inspect_image(image)
            .await
            .unwrap_or_else(|e| panic!("{image} (built by hack/test.sh before this test): {e}"))
            .config
            .and_then(|c| c.labels)
            .unwrap_or_default();
        assert!(
            !labels.contains_key(RUN_LABEL),
            "{image} lends {RUN_LABEL} to every container: {labels:?}"
        );
        assert_eq!(
            labels.get("capd-rs.image/built-by").map(String::as_str),
            Some("capd-rs-hack"),
            "{image}: {labels:?}"
        );
    }
}
