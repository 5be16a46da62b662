//! The hack/ scripts' shared behaviour, run with the real bash (no plane or Docker needed).
use std::process::{Command, Output};

/// Run `script` with the real bash from the repository root, with a scratch cache directory.
fn bash(script: &str) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env(
            "CAPD_RS_CACHE",
            std::env::temp_dir().join("capd-rs-hack-test"),
        )
        .output()
        .expect("bash runs")
}

/// Run `script`, which must succeed, and read its output as one `key value` pair per line.
/// Returns the pairs and the whole output, for assertion messages.
fn bash_key_values(script: &str) -> (std::collections::BTreeMap<String, String>, String) {
    let out = bash(script);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let output = format!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{output}");
    let pairs = stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (pairs, output)
}

/// Under `set -e`, a failing pipeline whose stderr was discarded used to end a script without a
/// word (e.g. reading the docker0 address where that bridge does not exist).
#[test]
fn an_early_exit_names_what_failed() {
    let script = r#"
        source hack/lib.sh
        address() { ip -4 -o addr show dev capd-rs-no-such-device 2>/dev/null | awk '{print $4}'; }
        a=$(address)
        echo "not reached"
    "#;
    let out = bash(script);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "the script stops");
    assert!(!stdout.contains("not reached"), "{stdout}");
    assert!(
        stderr.contains("ERROR")
            && stderr.contains("a=$(address)")
            && stderr.contains("failed (exit 1)"),
        "the failing command and its status are named: {stderr:?}"
    );
}

/// `hack/plane.sh up` right after a stop: a process still shutting down (kube-apiserver drains
/// its watches for up to a minute) is waited for until it exits, then replaced; it used to be
/// waited on for readiness it would never reach, until a timeout.
#[test]
fn a_process_that_exits_instead_of_getting_ready_is_replaced() {
    let script = r#"
        source hack/lib.sh
        PLANE_DIR=$(mktemp -d)
        # A stand-in for a dying server: ours (its command line names PLANE_DIR), never ready,
        # gone in 2 s.
        # The child is this script's copy, then `bash -c "exec -a ..."`, then the stand-in: wait
        # for the last (a command line read mid-exec can even be empty).
        execd() { until [[ "$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)" == "fake-server $PLANE_DIR"* ]]; do sleep 0.05; done; }
        bash -c "exec -a 'fake-server $PLANE_DIR' sleep 2" >/dev/null 2>&1 &
        echo $! > "$PLANE_DIR/pid"; execd $!
        never_ready() { false; }
        always_ready() { true; }
        start=$SECONDS
        if ready_or_gone "$PLANE_DIR/pid" 60 "fake server" never_ready; then echo ready; else echo "replace after $((SECONDS - start))s"; fi
        [[ -f "$PLANE_DIR/pid" ]] || echo "pidfile removed"
        bash -c "exec -a 'fake-server $PLANE_DIR' sleep 5" >/dev/null 2>&1 &
        echo $! > "$PLANE_DIR/pid"; execd $!
        if ready_or_gone "$PLANE_DIR/pid" 60 "fake server" always_ready; then echo "kept the ready one"; fi
        if ready_or_gone "$PLANE_DIR/none" 60 "fake server" always_ready; then echo wrong; else echo "none running"; fi
        kill %2 2>/dev/null || true
        rm -rf "$PLANE_DIR"
    "#;
    let out = bash(script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("replace after ")),
        "the dying process is replaced: {stdout:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waited: u64 = lines[0]
        .trim_start_matches("replace after ")
        .trim_end_matches('s')
        .parse()
        .unwrap();
    assert!(
        waited <= 5,
        "replaced once it exited, not at the timeout: {waited}s"
    );
    assert_eq!(
        &lines[1..],
        ["pidfile removed", "kept the ready one", "none running"]
    );
}

/// A demo's pid file outlives its manager (a machine restart), and the pid may since belong to
/// another process: `hack/demo.sh down` used to take that process for the manager, send it
/// SIGTERM, and (in `up`) wait a minute for a manager it had not started. Only a process whose
/// command line is this demo instance's manager is the manager.
#[test]
fn a_demo_pid_file_naming_another_process_is_not_the_manager() {
    let script = r#"
        source hack/lib.sh
        dir="$PLANE_DIR/hack-test-demo"
        mkdir -p "$dir"
        sleep 30 &
        other=$!
        echo "$other" > "$dir/manager.pid"
        DEMO_NAME=hack-test-demo bash hack/demo.sh down > /dev/null 2>&1 || true
        echo "other $(kill -0 "$other" 2>/dev/null && echo alive || echo signalled)"
        echo "pidfile $([[ -f $dir/manager.pid ]] && echo kept || echo removed)"
        kill "$other" 2>/dev/null || true
    "#;
    let (got, output) = bash_key_values(script);
    assert_eq!(
        got.get("other").map(String::as_str),
        Some("alive"),
        "{output}"
    );
    assert_eq!(
        got.get("pidfile").map(String::as_str),
        Some("removed"),
        "{output}"
    );
}

