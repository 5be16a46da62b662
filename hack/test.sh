#!/usr/bin/env bash
# The full test suite, from a fresh machine: installs and starts everything it needs (Docker
# Engine 26.1, 20.10 for the engine-facing part at the end, Podman 4.3 for its light subset; local images, kube-apiserver/etcd and the CAPI managers built from the Go module proxy),
# then runs formatting and lint checks, unit tests, integration tests against the real API server
# and Docker Engine, the packaging checks and the end-to-end test driven by the real Cluster API.
#   hack/test.sh            # everything
#   KEEP_PLANE=0 hack/test.sh   # also stop the local plane at the end (default: leave it up)
#   MIN_FREE_GIB=15 hack/test.sh  # the free disk it insists on after pruning the shared cargo target
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
# Compiled dependencies are kept in the cache: a clean clone (CI) rebuilds only this workspace.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE_DIR/cargo-target}
TARGET_DIR=$CARGO_TARGET_DIR

start=$SECONDS
step() { log "[$((SECONDS - start))s] $*"; }

step "the shared cargo target: drop what nothing used for 2 days, check the disk (xtask prune-target)"
cargo run --locked --quiet -p xtask -- prune-target "$CARGO_TARGET_DIR" --min-free-gib "${MIN_FREE_GIB:-15}"
# The builds of the later steps (cached by version: on a warm machine only the manager's release
# binary, for the kind images, is rebuilt), then clippy: most of a cold run's CPU. Started after
# the first step, in the background at the lowest priority, they use the time the steps below
# spend waiting (on the package archive, the API server, the engine, kubelets) instead of running
# alone (docs/development.md, "How long it takes", has what that saved and cost). Each step asks
# for its builds as before: one under way here is waited for (a build lock, hack/lib.sh's
# locked), one not started yet is built by the step itself, and a failed build is the step's to
# report. In order of need: CAPI (its managers start after the faults), kind and upstream CAPD
# (swap, kind), the manager's binary and cert-manager (kind providers), upstream's e2e suite,
# whose module the test extension compiles in (its build cache reused). Clippy comes last,
# whatever the builds did; its verdict is waited for at the end. It checks in a profile of its
# own (Cargo.toml), so the tests' builds never wait on its lock.
background_work() {
  hack/build-binaries.sh capi kind capd-upstream && hack/build-image.sh --binary-only &&
    hack/build-binaries.sh cert-manager && hack/upstream-e2e.sh build && hack/build-binaries.sh test-extension ||
    echo "a build failed here; the step that needs it builds it again and reports the failure"
  echo "clippy (log: $CLIPPY_LOG)"
  cargo clippy --workspace --all-targets --locked --profile clippy -- -D warnings >"$CLIPPY_LOG" 2>&1
}
CLIPPY_LOG="$CACHE_DIR/clippy.log"
step "in the background, at the lowest priority: the builds of CAPI, kind, upstream CAPD, the manager's release binary, cert-manager, upstream's e2e suite and test extension, then clippy (log: $CACHE_DIR/background.log)"
# A session of its own, so the whole group can be stopped. Where the kernel groups by session
# (kernel.sched_autogroup_enabled), that session is also a scheduling group of its own, which
# competes as an equal with the tests whatever its processes' nice: the group's nice is raised.
# (Raised from inside: only after setsid is it the new group's.)
setsid nice -n 19 bash -c "{ echo 19 >/proc/self/autogroup; } 2>/dev/null || true
  CLIPPY_LOG='$CLIPPY_LOG'; $(declare -f background_work); background_work" >"$CACHE_DIR/background.log" 2>&1 &
PREBUILD=$!
# The integration tests need the CAPI managers down (they create CAPI's objects by hand); if
# something else started them (hack/demo.sh), they are brought back should the run end early.
CAPI_WAS_UP=false
hack/capi.sh status 2>/dev/null | grep -q 'pid ' && CAPI_WAS_UP=true
on_exit() {
  [[ -z $PREBUILD ]] || kill -- "-$PREBUILD" 2>/dev/null || true
  if $CAPI_WAS_UP && ! hack/capi.sh status 2>/dev/null | grep -q 'pid '; then
    hack/capi.sh up >/dev/null 2>&1 || true
  fi
}
trap on_exit EXIT