/// `down` finds the instance's manager by its namespace, whatever addresses the call's environment
/// gives: run without the health address `up` had, it used to miss the running manager, start a
/// second one and stop only that, leaving the first to loop on a network `down` then removed.
#[test]
fn a_demo_manager_is_found_by_its_namespace_whatever_the_addresses() {
    let script = r#"
        source hack/lib.sh
        dir="$PLANE_DIR/hack-test-demo-ns"
        mkdir -p "$dir"
        # A stand-in with a manager's command line (the `; :` keeps bash from exec'ing sleep).
        bash -c 'sleep 30; :' "$PLANE_DIR/manager" --health-addr=127.0.0.1:9 \
          --namespace=capd-rs-hack-test-demo-ns --container-label=x >/dev/null 2>&1 &
        manager=$!
        echo "$manager" > "$dir/manager.pid"
        DEMO_NAME=hack-test-demo-ns DEMO_HEALTH_ADDR=127.0.0.1:1 bash hack/demo.sh down > /dev/null 2>&1 || true
        echo "manager $(kill -0 "$manager" 2>/dev/null && echo alive || echo stopped)"
        kill "$manager" 2>/dev/null || true
    "#;
    let (got, output) = bash_key_values(script);
    assert_eq!(
        got.get("manager").map(String::as_str),
        Some("stopped"),
        "{output}"
    );
}

/// The e2e tests look for the binaries hack/lib.sh builds by version (clusterctl under
/// `capi-v<CAPI_VERSION>`, the node image `kindest/node:v<K8S_VERSION>`): a default changed in
/// one place only would send them after a build that does not exist.
#[test]
fn the_tests_expect_the_versions_hack_builds() {
    let out = bash("source hack/lib.sh && echo \"$K8S_VERSION $CAPI_VERSION\"");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let built: Vec<&str> = stdout.split_whitespace().collect();
    let tests = include_str!("common/capi_e2e.rs");
    let expected = |name: &str| {
        let prefix = format!("pub const {name}: &str = \"");
        tests
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.strip_suffix("\";"))
            .unwrap_or_else(|| panic!("tests/common/capi_e2e.rs defines {name}"))
            .to_string()
    };
    assert_eq!(
        built,
        [expected("K8S_VERSION"), expected("CAPI_VERSION")],
        "hack/lib.sh's K8S_VERSION and CAPI_VERSION"
    );
}

/// Upstream's e2e config (hack/upstream-e2e/config.yaml) names the node images hack/lib.sh builds:
/// a version changed in one place only would leave an upgrade spec waiting for an image that was
/// never built.
#[test]
fn the_upstream_e2e_config_names_the_versions_hack_builds() {
    let out = bash(
        "source hack/lib.sh && echo \"$K8S_VERSION $UPGRADE_FROM $ETCD_VERSION $COREDNS_VERSION\"",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Vec<&str> = stdout.split_whitespace().collect();
    let config = include_str!("../hack/upstream-e2e/config.yaml");
    let var = |name: &str| {
        let prefix = format!("  {name}: ");
        config
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("config.yaml sets {name}"))
            .trim()
            .to_string()
    };
    assert_eq!(
        [
            var("KUBERNETES_VERSION"),
            var("KUBERNETES_VERSION_UPGRADE_TO"),
            var("KUBERNETES_VERSION_UPGRADE_FROM"),
            var("ETCD_VERSION_UPGRADE_TO"),
            var("COREDNS_VERSION_UPGRADE_TO"),
        ],
        [
            format!("v{}", v[0]),
            format!("v{}", v[0]),
            format!("v{}", v[1]),
            format!("{}-0", v[2]),
            format!("v{}", v[3]),
        ],
        "config.yaml's versions and hack/lib.sh's"
    );
    // The adoption specs' own version: hack/upstream-e2e.sh builds its node image, which needs
    // the etcd and CoreDNS versions its kubeadm deploys.
    let adoption = var("KUBERNETES_VERSION_ADOPTION");
    let deps = bash(&format!(
        "source hack/lib.sh && kubeadm_deps {}",
        adoption.trim_start_matches('v')
    ));
    assert!(
        deps.status.success() && !deps.stdout.is_empty(),
        "hack/lib.sh kubeadm_deps knows {adoption}"
    );
}

/// The node image is cached by its recipe key (`hack/node-image.sh recipe`): the key must change
/// with podnet's package (hack/podnet) and with the build helper that compiles it, else an image
/// with an old podnet is kept; and it must not change with the manager's code or with the rest
/// of hack/lib.sh, else an 8-minute build runs for nothing. Each edit is made in a copy of the
/// repository; a `docker` that never answers stands in, so a script that ignored `recipe` would
/// stop before building anything.
#[test]
fn the_node_image_recipe_follows_podnet_and_its_build_only() {
    let script = r#"
        dir=$(mktemp -d)
        trap 'rm -rf "$dir"' EXIT
        tar -c --exclude=./.git --exclude=./target . | tar -x -C "$dir"
        mkdir "$dir/fakebin"
        printf '#!/bin/sh\nexit 1\n' > "$dir/fakebin/docker"
        chmod +x "$dir/fakebin/docker"
        cd "$dir"
        key() { PATH="$dir/fakebin:$PATH" bash hack/node-image.sh recipe; }
        echo "base $(key)"
        echo "again $(key)"
        echo '// the manager changes' >> src/lib.rs
        echo "manager $(key)"
        echo '# another helper changes' >> hack/lib.sh
        echo "lib-other $(key)"
        echo '// podnet changes' >> hack/podnet/src/main.rs
        echo "podnet $(key)"
        sed -i 's/--locked --target/--locked --offline --target/' hack/lib.sh
        echo "build $(key)"
    "#;
    let (keys, output) = bash_key_values(script);
    assert_eq!(keys.len(), 6, "{output}");
    assert!(
        keys.values().all(|k| k.len() == 12),
        "12-digit keys: {output}"
    );
    assert_eq!(keys["again"], keys["base"], "the key is stable");
    assert_eq!(keys["manager"], keys["base"], "the manager's code");
    assert_eq!(keys["lib-other"], keys["base"], "another helper");
    assert_ne!(keys["podnet"], keys["base"], "podnet's source");
    assert_ne!(keys["build"], keys["podnet"], "the build helper");
}

/// Tilt's live update (tilt.d/capd-rs.tiltfile) relies on hack/tilt/start.sh restarting the
/// manager after restart.sh stopped it, on the Pod's SIGTERM still reaching the manager, and on
/// any other exit ending the container with the manager's own status. `sleep` and `sh -c` stand
/// in for the manager; plain `sh` for the image's busybox.
#[test]
fn tilt_start_restarts_the_manager_after_restart_and_passes_sigterm_and_status_on() {
    let script = r#"
        dir=$(mktemp -d)
        trap 'rm -rf "$dir"' EXIT
        export CAPD_RS_RUN_DIR=$dir
        wait_for() { for _ in $(seq 100); do eval "$1" && return 0; sleep 0.05; done; return 1; }
        sh hack/tilt/start.sh sleep 30 > "$dir/out" 2>&1 &
        starter=$!
        wait_for '[ -s "$dir/manager.pid" ]'
        first=$(cat "$dir/manager.pid")
        sh hack/tilt/restart.sh
        wait_for '[ "$(cat "$dir/manager.pid")" != "$first" ] && [ -s "$dir/manager.pid" ]'
        second=$(cat "$dir/manager.pid")
        echo "restarted $([ "$second" != "$first" ] && echo yes || echo no)"
        echo "first $(kill -0 "$first" 2>/dev/null && echo alive || echo gone)"
        echo "second $(kill -0 "$second" 2>/dev/null && echo alive || echo gone)"
        echo "starter $(kill -0 "$starter" 2>/dev/null && echo alive || echo gone)"
        kill -TERM "$starter"
        wait "$starter"
        echo "stopped $?"
        wait_for '! kill -0 "$second" 2>/dev/null'
        echo "after-stop $(kill -0 "$second" 2>/dev/null && echo alive || echo gone)"
        sh hack/tilt/start.sh sh -c 'exit 3'
        echo "exited $?"
    "#;
    let (got, output) = bash_key_values(script);
    for (key, want) in [
        ("restarted", "yes"),
        ("first", "gone"),
        ("second", "alive"),
        ("starter", "alive"),
        // The manager's status on SIGTERM (128 + 15), not a restart.
        ("stopped", "143"),
        ("after-stop", "gone"),
        ("exited", "3"),
    ] {
        assert_eq!(
            got.get(key).map(String::as_str),
            Some(want),
            "{key}: {output}"
        );
    }
}