step "Docker Engine"
hack/docker-engine.sh
step "local images (HAProxy load balancer, light node)"
hack/images.sh
step "kind-style node image (Kubernetes v$K8S_VERSION, built offline; cached by recipe)"
hack/node-image.sh
step "local management plane (etcd, kube-apiserver, CRDs)"
hack/plane.sh up
export CAPD_RS_KUBECONFIG="$KUBECONFIG_PATH"

step "format (clippy runs in the background, above)"
cargo fmt --check

# Integration tests create CAPI objects by hand, so they run before the CAPI managers start.
hack/capi.sh down >/dev/null 2>&1 || true
step "unit tests, CRD tests, Docker adapter tests, controller integration tests"
# Every test manager records the API verbs it used here; tests/rbac.rs checks them at the end.
rm -f "$CARGO_TARGET_DIR/tmp/rbac-usage.txt"
# podnet (hack/podnet) and the figures the fault tests and the soak write (xtask/figures) are
# packages of their own; selected with the product crate, they are built with its dependencies'
# features, so their unit tests add no second build of those dependencies.
cargo test --locked -p capd-rs -p capd-podnet -p xtask-figures --lib --bins --test crds --test conversion --test docker_engine --test controllers --test adoption --test deletion --test rbac --test diagnostics --test hack_scripts --test upstream_flags
cargo test --locked -p capd-runc-shim
step "hostile inputs against one manager: its memory, its loops, its secrets (tests/hostile.rs)"
cargo test --locked --test hostile -- --nocapture
step "fault matrix, fast faults (they restart the API server, etcd and the engine, so they run alone)"
hack/faults.sh --fast