/// Two runs of hack/upstream-e2e.sh on one kind cluster must not overlap: the second refuses,
/// naming the cluster, while the first holds it (here a `flock` stands in for the first run).
/// The refusal comes before anything touches kind or Docker.
#[test]
fn a_second_upstream_e2e_run_on_the_same_kind_cluster_is_refused() {
    let script = r#"
        lock="$CAPD_RS_CACHE/kind/capd-rs-lock-test.lock"
        mkdir -p "$(dirname "$lock")"
        flock "$lock" sleep 5 > /dev/null 2>&1 &
        holder=$!
        for _ in $(seq 100); do flock -n "$lock" true || break; sleep 0.05; done
        KIND_CLUSTER=capd-rs-lock-test bash hack/upstream-e2e.sh down > /dev/null 2> "$CAPD_RS_CACHE/err"
        echo "held $?"
        grep -q 'another hack/upstream-e2e.sh is using the kind cluster capd-rs-lock-test' "$CAPD_RS_CACHE/err" \
          && echo "message named" || echo "message $(tr '\n' ' ' < "$CAPD_RS_CACHE/err")"
        kill "$holder"
    "#;
    let (got, output) = bash_key_values(script);
    assert_ne!(got.get("held").map(String::as_str), Some("0"), "{output}");
    assert!(got.contains_key("held"), "{output}");
    assert_eq!(
        got.get("message").map(String::as_str),
        Some("named"),
        "{output}"
    );
}

/// hack/test.sh builds in the background what its later steps ask for again: a step asking for a
/// build under way (hack/lib.sh's `locked`) must wait for it and then see its result, not build
/// the same files beside it; a build under another name must not wait.
#[test]
fn a_build_asked_for_while_it_is_under_way_waits_for_it() {
    let script = r#"
        source hack/lib.sh
        out="$CAPD_RS_CACHE/lock-test"; rm -rf "$out"; mkdir -p "$out"
        first() { touch "$out/started"; sleep 1; echo built > "$out/result"; }
        locked lock-test first &
        for _ in $(seq 200); do [[ -e $out/started ]] && break; sleep 0.05; done
        locked other-lock-test bash -c "[[ -e '$out/result' ]] && echo 'other waited' || echo 'other free'"
        locked lock-test bash -c "echo \"second sees \$(cat '$out/result' 2>/dev/null || echo nothing)\""
        wait
    "#;
    let (got, output) = bash_key_values(script);
    assert_eq!(
        got.get("second").map(String::as_str),
        Some("sees built"),
        "{output}"
    );
    assert_eq!(
        got.get("other").map(String::as_str),
        Some("free"),
        "{output}"
    );
    assert!(
        output.contains("waiting for the build of lock-test under way"),
        "{output}"
    );
}

/// `hack/plane.sh restart-etcd KILL` under load: the killed etcd had stopped answering but its
/// last thread still held the peer port, and the new etcd refused to start on a port "taken by a
/// process this script did not start". A restart now waits until the old process has exited and
/// let go of its ports.
#[test]
fn a_restart_waits_until_the_old_server_has_let_go_of_its_ports() {
    let script = r#"
        source hack/lib.sh
        dir=$(mktemp -d)
        # A stand-in server: listens; the first SIGTERM closes its socket and it lives on, the
        # second ends it. Each step is announced in a file, so nothing here depends on timing.
        python3 -c '
import signal, socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
def term(*_):
    if s.fileno() < 0: sys.exit(0)
    s.close(); open(sys.argv[1], "w").close()
signal.signal(signal.SIGTERM, term)
while True: time.sleep(0.05)
' "$dir/closed" > "$dir/port" &
        pid=$!
        until [[ -s "$dir/port" ]]; do sleep 0.05; done
        port=$(<"$dir/port")
        released "$pid" "$port" && echo "released while running" || echo "held while running"
        released 999999999 "$port" && echo "released while another listens" || echo "held by another"
        kill -TERM "$pid"
        until [[ -e "$dir/closed" ]]; do sleep 0.05; done
        port_free "$port" && echo "port free"
        released "$pid" "$port" && echo "released while alive" || echo "held while alive"
        kill -TERM "$pid"
        wait_for 10 "the stand-in to exit" released "$pid" "$port"
        echo "released once exited"
        wait "$pid" 2>/dev/null || true
        released "$pid" "$port" && echo "released once reaped"
        rm -rf "$dir"
    "#;
    let out = bash(script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "held while running",
            "held by another",
            "port free",
            "held while alive",
            "released once exited",
            "released once reaped"
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