step "CAPI core, kubeadm bootstrap and kubeadm control-plane managers"
hack/capi.sh up
# An instance of its own (suite-demo): a demo the user left running (demo) is neither changed nor
# removed by this one.
export DEMO_NAME=suite-demo DEMO_HEALTH_ADDR=127.0.0.1:9451 DEMO_DIAGNOSTICS_ADDR=127.0.0.1:8444
step "the demo (hack/demo.sh, light flavor, instance $DEMO_NAME), left running beside the rest of the suite, which shares its plane"
# The suite's instance starts afresh. One that an interrupted run left behind (its teardown is
# tests/demo.rs, near the end) may have lost containers since, and `up` keeps what exists.
hack/demo.sh down >"$CACHE_DIR/demo.log" 2>&1 || { tail -20 "$CACHE_DIR/demo.log" >&2; die "hack/demo.sh down of a leftover $DEMO_NAME failed (log: $CACHE_DIR/demo.log)"; }
DEMO_FLAVOR=light hack/demo.sh >>"$CACHE_DIR/demo.log" 2>&1 || { tail -20 "$CACHE_DIR/demo.log" >&2; die "hack/demo.sh failed (log: $CACHE_DIR/demo.log)"; }
step "end-to-end tests driven by the real Cluster API (light nodes; in-memory machines; real Kubernetes nodes)"
cargo test --locked --test e2e
cargo test --locked --test in_memory
cargo test --locked --test e2e_nodes -- --nocapture
# Podman's Docker API (Debian bookworm's podman 4.3, rootful, on a socket of ours): the same tests
# where Podman does what they hold the engine to. Two are left out, for what Podman does
# differently (docs/behaviour.md, "Podman"): it creates a missing bind-mount source instead of
# refusing it (a_missing_host_path_is_refused_not_created), and it splits a host path at a comma,
# ignores device cgroup rules and the cgroup namespace mode (node_container_lifecycle). A third is
# about Docker, not Podman: the images hack/ builds carry no run label
# (the_images_hack_builds_lend_their_containers_no_run_label) is checked on the engine that built
# them; Podman holds only the copies loaded below, not the node image. Real Kubernetes nodes do
# not go Ready on it here (the kubelet stops on a missing cgroup path).
step "Podman 4.3's Docker API (hack/podman.sh): the engine adapter, the light lifecycle, a light cluster driven by the real CAPI"
hack/podman.sh up
hack/podman.sh load capd-rs-test/mini:1 kindest/haproxy:v20230606-42a2262b capd-rs/node:light
(
  eval "$(hack/podman.sh env)"
  cargo test --locked --test docker_engine -- --skip node_container_lifecycle --skip a_missing_host_path_is_refused_not_created \
    --skip the_images_hack_builds_lend_their_containers_no_run_label
  cargo test --locked --test controllers cluster_and_machines_lifecycle -- --exact
  cargo test --locked --test e2e real_capi_drives_a_cluster_from_the_default_template -- --exact
)
hack/podman.sh down
step "swapping upstream CAPD for capd-rs and back with a real workload cluster (upstream's manager: hack/build-binaries.sh capd-upstream, cached by version)"
hack/build-binaries.sh capd-upstream
cargo test --locked --test swap -- --nocapture
step "a kind management cluster from the node image (hack/kind.sh; kind built from the Go module proxy)"
cargo test --locked --test kind_management
step "provider images for kind: CAPI managers, cert-manager, capd-rs (hack/kind-providers.sh; cached by version)"
hack/kind-providers.sh build
step "clusterctl init on a kind cluster, workload clusters from clusterctl generate cluster, clusterctl upgrade, move to a second kind cluster, delete"
cargo test --locked --test kind_clusterctl -- --nocapture
# On the kind cluster upstream's framework makes, as upstream's CI does (its admission plugins, its
# node log collector); hack/kind.sh's clusters are covered by the kind steps above.
step "upstream Cluster API's e2e specs on upstream's own flavors against capd-rs, on the kind cluster upstream's framework makes: QuickStart, QuickStart with ClusterClass, MachineDeployment remediation (E2E_KIND=framework hack/upstream-e2e.sh; every other spec: hack/upstream-e2e.sh run all)"
# The three specs in three Ginkgo processes: they mostly wait on kubelets, so side by side they
# took 466 s where one after another took 730 (2026-11-27, 2 cores).
# A run stopped during this step (a job killed at its time limit) leaves the framework's cluster
# behind, and the framework will not make one over it: the name is this step's, so it goes first.
E2E_KIND=framework hack/upstream-e2e.sh down
E2E_KIND=framework E2E_PROCS=3 CAPD_IMAGE=docker.io/capd-rs/manager:kind CAPD_IMAGE_REBUILD=false \
  hack/upstream-e2e.sh run 'quick-start || quick-start-clusterclass || md-remediation'
step "every verb config/rbac grants was used by a test manager"
cargo test --locked --test rbac -- --ignored every_shipped_verb_is_used

step "the demo is untouched by the suite, touched none of its objects, and its teardown leaves nothing (tests/demo.rs)"
cargo test --locked --test demo -- --include-ignored --nocapture
step "packaging checks (components, clusterctl, container image)"
hack/test-packaging.sh

# The suite above ran on the current engine (hack/docker-engine.sh's default). Debian bookworm's
# Engine 20.10 (API 1.41) is still what many hosts run: the parts that touch the engine's API run
# on it too, on the same images (one data root), then the current engine comes back.
step "Docker Engine 20.10 (bookworm's, API 1.41): the engine adapter, the controllers, the fast faults, one real-node cluster"
hack/capi.sh down >/dev/null 2>&1 || true
(
  export DOCKER_ENGINE=bookworm
  hack/docker-engine.sh
  cargo test --locked --test docker_engine --test controllers
  hack/faults.sh --fast
  hack/capi.sh up
  cargo test --locked --test e2e_nodes a_default_template_cluster_goes_ready_serves_traffic_and_leaves_nothing -- --exact --ignored --nocapture
)
hack/docker-engine.sh

step "clippy's verdict (it ran in the background; log: $CLIPPY_LOG)"
wait "$PREBUILD" || { tail -40 "$CLIPPY_LOG" >&2; die "cargo clippy -D warnings failed (log: $CLIPPY_LOG)"; }
PREBUILD=''  # waited for: nothing left to stop

if [[ "${KEEP_PLANE:-1}" == 0 ]]; then
  hack/capi.sh down
  hack/plane.sh down
fi
step "all tests passed"
